// MpiWorld (see mpi_world.h).
#include "mpi_world.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <thread>

#include "dtsim/layout/error.h"

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

// Waits for `requests` with a deadline, yielding the core between tests (ranks may outnumber
// cores). Returns false on timeout; `done[i]` says which completed.
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

std::string Seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
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
  if (rc != MPI_SUCCESS || comm == MPI_COMM_NULL)
    Abort("could not create the communicator of group " + Ranks(group));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  comms_.emplace(group, comm);
  return comm;
}

double MpiWorld::WindowSeconds(double timeout_s) { return std::min(1.0, timeout_s / 4); }
double MpiWorld::WaitSeconds(double timeout_s) { return timeout_s - WindowSeconds(timeout_s); }

void MpiWorld::AgreeOnCall(const CallInfo& call, const std::string& what, double timeout_s) {
  if (call.kind == CollectiveKind::kSendRecv) {
    std::vector<int64_t> world(size_);
    for (int64_t r = 0; r < size_; ++r) world[r] = r;
    Agree(world, what, call.sequence, timeout_s);
    return;
  }
  if (const auto* group = GroupOf(call)) Agree(*group, what, call.sequence, timeout_s);
}

void MpiWorld::Agree(const std::vector<int64_t>& group, const std::string& what_in,
                     int64_t sequence, double timeout_s) {
  if (group.size() <= 1) return;
  const std::string what = what_in.substr(0, kMaxWhat - 1);
  const int64_t root = group[0];
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(WaitSeconds(timeout_s)));
  if (rank_ == root) {
    const size_t n = group.size() - 1;
    std::vector<std::vector<char>> bufs(n, std::vector<char>(kMaxWhat, 0));
    std::vector<MPI_Request> requests(n);
    for (size_t i = 0; i < n; ++i) {
      MPI_Irecv(bufs[i].data(), static_cast<int>(kMaxWhat), MPI_CHAR,
                static_cast<int>(group[i + 1]), kCheckTag, check_comm_, &requests[i]);
    }
    std::vector<int> done;
    if (!WaitUntil(requests, done, deadline)) {
      Status status{rank_, sequence, false, {}, what};
      for (size_t i = 0; i < n; ++i) {
        if (!done[i]) status.awaited.push_back(group[i + 1]);
      }
      Stuck(status, timeout_s);
    }
    for (size_t i = 0; i < n; ++i) {
      const std::string theirs(bufs[i].data());
      if (theirs != what) {
        Abort("collective order diverges in group " + Ranks(group) + ": rank " +
              std::to_string(group[i + 1]) + " runs '" + theirs + "' where rank " +
              std::to_string(root) + " runs '" + what + "'");
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
  MPI_Isend(mine.data(), static_cast<int>(mine.size()), MPI_CHAR, static_cast<int>(root), kCheckTag,
            check_comm_, &requests[0]);
  MPI_Irecv(&ack, 1, MPI_CHAR, static_cast<int>(root), kAckTag, check_comm_, &requests[1]);
  std::vector<int> done;
  if (!WaitUntil(requests, done, deadline))
    Stuck(Status{rank_, sequence, false, {root}, what}, timeout_s);
}

void MpiWorld::WaitAfterSkipping(const std::string& what, int64_t sequence, double timeout_s) {
  std::this_thread::sleep_for(std::chrono::duration<double>(WaitSeconds(timeout_s)));
  Status status{rank_, sequence, false, {}, what};
  status.skipped = true;
  Stuck(status, timeout_s);
}

namespace {

constexpr int kStatusTag = 7303;

// rank|sequence|skipped|awaited,...|what
std::string Encode(const MpiWorld::Status& s) {
  std::ostringstream out;
  out << s.rank << "|" << s.sequence << "|" << (s.skipped ? 1 : 0) << "|";
  for (size_t i = 0; i < s.awaited.size(); ++i) out << (i ? "," : "") << s.awaited[i];
  out << "|" << s.what;
  return out.str();
}

MpiWorld::Status Decode(const std::string& text) {
  MpiWorld::Status s;
  std::istringstream in(text);
  std::string field;
  std::getline(in, field, '|');
  s.rank = std::atoll(field.c_str());
  std::getline(in, field, '|');
  s.sequence = std::atoll(field.c_str());
  std::getline(in, field, '|');
  s.skipped = field == "1";
  std::getline(in, field, '|');
  std::istringstream awaited(field);
  for (std::string r; std::getline(awaited, r, ',');) s.awaited.push_back(std::atoll(r.c_str()));
  std::getline(in, s.what);
  return s;
}

std::string RankWord(const std::vector<int64_t>& ranks) {
  if (ranks.size() == 1) return "rank " + std::to_string(ranks[0]);
  std::string out = "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) out += (i ? ", " : "") + std::to_string(ranks[i]);
  return out;
}

}  // namespace

std::string MpiWorld::Report(const std::map<int64_t, Status>& statuses, double timeout_s) {
  // The earliest stuck call, the ranks its waiters wait for, and where those ranks are instead.
  int64_t earliest = INT64_MAX;
  for (const auto& [rank, s] : statuses) {
    if (!s.awaited.empty()) earliest = std::min(earliest, s.sequence);
  }
  if (earliest == INT64_MAX) {
    for (const auto& [rank, s] : statuses) {
      if (s.skipped)
        return "rank " + std::to_string(rank) + " skipped collective " + s.what +
               " and waits elsewhere";
    }
    return "the job is stuck";
  }
  std::string what;
  std::set<int64_t> awaited;
  std::vector<int64_t> waiting;
  for (const auto& [rank, s] : statuses) {
    if (s.sequence != earliest || s.awaited.empty()) continue;
    if (what.empty()) what = s.what;
    waiting.push_back(rank);
    awaited.insert(s.awaited.begin(), s.awaited.end());
  }
  std::vector<int64_t> missing;
  std::string elsewhere;
  for (int64_t r : awaited) {
    auto it = statuses.find(r);
    if (it != statuses.end() && it->second.sequence == earliest && !it->second.skipped)
      continue;  // there, waiting
    missing.push_back(r);
    if (it == statuses.end()) continue;
    elsewhere += it->second.skipped
                     ? "; rank " + std::to_string(r) + " skipped this collective and went on"
                     : "; rank " + std::to_string(r) + " is at collective " + it->second.what;
  }
  return "collective " + what + " is stuck: " + RankWord(missing) + " did not arrive within " +
         Seconds(timeout_s) + " (--timeout); " + RankWord(waiting) +
         (waiting.size() == 1 ? " waits" : " wait") + " for " +
         (missing.size() == 1 ? "it" : "them") + elsewhere;
}

void MpiWorld::Stuck(const Status& mine, double timeout_s) {
  const double window = WindowSeconds(timeout_s);
  std::map<int64_t, Status> statuses;
  statuses[mine.rank] = mine;
  // Every waiting rank tells the two reporting ranks (0, and 1 in case 0 is the stuck one) where it
  // is.
  const std::string encoded = Encode(mine);
  std::vector<MPI_Request> sends;
  for (int64_t to : {int64_t{0}, int64_t{1}}) {
    if (to == rank_ || to >= size_) continue;
    sends.emplace_back();
    MPI_Isend(encoded.c_str(), static_cast<int>(encoded.size() + 1), MPI_CHAR, static_cast<int>(to),
              kStatusTag, check_comm_, &sends.back());
  }
  if (rank_ > 1) {
    // A reporting rank prints one message for the whole job and ends it; if neither can, this
    // rank's view ends it.
    std::this_thread::sleep_for(
        std::chrono::duration<double>(window * 2 + 0.05 * std::min<int64_t>(rank_, 40)));
    Abort(Report(statuses, timeout_s));
  }
  const auto until = std::chrono::steady_clock::now() +
                     std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(window * (rank_ == 0 ? 1.0 : 1.5)));
  std::vector<char> buf(kMaxWhat + 256);
  while (std::chrono::steady_clock::now() < until) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kStatusTag, check_comm_, &flag, &st);
    if (!flag) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      continue;
    }
    MPI_Recv(buf.data(), static_cast<int>(buf.size()), MPI_CHAR, st.MPI_SOURCE, kStatusTag,
             check_comm_, MPI_STATUS_IGNORE);
    Status s = Decode(std::string(buf.data()));
    statuses[s.rank] = s;
  }
  Abort(Report(statuses, timeout_s));
}

void MpiWorld::Abort(const std::string& message, int code, bool print) {
  if (print) {
    std::fprintf(stderr, "dtsim: error: real run: rank %lld: %s\n", static_cast<long long>(rank_),
                 message.c_str());
    std::fflush(stderr);
  }
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace dtsim::internal
