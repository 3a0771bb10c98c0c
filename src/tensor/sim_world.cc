// SimWorld (see include/dtsim/tensor/sim_world.h): one world's per-rank generators and settings.
#include "dtsim/tensor/sim_world.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/Generator.h>

#include <atomic>
#include <map>

namespace dtsim {

struct SimWorld::State {
  std::mutex mu;  // guards base_seed and generators
  uint64_t base_seed = 0;
  std::map<int64_t, at::Generator> generators;
  std::atomic<bool> replica_sharing{true};
};

SimWorld::SimWorld() : state_(std::make_unique<State>()) {}
SimWorld::~SimWorld() = default;

std::shared_ptr<SimWorld> SimWorld::Create(uint64_t base_seed) {
  std::shared_ptr<SimWorld> world(new SimWorld());
  world->state_->base_seed = base_seed;
  return world;
}

void SimWorld::SetSeed(uint64_t base_seed) {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->base_seed = base_seed;
  state_->generators.clear();
}

uint64_t SimWorld::seed() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->base_seed;
}

void SimWorld::SetReplicaSharing(bool enabled) { state_->replica_sharing.store(enabled); }
bool SimWorld::replica_sharing() const {
  return state_->replica_sharing.load(std::memory_order_relaxed);
}

std::mutex& SimWorld::rng_mutex() { return state_->mu; }

at::Generator& SimWorld::GeneratorLocked(int64_t rank) {
  auto it = state_->generators.find(rank);
  if (it == state_->generators.end()) {
    at::Generator g =
        at::detail::createCPUGenerator(state_->base_seed + static_cast<uint64_t>(rank));
    it = state_->generators.emplace(rank, std::move(g)).first;
  }
  return it->second;
}

}  // namespace dtsim
