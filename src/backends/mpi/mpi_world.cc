// MpiWorld (see mpi_world.h).
#include "mpi_world.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "dtsim/error.h"

namespace dtsim::internal {
namespace {

constexpr int kCheckTag = 7301;
constexpr int kAckTag = 7302;
constexpr size_t kMaxWhat = 4096;

std::string Ranks(const std::vector<int64_t>& v) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << "]";
  return out.str();
}

// Waits for `requests` with a deadline, yielding the core between tests (ranks may outnumber cores). Returns false
// on timeout; `done[i]` says which completed.
bool WaitUntil(std::vector<MPI_Request>& requests, std::vector<int>& done,
               std::chrono::steady_clock::time_point deadline) {
  done.assign(requests.size(), 0);
  size_t left = requests.size();
  int spins = 0;
  while (left > 0) {
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE);
      if (flag) {
        done[i] = 1;
        --left;
      }
    }
    if (left == 0) break;
    if (std::chrono::steady_clock::now() > deadline) return false;
    if (++spins < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(spins < 2000 ? 20 : 500));
    }
  }
  return true;
}

void FinalizeAtExit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

MpiWorld& MpiWorld::Get() {
  static MpiWorld* world = new MpiWorld();
  return *world;
}

MpiWorld::MpiWorld() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    std::atexit(FinalizeAtExit);
  }
  int r = 0, n = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  rank_ = r;
  size_ = n;
  // Errors come back as codes (checked by the backends), not as aborts inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_dup(MPI_COMM_WORLD, &check_comm_);
}

MPI_Comm MpiWorld::GroupComm(const std::vector<int64_t>& group) {
  auto it = comms_.find(group);
  if (it != comms_.end()) return it->second;
  MPI_Group world_group, sub_group;
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(group.begin(), group.end());
  MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &sub_group);
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, sub_group, /*tag=*/7300, &comm);
  MPI_Group_free(&sub_group);
  MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS || comm == MPI_COMM_NULL) Abort("could not create the communicator of group " + Ranks(group));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  comms_.emplace(group, comm);
  return comm;
}

void MpiWorld::Agree(const std::vector<int64_t>& group, const std::string& what_in, double timeout_s) {
  if (group.size() <= 1) return;
  const std::string what = what_in.substr(0, kMaxWhat - 1);
  const int64_t root = group[0];
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                    std::chrono::duration<double>(timeout_s));
  if (rank_ == root) {
    const size_t n = group.size() - 1;
    std::vector<std::vector<char>> bufs(n, std::vector<char>(kMaxWhat, 0));
    std::vector<MPI_Request> requests(n);
    for (size_t i = 0; i < n; ++i) {
      MPI_Irecv(bufs[i].data(), static_cast<int>(kMaxWhat), MPI_CHAR, static_cast<int>(group[i + 1]), kCheckTag,
                check_comm_, &requests[i]);
    }
    std::vector<int> done;
    if (!WaitUntil(requests, done, deadline)) {
      std::vector<int64_t> missing;
      for (size_t i = 0; i < n; ++i) {
        if (!done[i]) missing.push_back(group[i + 1]);
      }
      Abort("collective " + what + " is stuck: rank" + (missing.size() == 1 ? " " : "s ") + Ranks(missing) +
            " of group " + Ranks(group) + " did not arrive within " + std::to_string(timeout_s) + " s (--timeout); " +
            "the other ranks of the group are waiting");
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string theirs(bufs[i].data());
      if (theirs != what) {
        Abort("collective order diverges in group " + Ranks(group) + ": rank " + std::to_string(group[i + 1]) +
              " runs '" + theirs + "' where rank " + std::to_string(root) + " runs '" + what + "'");
      }
    }
    const char ok = 1;
    std::vector<MPI_Request> acks(n);
    for (size_t i = 0; i < n; ++i) {
      MPI_Isend(&ok, 1, MPI_CHAR, static_cast<int>(group[i + 1]), kAckTag, check_comm_, &acks[i]);
    }
    MPI_Waitall(static_cast<int>(n), acks.data(), MPI_STATUSES_IGNORE);
    return;
  }
  std::vector<char> mine(what.begin(), what.end());
  mine.push_back(0);
  char ack = 0;
  std::vector<MPI_Request> requests(2);
  MPI_Isend(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, static_cast<int>(root), kCheckTag, check_comm_,
            &requests[0]);
  MPI_Irecv(&ack, 1, MPI_CHAR, static_cast<int>(root), kAckTag, check_comm_, &requests[1]);
  std::vector<int> done;
  // A little longer than the group's first rank waits, so its message (naming every missing rank) comes first.
  if (!WaitUntil(requests, done, deadline + std::chrono::seconds(2))) {
    Abort("collective " + what + " is stuck: rank " + std::to_string(root) + " (the first rank of group " +
          Ranks(group) + ") did not answer within " + std::to_string(timeout_s) + " s (--timeout): it is stalled, "
          "or it runs another collective");
  }
}

void MpiWorld::Abort(const std::string& message, int code) {
  std::fprintf(stderr, "dtsim: error: real run: rank %lld: %s\n", static_cast<long long>(rank_), message.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace dtsim::internal
