// MpiWorld: this process's place in an MPI job, shared by the MPI and NCCL backends (NCCL bootstraps over MPI):
// initialisation, one communicator per process group (created once, cached), the agreement check that every rank of a
// group makes the same call (with a timeout: the collective-order check that reports instead of hanging), and ending
// the whole job with a message. Private to src/backends/.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace dtsim::internal {

class MpiWorld {
 public:
  // The process's world: MPI_Init_thread on first use (MPI_THREAD_FUNNELED: only the calling thread talks to MPI),
  // MPI_Finalize at exit.
  static MpiWorld& Get();

  int64_t rank() const { return rank_; }
  int64_t size() const { return size_; }

  // The communicator of `group` (global ranks, this rank among them), ranks ordered as in `group`. Created on first
  // use with MPI_Comm_create_group (collective over the group's members only) and cached.
  MPI_Comm GroupComm(const std::vector<int64_t>& group);

  // The collective-order check: every rank of `group` calls it with its own description of the call. The group's
  // first rank collects the others' descriptions and answers; any difference, or a rank that does not arrive within
  // `timeout_s`, ends the whole job with a message naming the call, the group and the ranks that differ or are
  // missing (exit code 4 on every rank). `what` is this rank's description.
  void Agree(const std::vector<int64_t>& group, const std::string& what, double timeout_s);

  // Ends every process of the job: prints "dtsim: error: real run: <message>" on this rank's stderr, then
  // MPI_Abort(MPI_COMM_WORLD, code).
  [[noreturn]] void Abort(const std::string& message, int code = 4);

 private:
  MpiWorld();
  ~MpiWorld() = default;

  int64_t rank_ = 0;
  int64_t size_ = 1;
  MPI_Comm check_comm_ = MPI_COMM_NULL;  // a duplicate of MPI_COMM_WORLD for the agreement messages
  std::map<std::vector<int64_t>, MPI_Comm> comms_;
};

// The exit code of a real run that was ended because ranks disagreed or got stuck.
inline constexpr int kRealRunFailedExitCode = 4;

}  // namespace dtsim::internal
