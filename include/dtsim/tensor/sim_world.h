// SimWorld: the state of one simulated world that is not a tensor — each rank's random generator
// and whether replicas share storage. Every LocalTensor belongs to one world: the world of the
// simulated Collectives that made it (LocalCollectives owns one), or of the LocalTensor inputs of
// the op or MapShards that produced it, or a fresh world of its own when MakeLocalTensor is given
// none. Two worlds in one process (two simulations, a test beside a benchmark) do not see each
// other's seeds, random streams or settings; nothing here is process-wide.
//
// Example:
//   auto comm = MakeLocalCollectives();
//   comm->sim_world()->SetSeed(7);            // rank r draws from a generator seeded 7 + r
//   at::Tensor noise = at::rand_like(dt.to_local());   // differs per rank, the same on every run
//
// (The MemoryMeter's rank scope is not world state: c10's allocator is process-wide, and the scope
// only says which rank's work the current thread is running; see memory_meter.h.)
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>

namespace at {
class Generator;
}

namespace dtsim {

class SimWorld {
 public:
  // A world whose rank r draws from a CPU generator seeded `base_seed + r`, with replica sharing
  // on.
  static std::shared_ptr<SimWorld> Create(uint64_t base_seed = 0);
  ~SimWorld();
  SimWorld(const SimWorld&) = delete;
  SimWorld& operator=(const SimWorld&) = delete;

  // Per-rank random numbers: rank r draws from its own CPU generator seeded `base_seed + r`, so
  // at::rand_like(lt) differs per rank and the same program gives the same values on every run.
  // Resets every rank's generator. Ops that take an explicit Generator use that generator (shared
  // by the ranks, in rank order).
  void SetSeed(uint64_t base_seed);
  uint64_t seed() const;

  // Copy-on-write replicas (ShareReplica in local_tensor.h) on (the default) or off (every replica
  // a real copy: for measurements and tests).
  void SetReplicaSharing(bool enabled);
  bool replica_sharing() const;

  // For the LocalTensor kernel: rank `rank`'s generator, created on first use. The caller holds
  // rng_mutex().
  std::mutex& rng_mutex();
  at::Generator& GeneratorLocked(int64_t rank);

 private:
  SimWorld();
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace dtsim
