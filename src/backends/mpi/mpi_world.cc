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
constexpr int kCheckCommTag = 7304;  // MPI_Comm_create_group of a group's check communicator
constexpr size_t kMaxWhat = 4096;

std::string Ranks(const std::vector<int64_t>& v) {
  std::ostringstream out;
  out << "[";
  for (size_t i = 0; i < v.size(); ++i) out << (i ? ", " : "") << v[i];
  out << "]";
  return out.str();
}

// FNV-1a over the text, then splitmix64's finaliser (so that texts differing in one character
// differ in about half the bits). The same on every rank and every build, unlike std::hash.
uint64_t Hash(const std::string& text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ULL;
  h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
  h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
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
  // The whole world in rank order agrees over check_comm_ from its first call on, and has its
  // communicator for data already (GroupComm makes the others after their first agreed call).
  std::vector<int64_t> world(size_);
  for (int64_t r = 0; r < size_; ++r) world[r] = r;
  check_comms_.emplace(world, check_comm_);
  MPI_Comm world_data = MPI_COMM_NULL;
  MPI_Comm_dup(MPI_COMM_WORLD, &world_data);
  MPI_Comm_set_errhandler(world_data, MPI_ERRORS_RETURN);
  comms_.emplace(std::move(world), world_data);
}

MpiWorld::~MpiWorld() = default;

MPI_Comm MpiWorld::GroupComm(const std::vector<int64_t>& group) {
  auto it = comms_.find(group);
  if (it != comms_.end()) return it->second;
  FinishAgreement();  // the creation waits for every member: the check's timeout comes first
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

// The collective-order check. Terms: a group's "texts" are its ranks' descriptions of the call
// (Fingerprint in collectives.cc, "#2 all_gather on group [3, 7] (of 4 groups), input [3, 1] Float,
// dim 0"); its "root" is the group's first rank.
//
// Every rank sends its text to the root on arrival, without waiting for an answer: the root knows
// who arrived (the stuck-job report names the others) and compares the texts exactly (a difference
// ends the job naming both). What tells the other ranks that the whole group arrived with the same
// call is one non-blocking round over the group's check communicator of h, a 64-bit hash of the
// text: an MPI_Iallgather of every member's h in groups of up to 64 ranks (one round of messages),
// an MPI_Iallreduce (MAX) of (h, ~h) in larger ones (log-depth; its result (max h, ~min h) says as
// much: whether every hash is this rank's own). A rank whose hash is not the group's waits for the
// root's message (the root has the texts). A hash collision (different texts, equal hashes: about
// 2^-64 for two texts) would let the other ranks on, but not the root, whose comparison is exact
// and ends the job.
//
// The check is started (StartAgreement) before the call's data moves and completes while it moves:
// the MPI backend begins its collective non-blocking and waits for both together (Wait), so the
// round costs no time of its own when the group arrives together. Nothing that could hang waits
// on it: the data's requests are polled with the check's, against the check's deadline, until the
// check is complete; a mismatched collective in flight is abandoned when the job ends.
//
// A group's check communicator is made, collectively over the group, right after the group's first
// agreed call (MPI_Comm_create_group blocks until every member is there, so it cannot come before
// the check that has the timeout). That first call is checked to the end before it returns: the
// same texts, then the root answers every rank. The whole world in rank order starts with one
// (check_comm_).
struct MpiWorld::OpenCheck {
  std::vector<int64_t> group;
  std::string what;
  int64_t sequence = 0;
  double timeout_s = 0;
  std::chrono::steady_clock::time_point deadline;
  std::vector<MPI_Request> texts;  // the root: one receive per other member; the others: one send
  std::vector<int> text_done;
  size_t texts_left = 0;
  std::vector<std::vector<char>> bufs;  // the root: the others' texts
  std::vector<char> mine;               // the others: their own
  MPI_Request hash = MPI_REQUEST_NULL;
  bool hash_done = false;
  uint64_t sent[2] = {0, 0};     // (h, ~h)
  std::vector<uint64_t> hashes;  // every member's h (an all-gather), or (max h, max ~h)
  bool gathered = false;
};

void MpiWorld::StartAgreementOnCall(const CallInfo& call, const std::string& what,
                                    double timeout_s) {
  if (call.kind == CollectiveKind::kSendRecv) {
    std::vector<int64_t> world(size_);
    for (int64_t r = 0; r < size_; ++r) world[r] = r;
    StartAgreement(world, what, call.sequence, timeout_s);
    return;
  }
  if (const auto* group = GroupOf(call)) StartAgreement(*group, what, call.sequence, timeout_s);
}

void MpiWorld::AgreeOnCall(const CallInfo& call, const std::string& what, double timeout_s) {
  StartAgreementOnCall(call, what, timeout_s);
  FinishAgreement();
}

void MpiWorld::Agree(const std::vector<int64_t>& group, const std::string& what, int64_t sequence,
                     double timeout_s) {
  StartAgreement(group, what, sequence, timeout_s);
  FinishAgreement();
}

void MpiWorld::StartAgreement(const std::vector<int64_t>& group, const std::string& what_in,
                              int64_t sequence, double timeout_s) {
  FinishAgreement();  // the previous call's, if its backend left it open
  if (group.size() <= 1) return;
  auto check = std::make_unique<OpenCheck>();
  OpenCheck& c = *check;
  c.group = group;
  c.what = what_in.substr(0, kMaxWhat - 1);
  c.sequence = sequence;
  c.timeout_s = timeout_s;
  c.deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(WaitSeconds(timeout_s)));
  const int64_t root = group[0];
  const size_t n = group.size() - 1;
  if (rank_ == root) {
    c.bufs.assign(n, std::vector<char>(kMaxWhat, 0));
    c.texts.resize(n);
    for (size_t i = 0; i < n; ++i) {
      MPI_Irecv(c.bufs[i].data(), static_cast<int>(kMaxWhat), MPI_CHAR,
                static_cast<int>(group[i + 1]), kCheckTag, check_comm_, &c.texts[i]);
    }
  } else {
    c.mine.assign(c.what.begin(), c.what.end());
    c.mine.push_back(0);
    c.texts.resize(1);
    MPI_Isend(c.mine.data(), static_cast<int>(c.mine.size()), MPI_CHAR, static_cast<int>(root),
              kCheckTag, check_comm_, &c.texts[0]);
  }
  c.text_done.assign(c.texts.size(), 0);
  c.texts_left = c.texts.size();
  const MPI_Comm hash_comm = FindCheckComm(group);
  if (hash_comm != MPI_COMM_NULL) {
    const uint64_t h = Hash(c.what);
    c.sent[0] = h;
    c.sent[1] = ~h;
    c.gathered = group.size() <= gather_hashes_up_to_;
    if (c.gathered) {
      c.hashes.assign(group.size(), 0);
      MPI_Iallgather(c.sent, 1, MPI_UINT64_T, c.hashes.data(), 1, MPI_UINT64_T, hash_comm, &c.hash);
    } else {
      c.hashes.assign(2, 0);
      MPI_Iallreduce(c.sent, c.hashes.data(), 2, MPI_UINT64_T, MPI_MAX, hash_comm, &c.hash);
    }
    open_ = std::move(check);
    return;
  }
  // The group's first call: the root compares the texts and answers every rank; then the group
  // makes its check communicator for the next calls.
  char ack = 0;
  if (rank_ != root) {
    c.texts.emplace_back();
    c.text_done.push_back(0);
    ++c.texts_left;
    MPI_Irecv(&ack, 1, MPI_CHAR, static_cast<int>(root), kAckTag, check_comm_, &c.texts.back());
  }
  c.hash_done = true;
  open_ = std::move(check);
  FinishAgreement();
  if (rank_ == root) {
    const char ok = 1;
    std::vector<MPI_Request> acks(n);
    for (size_t i = 0; i < n; ++i) {
      MPI_Isend(&ok, 1, MPI_CHAR, static_cast<int>(group[i + 1]), kAckTag, check_comm_, &acks[i]);
    }
    MPI_Waitall(static_cast<int>(n), acks.data(), MPI_STATUSES_IGNORE);
  }
  MakeCheckComm(group);
}

bool MpiWorld::Progress(OpenCheck& c) {
  const int64_t root = c.group[0];
  for (size_t i = 0; i < c.texts.size(); ++i) {
    if (c.text_done[i]) continue;
    int flag = 0;
    MPI_Test(&c.texts[i], &flag, MPI_STATUS_IGNORE);
    if (!flag) continue;
    c.text_done[i] = 1;
    if (--c.texts_left > 0 || rank_ != root) continue;
    // Every text is here: compare them (before the hash round ends: a rank that names another
    // group checks over another communicator, and would otherwise make this a timeout).
    for (size_t j = 0; j + 1 < c.group.size(); ++j) {
      const std::string theirs(c.bufs[j].data());
      if (theirs != c.what) {
        Abort("collective order diverges in group " + Ranks(c.group) + ": rank " +
              std::to_string(c.group[j + 1]) + " runs '" + theirs + "' where rank " +
              std::to_string(root) + " runs '" + c.what + "'");
      }
    }
  }
  if (!c.hash_done) {
    int flag = 0;
    MPI_Test(&c.hash, &flag, MPI_STATUS_IGNORE);
    if (flag) {
      c.hash_done = true;
      const bool same = c.gathered ? std::all_of(c.hashes.begin(), c.hashes.end(),
                                                 [&](uint64_t h) { return h == c.sent[0]; })
                                   : c.hashes[0] == c.sent[0] && c.hashes[1] == c.sent[1];
      if (rank_ != root && !same) {
        // Another rank's text differs: the root, which has every text, ends the job naming both.
        std::this_thread::sleep_until(c.deadline);
        Abort("collective order diverges in group " + Ranks(c.group) + ": rank " +
              std::to_string(rank_) + " runs '" + c.what +
              "' and another rank of the group a different call (rank " + std::to_string(root) +
              " did not report which)");
      }
    }
  }
  return c.texts_left == 0 && c.hash_done;
}

void MpiWorld::TimedOut(const OpenCheck& c) {
  const int64_t root = c.group[0];
  Status status{rank_, c.sequence, false, {}, c.what};
  if (rank_ == root) {
    for (size_t i = 0; i + 1 < c.group.size(); ++i) {
      if (!c.text_done[i]) status.awaited.push_back(c.group[i + 1]);
    }
    // Every text came but the hash round did not end (a rank left between the two).
    if (status.awaited.empty()) status.awaited.assign(c.group.begin() + 1, c.group.end());
  } else {
    status.awaited = {root};
  }
  Stuck(status, c.timeout_s);
}

double MpiWorld::FinishAgreement() {
  std::vector<MPI_Request> none;
  return Wait(none, "the agreement check");
}

double MpiWorld::Wait(std::vector<MPI_Request>& requests, const char* what) {
  using Clock = std::chrono::steady_clock;
  std::vector<int> done(requests.size(), 0);
  size_t left = requests.size();
  int failed = MPI_SUCCESS;
  Clock::time_point data_done = Clock::now();  // from then on the check alone holds this rank up
  int spins = 0;
  while (true) {
    if (open_ && Progress(*open_)) open_.reset();
    for (size_t i = 0; i < requests.size(); ++i) {
      if (done[i]) continue;
      int flag = 0;
      const int rc = MPI_Test(&requests[i], &flag, MPI_STATUS_IGNORE);
      if (rc != MPI_SUCCESS) {
        // Reported once the check is complete: a mismatched call fails here before the check
        // says so.
        failed = rc;
        flag = 1;
      }
      if (flag) {
        done[i] = 1;
        if (--left == 0) {
          data_done = Clock::now();
          spins = 0;
        }
      }
    }
    if (!open_ && left == 0) break;
    if (open_ && Clock::now() > open_->deadline) TimedOut(*open_);
    // Ranks may outnumber cores: yield the core between tests; sleep once a wait is long, briefly
    // while data moves (its progress happens in these tests), longer for the check alone.
    ++spins;
    if (!open_ || spins < (left > 0 ? 2000 : 200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(left > 0 || spins < 2000 ? 20 : 500));
    }
  }
  if (failed != MPI_SUCCESS) {
    char text[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(failed, text, &len);
    Abort(std::string(what) + " failed: " + std::string(text, len));
  }
  return std::chrono::duration<double>(Clock::now() - data_done).count();
}

MPI_Comm MpiWorld::FindCheckComm(const std::vector<int64_t>& group) const {
  auto it = check_comms_.find(group);
  return it == check_comms_.end() ? MPI_COMM_NULL : it->second;
}

void MpiWorld::MakeCheckComm(const std::vector<int64_t>& group) {
  MPI_Group world_group, sub_group;
  MPI_Comm_group(check_comm_, &world_group);
  std::vector<int> ranks(group.begin(), group.end());
  MPI_Group_incl(world_group, static_cast<int>(ranks.size()), ranks.data(), &sub_group);
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_create_group(check_comm_, sub_group, kCheckCommTag, &comm);
  MPI_Group_free(&sub_group);
  MPI_Group_free(&world_group);
  if (rc != MPI_SUCCESS || comm == MPI_COMM_NULL)
    Abort("could not create the check communicator of group " + Ranks(group));
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  check_comms_.emplace(group, comm);
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
