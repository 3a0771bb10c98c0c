// dtsim's one observer API: an ordered list of observers of one kind, each hearing every
// event while it is registered. Collectives (CollectiveObserver, per Collectives object), DTensor
// ops (ops::OpObserver, per thread) and modules (model::ModuleObserver, per thread) all keep their
// observers in one of these, so every recorder registers, scopes and pauses itself the same way.
// No LibTorch (library dtsim_trace).
#pragma once

#include <algorithm>
#include <vector>

#include "dtsim/layout/error.h"

namespace dtsim {

template <typename Observer>
class Observers {
 public:
  // Appends `observer` (not owned): it hears every event after those added before it. An observer
  // is added once and removed before it dies (Scoped does both). InternalError for null or one
  // already added.
  void Add(Observer* observer) {
    if (observer == nullptr) throw InternalError("Observers::Add: null observer");
    if (std::find(list_.begin(), list_.end(), observer) != list_.end())
      throw InternalError("Observers::Add: observer added twice");
    list_.push_back(observer);
  }
  void Remove(Observer* observer) {  // absent: nothing
    list_.erase(std::remove(list_.begin(), list_.end(), observer), list_.end());
  }
  // Someone hears events now: an observer is registered and none of them is paused.
  bool observed() const { return !list_.empty() && paused_ == 0; }

  // Calls `notify(observer)` on each observer in the order added, when observed(). An observer
  // added or removed by a callback takes effect from the next event.
  template <typename Fn>
  void Notify(Fn&& notify) const {
    if (!observed()) return;
    if (list_.size() == 1) {
      notify(*list_.front());
      return;
    }
    const std::vector<Observer*> snapshot = list_;
    for (Observer* observer : snapshot) notify(*observer);
  }

  // `observer` hears every event while this lives.
  class Scoped {
   public:
    Scoped(Observers& observers, Observer* observer) : observers_(observers), observer_(observer) {
      observers_.Add(observer_);
    }
    ~Scoped() { observers_.Remove(observer_); }
    Scoped(const Scoped&) = delete;
    Scoped& operator=(const Scoped&) = delete;

   private:
    Observers& observers_;
    Observer* observer_;
  };

  // No observer hears the events made while this lives (helpers that gather a run's own results).
  class Paused {
   public:
    explicit Paused(Observers& observers) : observers_(observers) { ++observers_.paused_; }
    ~Paused() { --observers_.paused_; }
    Paused(const Paused&) = delete;
    Paused& operator=(const Paused&) = delete;

   private:
    Observers& observers_;
  };

 private:
  std::vector<Observer*> list_;
  int paused_ = 0;  // Paused alive
};

}  // namespace dtsim
