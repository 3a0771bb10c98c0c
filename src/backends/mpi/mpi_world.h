// MpiWorld: this process's place in an MPI job, shared by the MPI and NCCL backends (NCCL
// bootstraps over MPI): initialisation, one communicator per process group (created once, cached),
// the agreement check that every rank of a group makes the same call (with a timeout: the
// collective-order check that reports instead of hanging), and ending the whole job with a message.
// Private to src/backends/.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtsim/backends/real_backend.h"
#include "dtsim/tensor/collectives.h"

namespace dtsim::internal {

class MpiWorld {
 public:
  // The process's world: MPI_Init_thread on first use (MPI_THREAD_FUNNELED: only the calling thread
  // talks to MPI), MPI_Finalize at exit.
  static MpiWorld& Get();

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }

  // The communicator of `group` (global ranks, this rank among them), ranks ordered as in `group`.
  // Created on first use with MPI_Comm_create_group (collective over the group's members only) and
  // cached.
  MPI_Comm GroupComm(const std::vector<int64_t>& group);

  // The collective-order check: every rank of `group` calls it with its own description `what` of
  // call number `sequence`, and it returns once the whole group made the same call. Every rank
  // sends its description to the group's first rank, which compares them; the others learn that
  // all agree from one non-blocking round of the descriptions' hashes (after the group's first
  // call, which the first rank answers instead; see mpi_world.cc). A difference ends the whole job
  // at once with a message naming the group and the two descriptions. A rank that waits longer
  // than `timeout_s` starts the stuck-job report (Stuck). Example: group [0, 4], "#2 all_gather on
  // group [0, 4] (of 4 groups), input [3, 10] Float, dim 0" on both → returns; rank 4 describing an
  // all_reduce → the job ends. Agree = StartAgreement + FinishAgreement.
  void Agree(const std::vector<int64_t>& group, const std::string& what, int64_t sequence,
             double timeout_s);
  // Agree for one call of a backend: over this rank's group of `call`, over the whole world for
  // send/recv (whose pairs are not groups), not at all where this rank takes no part.
  void AgreeOnCall(const CallInfo& call, const std::string& what, double timeout_s);

  // The same check, started and left open so that it completes while the call's data moves: the
  // backend begins its MPI call non-blocking and waits for it with Wait, which completes the open
  // check too (and reports as Agree does). The group's first call is checked to the end here
  // (its check communicator is made after it). One check is open at a time: starting the next,
  // FinishAgreement, Wait and making a communicator (GroupComm) complete it first.
  void StartAgreement(const std::vector<int64_t>& group, const std::string& what, int64_t sequence,
                      double timeout_s);
  void StartAgreementOnCall(const CallInfo& call, const std::string& what, double timeout_s);
  // Completes the open check, if any; returns the seconds it waited.
  double FinishAgreement();
  // Waits for `requests` (MPI's non-blocking calls of this rank's collective, begun after
  // StartAgreement) and the open check together, polling both against the check's deadline until
  // the check is complete, then the requests alone (as a blocking MPI call polls). A failed request
  // ends the job ("<what> failed: <MPI's error>") once the check passed — a mismatched call may
  // fail before the check says so, and then the check's message ends the job instead. Returns the
  // seconds it waited for the check after the requests were done (the check's own share).
  double Wait(std::vector<MPI_Request>& requests, const char* what);

  // The largest group whose hash round is an all-gather of the hashes (one round of messages);
  // larger ones all-reduce (h, ~h) (log-depth). Tests lower it to run the other path on few ranks;
  // every rank of the job must set the same.
  static constexpr size_t kGatherHashesUpTo = 64;
  void set_gather_hashes_up_to(size_t n) { gather_hashes_up_to_ = n; }

  // This rank's group (global ranks) in `call`, or nullptr where it takes no part.
  static const std::vector<int64_t>* GroupOf(const CallInfo& call) {
    if (call.group.empty() || call.group[0] < 0) return nullptr;
    return &call.groups->groups[call.group[0]];
  }

  // A drop-rank fault: this rank skips call `sequence` and, like a rank whose program took another
  // branch, waits at a collective no other rank makes — until the stuck-job report ends the job.
  [[noreturn]] void WaitAfterSkipping(const std::string& what, int64_t sequence, double timeout_s);

  // Ends every process of the job: prints "dtsim: error: real run: rank R: <message>" on this
  // rank's stderr (unless `print` is false), then MPI_Abort(MPI_COMM_WORLD, code).
  [[noreturn]] void Abort(const std::string& message, int code = 4, bool print = true);

 private:
  MpiWorld();

 public:
  // What a waiting rank reports when its time is up.
  struct Status {
    int64_t rank = 0;
    int64_t sequence = 0;
    bool skipped = false;          // a drop-rank fault made it skip call `sequence`
    std::vector<int64_t> awaited;  // the ranks it waits for
    std::string what;              // its description of the call
  };
  // The one message of a stuck job from the waiting ranks' statuses (each rank's own view when it
  // is alone).
  static std::string Report(const std::map<int64_t, Status>& statuses, double timeout_s);
  // The stuck-job report: every rank whose wait timed out sends its Status to rank 0, which
  // collects them for a short window and prints one message naming the earliest stuck call, its
  // group, the ranks that did not arrive (and where they are instead, if they answered); if rank 0
  // cannot (it is the stuck one), each rank prints its own view after the window. Ends the job.
  [[noreturn]] void Stuck(const Status& mine, double timeout_s);

 private:
  // The time a rank waits before reporting: the timeout less the report's window, so the job ends
  // within it.
  static double WaitSeconds(double timeout_s);
  static double WindowSeconds(double timeout_s);
  // The open check (StartAgreement); mpi_world.cc.
  struct OpenCheck;
  // Tests the open check once: true when it is complete and the group agrees; ends the job where
  // it does not.
  bool Progress(OpenCheck& check);
  // The stuck-job report of a check whose deadline passed.
  [[noreturn]] void TimedOut(const OpenCheck& check);
  // The communicator over which `group` agrees by hash (its ranks in group order), or
  // MPI_COMM_NULL before the group's first agreed call; MakeCheckComm makes it (collective over the
  // group: call it only once every member agreed on a call).
  MPI_Comm FindCheckComm(const std::vector<int64_t>& group) const;
  void MakeCheckComm(const std::vector<int64_t>& group);
  ~MpiWorld();  // never run (the world lives until exit); defined where OpenCheck is complete

  int64_t rank_ = 0;
  int64_t size_ = 1;
  MPI_Comm check_comm_ = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD for the agreement messages
  std::map<std::vector<int64_t>, MPI_Comm> comms_;
  std::map<std::vector<int64_t>, MPI_Comm> check_comms_;  // FindCheckComm
  std::unique_ptr<OpenCheck> open_;                       // the open check, if any
  size_t gather_hashes_up_to_ = kGatherHashesUpTo;
};

// The exit code of a real run that was ended because ranks disagreed or got stuck.
inline constexpr int kRealRunFailedExitCode = 4;

// The part of a backend whose processes come from mpirun (MPI, and NCCL bootstrapped over MPI):
// rank and world from MpiWorld, the agreement check and drop-rank faults through it, the job ended
// with MPI_Abort, and the per-call group helpers. The concrete backend adds the data movement (the
// Do* hooks).
class MpiLaunchedCollectives : public Collectives {
 public:
  MpiLaunchedCollectives(std::string backend, const RealBackendOptions& options)
      : Collectives(std::move(backend), MpiWorld::Get().size(), MpiWorld::Get().rank()),
        options_(options) {}

  [[noreturn]] void EndJob(const std::string& message, int code, bool print) override {
    MpiWorld::Get().Abort(message, code, print);
  }

 protected:
  void CheckAgreement(const CallInfo& call, const std::string& fingerprint) override {
    MpiWorld::Get().AgreeOnCall(call, fingerprint, options_.timeout_s);
  }
  void SkipCall(const CallInfo& call, const std::string& fingerprint) override {
    MpiWorld::Get().WaitAfterSkipping(fingerprint, call.sequence, options_.timeout_s);
  }

  // The size of this rank's group in `call` (0 where it takes no part), its place in it, and its
  // communicator.
  static int64_t GroupSize(const CallInfo& call) {
    const auto* g = MpiWorld::GroupOf(call);
    return g ? static_cast<int64_t>(g->size()) : 0;
  }
  static int64_t Position(const CallInfo& call) { return call.position[0]; }
  static MPI_Comm MpiComm(const CallInfo& call) {
    return MpiWorld::Get().GroupComm(*MpiWorld::GroupOf(call));
  }

  const RealBackendOptions options_;
};

}  // namespace dtsim::internal
