// The real run of `dtsim compare`: its working folder and the mpirun job it launches, supervised so
// that nothing outlives the command — a watchdog past the time limit, and SIGINT, SIGTERM or SIGHUP
// sent to `dtsim compare`, end mpirun and every rank it started and remove the temporary folder —
// and the launcher's report read for the ranks that died ("rank 2 killed by signal 9 (SIGKILL)").
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace dtsim::cli {

// What a launched job left behind.
struct JobResult {
  bool timed_out = false;   // ended by the watchdog after the time limit
  int exit_code = 0;        // the launcher's exit status (128 + N when a signal N ended it)
  std::string stderr_text;  // the launcher's standard error, its first kMaxJobStderrBytes
  // The ranks the launcher reports dead or failed, one line each: "rank 2 killed by signal 9
  // (SIGKILL)", "rank 5 exited with code 3". Empty when it names none.
  std::vector<std::string> rank_failures;
};

// Bytes of the launcher's standard error read back (the rest is not shown).
inline constexpr size_t kMaxJobStderrBytes = size_t{1} << 20;

// The ranks an OpenMPI launcher names in its report on standard error: "mpirun noticed that process
// rank 2 with PID 0 on node vm exited on signal 9 (Killed)." → "rank 2 killed by signal 9
// (SIGKILL)"; "Process name: [[18809,1],2]\n  Exit code:    1" → "rank 2 exited with code 1". Each
// rank once, in the order reported.
std::vector<std::string> RankFailuresFromLauncher(std::string_view stderr_text);

// True when `name` is an executable file (a name with a '/') or a program found in $PATH, as
// posix_spawnp would find it.
bool IsExecutableOnPath(const std::string& name);

// The words that make a command end when the process that starts it dies, even by SIGKILL:
// util-linux's `setpriv --pdeathsig KILL --` (Linux's parent-death signal, kept across exec), or
// nothing where setpriv is missing.
std::vector<std::string> ParentDeathPrefix();

// "SIGKILL" for 9; "signal 77" for a number without a name.
std::string SignalName(int signal_number);

// Owns the folder of one real run and the job launched in it. While one exists, SIGINT, SIGTERM and
// SIGHUP do not end the process at once: a watcher thread ends the job (SIGTERM to the launcher,
// which forwards it to its ranks; after 3 s SIGKILL to the launcher's process group and to every
// rank left, which this process adopts as a child subreaper; then the session folder OpenMPI leaves
// when mpirun is killed), removes the folder unless it is kept,
// says so on stderr, and ends the process with the same signal (the caller's shell sees 130 for
// SIGINT). The destructor does the same cleanup on every normal or exceptional exit. One per
// process (it installs the signal handlers).
class RealJob {
 public:
  // `keep`: the folder to use and keep (--keep DIR, created if missing); nullopt: a new folder
  // dtsim-compare-<pid>-XXXXXX under the temporary directory ($TMPDIR), removed at the end; the
  // folders of earlier jobs whose process died without cleaning up (SIGKILL) are removed first,
  // with the OpenMPI session folders their mpirun left. Throws InputError("keep"/"compare") when
  // the folder cannot be made.
  explicit RealJob(const std::optional<std::string>& keep);
  ~RealJob();
  RealJob(const RealJob&) = delete;
  RealJob& operator=(const RealJob&) = delete;

  const std::filesystem::path& dir() const { return dir_; }
  bool removes_dir() const { return remove_; }

  // Held while writing into the folder, so that a signal's cleanup does not race the write.
  std::unique_lock<std::mutex> Lock() { return std::unique_lock<std::mutex>(mutex_); }

  // Runs `argv` (argv[0] looked up in PATH) in its own process group with stdout and stderr in
  // dir()/real.stdout and dir()/real.stderr and stdin from /dev/null, under ParentDeathPrefix()
  // (it ends if this process is killed); ends it as above after `limit_s` seconds. Throws
  // InputError("mpirun") when it cannot be started.
  JobResult Run(const std::vector<std::string>& argv, double limit_s);

 private:
  void MakeDir(const std::optional<std::string>& keep);
  void StopWatching();      // restores the signal handlers and joins the watcher
  void Watch();             // the watcher thread: waits for a signal, then cleans up and re-raises
  void EndJob();            // with mutex_ held: ends child_ and every process it left
  void ReapAdopted();       // with mutex_ held: kills and reaps processes reparented to this one
  void RemoveDirIfOwned();  // with mutex_ held

  std::filesystem::path dir_;
  bool remove_ = false;
  std::mutex mutex_;
  pid_t child_ = 0;  // the running launcher, 0 when none (guarded by mutex_)
  // OpenMPI's session folders before child_ started (see RemoveStaleOpenMpiSessions).
  std::set<std::filesystem::path> sessions_before_;
  int pipe_[2] = {-1, -1};
  std::thread watcher_;
};

}  // namespace dtsim::cli
