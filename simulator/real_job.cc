// The supervised real run of `dtsim compare` (see real_job.h).
#include "real_job.h"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <regex>
#include <set>
#include <sstream>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

extern char** environ;

namespace fs = std::filesystem;

namespace dtsim::cli {
namespace {

constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
std::atomic<int> g_signal_pipe{-1};
struct sigaction g_old_actions[3];

// Async-signal-safe: hands the signal to the watcher thread.
void OnSignal(int signal_number) {
  const int saved = errno;
  const unsigned char byte = static_cast<unsigned char>(signal_number);
  const int fd = g_signal_pipe.load();
  if (fd >= 0) (void)!write(fd, &byte, 1);
  errno = saved;
}

// The pids whose parent is this process (children and adopted orphans), from /proc.
std::vector<pid_t> ChildrenOfThisProcess() {
  std::vector<pid_t> out;
  const pid_t self = getpid();
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (const dirent* entry = readdir(proc)) {
    char* end = nullptr;
    const long pid = std::strtol(entry->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream stat(StrCat("/proc/", pid, "/stat"));
    std::string text;
    std::getline(stat, text);
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses, so parse after the last
    // ')'.
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(text.c_str() + close + 1, " %c %ld", &state, &ppid) == 2 && ppid == self) {
      out.push_back(static_cast<pid_t>(pid));
    }
  }
  closedir(proc);
  return out;
}

// Whether `pid` is a live process: a zombie (dead, not yet reaped by a parent that no longer waits,
// as a container's init may) counts as gone.
bool ProcessAlive(pid_t pid) {
  if (kill(pid, 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat(StrCat("/proc/", pid, "/stat"));
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() || text[close + 2] != 'Z';
}

// OpenMPI's session folders: mpirun keeps its job's files in <base>/ompi.<host>.<uid>/pid.<its
// pid> and removes them when it ends; killed with SIGKILL (after the 3 s grace, e.g. on a loaded
// machine) it leaves them. <base> is where OpenMPI 4 puts them: orte_tmpdir_base, else TMPDIR,
// TEMP, TMP, else /tmp.
fs::path OpenMpiTmpBase() {
  for (const char* name : {"OMPI_MCA_orte_tmpdir_base", "TMPDIR", "TEMP", "TMP"}) {
    const char* value = std::getenv(name);
    if (value != nullptr && *value != '\0') return value;
  }
  return "/tmp";
}

// Every <base>/ompi.*/pid.* folder.
std::set<fs::path> OpenMpiSessionDirs() {
  std::set<fs::path> out;
  std::error_code ec;
  for (fs::directory_iterator top(OpenMpiTmpBase(), ec), end; !ec && top != end;
       top.increment(ec)) {
    if (top->path().filename().string().rfind("ompi.", 0) != 0) continue;
    std::error_code ec2;
    for (fs::directory_iterator it(top->path(), ec2); !ec2 && it != end; it.increment(ec2)) {
      if (it->path().filename().string().rfind("pid.", 0) == 0) out.insert(it->path());
    }
  }
  return out;
}

// Removes the session folders not in `before` whose mpirun is gone (a live one's are left alone: it
// may be another job's), then each ompi.* folder left empty (rmdir fails on one in use).
void RemoveStaleOpenMpiSessions(const std::set<fs::path>& before) {
  for (const fs::path& dir : OpenMpiSessionDirs()) {
    if (before.count(dir)) continue;
    char* end = nullptr;
    const std::string name = dir.filename().string();
    const long pid = std::strtol(name.c_str() + 4, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    if (ProcessAlive(static_cast<pid_t>(pid))) continue;
    std::error_code ec;
    fs::remove_all(dir, ec);
    rmdir(dir.parent_path().c_str());
  }
}

// Removes the folders of earlier jobs under `tmp` whose process is gone
// (dtsim-compare-<pid>-XXXXXX: a process killed by SIGKILL cannot clean up); a live or unknown
// process's folder is left alone.
void RemoveStaleJobDirs(const fs::path& tmp) {
  std::error_code ec;
  for (fs::directory_iterator it(tmp, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const std::string prefix = "dtsim-compare-";
    if (name.rfind(prefix, 0) != 0) continue;
    char* rest = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &rest, 10);
    if (pid <= 0 || *rest != '-' || pid == getpid()) continue;
    if (ProcessAlive(static_cast<pid_t>(pid))) continue;
    std::error_code ec2;
    if (fs::is_directory(it->path(), ec2)) fs::remove_all(it->path(), ec2);
  }
}

// The first `limit` bytes of a file ("" when it cannot be read).
std::string ReadHead(const fs::path& path, size_t limit) {
  std::ifstream in(path, std::ios::binary);
  std::string text(limit, '\0');
  in.read(text.data(), static_cast<std::streamsize>(limit));
  text.resize(static_cast<size_t>(in.gcount()));
  return text;
}

}  // namespace

// True when `name` is an executable file (a name with a '/') or a program found in $PATH, as
// posix_spawnp would find it.
bool IsExecutableOnPath(const std::string& name) {
  if (name.empty()) return false;
  auto runnable = [](const fs::path& p) {
    std::error_code ec;
    return fs::is_regular_file(p, ec) && access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) return runnable(name);
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "/usr/bin:/bin");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (runnable(fs::path(dir.empty() ? "." : dir) / name)) return true;
  }
  return false;
}

std::vector<std::string> ParentDeathPrefix() {
  for (const char* setpriv : {"/usr/bin/setpriv", "/bin/setpriv"}) {
    if (access(setpriv, X_OK) == 0) return {setpriv, "--pdeathsig", "KILL", "--"};
  }
  return {};
}

std::string SignalName(int signal_number) {
  const char* abbrev = sigabbrev_np(signal_number);
  return abbrev ? StrCat("SIG", abbrev) : StrCat("signal ", signal_number);
}

std::vector<std::string> RankFailuresFromLauncher(std::string_view stderr_text) {
  std::vector<std::string> out;
  std::set<std::string> seen;
  const std::string text(stderr_text);
  static const std::regex kSignaled(
      R"(process rank (\d+) with PID \d+ on node \S+ exited on signal (\d+))");
  static const std::regex kExited(R"(Process name: \[\[\d+,\d+\],(\d+)\]\s*Exit code:\s*(\d+))");
  for (std::sregex_iterator it(text.begin(), text.end(), kSignaled), end; it != end; ++it) {
    const std::string rank = (*it)[1];
    if (!seen.insert(rank).second) continue;
    const int number = std::atoi((*it)[2].str().c_str());
    out.push_back(
        StrCat("rank ", rank, " killed by signal ", number, " (", SignalName(number), ")"));
  }
  for (std::sregex_iterator it(text.begin(), text.end(), kExited), end; it != end; ++it) {
    const std::string rank = (*it)[1];
    if (!seen.insert(rank).second) continue;
    out.push_back(StrCat("rank ", rank, " exited with code ", (*it)[2].str()));
  }
  return out;
}

RealJob::RealJob(const std::optional<std::string>& keep) {
  // Handlers first, so that no signal can leave the folder behind once it exists.
  if (pipe2(pipe_, O_CLOEXEC) != 0) {
    throw InputError("compare", StrCat("cannot make a pipe: ", std::strerror(errno)));
  }
  g_signal_pipe.store(pipe_[1]);
  for (size_t i = 0; i < std::size(kSignals); ++i) {
    struct sigaction action {};
    action.sa_handler = OnSignal;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESTART;
    sigaction(kSignals[i], &action, &g_old_actions[i]);
  }
  // Ranks whose launcher dies become this process's children, so they can be ended and reaped.
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  watcher_ = std::thread([this] { Watch(); });
  try {
    MakeDir(keep);
  } catch (...) {
    StopWatching();
    throw;
  }
}

void RealJob::MakeDir(const std::optional<std::string>& keep) {
  std::unique_lock<std::mutex> lock(mutex_);
  if (keep) {
    dir_ = *keep;
    std::error_code ec;
    fs::create_directories(dir_, ec);
    if (ec || !fs::is_directory(dir_)) {
      throw InputError("keep", StrCat("cannot use '", ExcerptText(*keep),
                                      "' as a directory: ", ec ? ec.message() : "not a directory"));
    }
  } else {
    std::error_code ec;
    const fs::path tmp = fs::temp_directory_path(ec);
    if (ec) throw InputError("compare", StrCat("no temporary directory: ", ec.message()));
    RemoveStaleJobDirs(tmp);
    RemoveStaleOpenMpiSessions({});  // those of an mpirun killed with the job that made them
    std::string templ = (tmp / StrCat("dtsim-compare-", getpid(), "-XXXXXX")).string();
    if (!mkdtemp(templ.data())) {
      throw InputError("compare",
                       StrCat("cannot make a temporary directory: ", std::strerror(errno)));
    }
    dir_ = templ;
    remove_ = true;
  }
}

RealJob::~RealJob() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    if (child_ != 0) EndJob();
    RemoveDirIfOwned();
  }
  StopWatching();
}

void RealJob::StopWatching() {
  for (size_t i = 0; i < std::size(kSignals); ++i)
    sigaction(kSignals[i], &g_old_actions[i], nullptr);
  prctl(PR_SET_CHILD_SUBREAPER, 0);
  const unsigned char stop = 0;
  (void)!write(pipe_[1], &stop, 1);
  if (watcher_.joinable()) watcher_.join();
  g_signal_pipe.store(-1);
  close(pipe_[0]);
  close(pipe_[1]);
}

void RealJob::Watch() {
  unsigned char byte = 0;
  while (true) {
    const ssize_t n = read(pipe_[0], &byte, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0 || byte == 0) return;  // the destructor's stop
    break;
  }
  const int signal_number = byte;
  // Held until the process ends: the main thread writes nothing more into the folder and starts
  // no job.
  mutex_.lock();
  const bool had_job = child_ != 0;
  if (had_job) EndJob();
  RemoveDirIfOwned();
  std::cerr << "dtsim: compare interrupted by " << SignalName(signal_number) << ": "
            << (had_job ? "the real run (mpirun and its ranks) ended, " : "")
            << (remove_ ? "the temporary folder removed" : "the folder kept: " + dir_.string())
            << "\n"
            << std::flush;
  std::cout << std::flush;
  // End the process as the signal would have.
  signal(signal_number, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, signal_number);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  raise(signal_number);
  _exit(128 + signal_number);
}

void RealJob::EndJob() {
  const pid_t pid = child_;
  child_ = 0;
  // mpirun forwards SIGTERM to its ranks and waits for them; give it 3 s.
  kill(pid, SIGTERM);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  int status = 0;
  bool ended = false;
  while (std::chrono::steady_clock::now() < deadline) {
    if (waitpid(pid, &status, WNOHANG) == pid) {
      ended = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (!ended) {
    kill(-pid, SIGKILL);  // its process group (the ranks have groups of their own: see below)
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  ReapAdopted();
  RemoveStaleOpenMpiSessions(sessions_before_);
}

void RealJob::ReapAdopted() {
  // Ranks left by a launcher that died were reparented to this process (a child subreaper).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (true) {
    const std::vector<pid_t> left = ChildrenOfThisProcess();
    for (pid_t pid : left) kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(-1, &status, WNOHANG) > 0) {
    }
    if (left.empty() || std::chrono::steady_clock::now() > deadline) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void RealJob::RemoveDirIfOwned() {
  if (!remove_) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

JobResult RealJob::Run(const std::vector<std::string>& argv, double limit_s) {
  const std::string out = (dir_ / "real.stdout").string(), err = (dir_ / "real.stderr").string();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    sessions_before_ = OpenMpiSessionDirs();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 2, err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    // Its own process group (a terminal's Ctrl-C reaches this process, which ends the job), and
    // the default action for the signals this process handles.
    sigset_t defaults;
    sigemptyset(&defaults);
    for (int s : kSignals) sigaddset(&defaults, s);
    posix_spawnattr_setsigdefault(&attr, &defaults);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    // Under setpriv's parent-death signal: the job ends with this process, even by SIGKILL. A
    // program that cannot be found is started directly, so that posix_spawnp names it below.
    std::vector<std::string> full =
        IsExecutableOnPath(argv[0]) ? ParentDeathPrefix() : std::vector<std::string>{};
    full.insert(full.end(), argv.begin(), argv.end());
    std::vector<char*> args;
    for (const std::string& a : full) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
    if (rc != 0) {
      throw InputError(
          "mpirun",
          StrCat("cannot start '", ExcerptText(argv[0]), "': ", std::strerror(rc),
                 " (install OpenMPI: apt-get install openmpi-bin, or give --mpirun PATH)"));
    }
    child_ = pid;
  }
  JobResult result;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(limit_s);
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      int status = 0;
      if (waitpid(child_, &status, WNOHANG) == child_) {
        child_ = 0;
        result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        ReapAdopted();  // a rank its launcher left behind
        break;
      }
      if (std::chrono::steady_clock::now() > deadline) {
        EndJob();
        result.timed_out = true;
        result.exit_code = -1;
        break;
      }
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.stderr_text = ReadHead(err, kMaxJobStderrBytes);
  result.rank_failures = RankFailuresFromLauncher(result.stderr_text);
  return result;
}

}  // namespace dtsim::cli
