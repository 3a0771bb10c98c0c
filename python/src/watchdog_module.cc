// dtsim._watchdog_c: the watchdog of `dtsim run --timeout` for a rank that never gives the
// interpreter back (python/dtsim/run/launcher.py). `dtsim run`'s ranks are threads of one process;
// its main thread checks every few hundred milliseconds that the rank holding the turn has not run
// past --timeout, and ends the run with that rank's stack when it has. A rank inside one C call
// that holds the GIL throughout (a regular expression that backtracks, a C extension's loop) keeps
// the main thread from running at all, so that check never comes. This thread is no Python
// thread: it needs no GIL, and when the main thread has not checked in for longer than the limit it
// writes which rank held the turn and every thread's Python stack (as faulthandler writes them) to
// standard error, then ends the process with the exit status it was given. Nothing else (no
// report, no recording) can be written then: that would need the interpreter.
//
// Without LibTorch or dtsim's libraries (pybind11 from torch's headers only), like dtsim._files_c.
#include <dlfcn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace py = pybind11;

namespace {

using Clock = std::chrono::steady_clock;

// The rank holding the turn, written by the scheduler at each handoff through a memoryview of this
// cell (python/dtsim/run/scheduler.py), read only when the watchdog fires: -1 before the first.
alignas(64) int32_t holder_cell[1] = {-1};

// CPython's own thread dumper (faulthandler's), looked up at run time: it is not part of the
// stable API, and where an interpreter lacks it the stacks are left out (said in the message).
using DumpThreads = const char* (*)(int, PyInterpreterState*, PyThreadState*);

void WriteText(const std::string& text) {
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::write(STDERR_FILENO, text.data() + done, text.size() - done);
    if (n <= 0) return;
    done += static_cast<size_t>(n);
  }
}

class Watchdog {
 public:
  // Starts the thread, or re-arms it: the process ends `limit_s` seconds after the last Kick()
  // unless Disarm() comes first.
  void Arm(double limit_s, int exit_code, std::string what) {
    std::lock_guard<std::mutex> lock(mu_);
    limit_ = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s));
    exit_code_ = exit_code;
    what_ = std::move(what);
    last_kick_ = Clock::now();
    armed_ = true;
    if (!started_) {
      started_ = true;
      std::thread([this] { Loop(); }).detach();
    }
    cv_.notify_all();
  }

  // The main thread checked in; `holder` is the rank holding the turn (-1: none).
  void Kick(int holder) {
    std::lock_guard<std::mutex> lock(mu_);
    last_kick_ = Clock::now();
    holder_ = holder;
  }

  // `thread_id` (threading.get_ident()) is rank `rank`'s thread, named in the message.
  void NameThread(unsigned long thread_id, int rank) {
    std::lock_guard<std::mutex> lock(mu_);
    ranks_[thread_id] = rank;
  }

  void Disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
    cv_.notify_all();
  }

 private:
  void Loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      if (!armed_) {
        cv_.wait(lock);
        continue;
      }
      const Clock::time_point deadline = last_kick_ + limit_;
      if (Clock::now() < deadline) {
        cv_.wait_until(lock, deadline);
        continue;
      }
      Fire();  // does not return
    }
  }

  void Fire() {
    std::string text = "dtsim run: error: ";
    const int holder = __atomic_load_n(&holder_cell[0], __ATOMIC_RELAXED) >= 0
                           ? __atomic_load_n(&holder_cell[0], __ATOMIC_RELAXED)
                           : holder_;
    text += holder >= 0 ? "rank " + std::to_string(holder) : std::string("a rank");
    text += " " + what_ + "\n";
    auto* dump = reinterpret_cast<DumpThreads>(::dlsym(RTLD_DEFAULT, "_Py_DumpTracebackThreads"));
    if (dump == nullptr) {
      text += "(this interpreter does not let dtsim print the threads' Python stacks)\n";
      WriteText(text);
      ::_exit(exit_code_);
    }
    if (!ranks_.empty()) {
      text += "the ranks' threads:";
      char id[32];
      for (const auto& [thread_id, rank] : ranks_) {
        std::snprintf(id, sizeof(id), "0x%016lx", thread_id);
        text += std::string(" ") + id + " is rank " + std::to_string(rank) + ";";
      }
      text.back() = '\n';
    }
    text += "every thread's Python stack, most recent call first:\n";
    WriteText(text);
    dump(STDERR_FILENO, PyInterpreterState_Main(), nullptr);
    ::_exit(exit_code_);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool armed_ = false;
  Clock::duration limit_{};
  Clock::time_point last_kick_{};
  int holder_ = -1;
  int exit_code_ = 1;
  std::string what_;
  std::map<unsigned long, int> ranks_;
};

Watchdog& TheWatchdog() {
  static Watchdog* watchdog = new Watchdog();  // never destroyed: its thread may outlive exit
  return *watchdog;
}

}  // namespace

PYBIND11_MODULE(_watchdog_c, m) {
  m.doc() = "dtsim run's watchdog for a rank stuck in one C call (use dtsim.run, not this module)";
  // arm(limit_s, exit_code, what): the process ends limit_s seconds after the last kick, writing
  // "dtsim run: error: rank <holder> <what>" and every thread's stack to standard error.
  m.def(
      "arm",
      [](double limit_s, int exit_code, std::string what) {
        if (!(limit_s > 0)) throw py::value_error("limit_s: expected a positive number of seconds");
        TheWatchdog().Arm(limit_s, exit_code, std::move(what));
      },
      py::arg("limit_s"), py::arg("exit_code"), py::arg("what"));
  m.def(
      "kick", [](int holder) { TheWatchdog().Kick(holder); }, py::arg("holder"));
  m.def(
      "name_thread",
      [](unsigned long thread_id, int rank) { TheWatchdog().NameThread(thread_id, rank); },
      py::arg("thread_id"), py::arg("rank"));
  m.def("disarm", [] { TheWatchdog().Disarm(); });
  // holder_cell(): a writable memoryview of one int32, where the scheduler keeps the rank that
  // holds the turn (what the message names when the watchdog fires).
  m.def("holder_cell", [] {
    return py::memoryview::from_buffer(holder_cell, {1}, {sizeof(int32_t)}, /*readonly=*/false);
  });
}
