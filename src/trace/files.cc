// The output-path policy (see include/dtsim/trace/files.h).
#include "dtsim/trace/files.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "dtsim/layout/error.h"
#include "dtsim/layout/json_reader.h"

namespace dtsim {
namespace {

std::string Quoted(const std::string& path) { return StrCat("'", ExcerptText(path), "'"); }

// What a path names now, and whether a writer may use it.
// kStdout / kStderr: the file this process's standard output or error is (a terminal, a pipe, or
// the regular file it was redirected to), however named: written to that descriptor, where the
// process's own output goes, never replaced.
enum class Kind { kMissing, kRegular, kStream, kFifo, kStdout, kStderr };

struct Identity {
  bool exists = false;
  dev_t dev = 0;
  ino_t ino = 0;
  std::string canonical;  // the absolute path, symlinks of existing folders resolved
};

Identity Identify(const std::string& path) {
  Identity id;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0) {
    id.exists = true;
    id.dev = st.st_dev;
    id.ino = st.st_ino;
  }
  std::error_code ec;
  const std::filesystem::path abs = std::filesystem::absolute(path, ec);
  const std::filesystem::path canon = std::filesystem::weakly_canonical(abs, ec);
  id.canonical = (ec ? abs.lexically_normal() : canon).string();
  return id;
}

bool SameInode(const struct stat& a, int fd) {
  struct stat b;
  return ::fstat(fd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Classifies `path` for writing; InputError(field) for what may never be written.
Kind Classify(const std::string& path, const std::string& field) {
  if (path.empty()) throw InputError(field, "the output path is empty");
  struct stat lst;
  if (::lstat(path.c_str(), &lst) != 0) {
    // Not there (or under a file): the writer's folder check names what is wrong.
    if (errno == ENOENT || errno == ENOTDIR) return Kind::kMissing;
    throw InputError(field, StrCat("cannot write ", Quoted(path), ": ", std::strerror(errno)));
  }
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    // A symlink to a file not there yet: written through (its folder is checked by the writer).
    if (errno == ENOENT) return Kind::kMissing;
    throw InputError(field, StrCat("cannot write ", Quoted(path), ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (SameInode(st, STDOUT_FILENO)) return Kind::kStdout;
    if (SameInode(st, STDERR_FILENO)) return Kind::kStderr;
  }
  if (S_ISREG(st.st_mode)) return Kind::kRegular;
  if (S_ISDIR(st.st_mode)) {
    throw InputError(field, StrCat(Quoted(path), " is a directory; give a file path"));
  }
  if (S_ISFIFO(st.st_mode)) return Kind::kFifo;
  if (S_ISCHR(st.st_mode)) {
    struct stat null_st;
    const bool is_null = ::stat("/dev/null", &null_st) == 0 && null_st.st_dev == st.st_dev &&
                         null_st.st_ino == st.st_ino;
    if (is_null) return Kind::kStream;
    throw InputError(field, StrCat(Quoted(path),
                                   " is a character device other than /dev/null or this "
                                   "process's standard output or error: not written"));
  }
  throw InputError(field, StrCat(Quoted(path), " is ",
                                 S_ISBLK(st.st_mode)    ? "a block device"
                                 : S_ISSOCK(st.st_mode) ? "a socket"
                                                        : "not a regular file",
                                 ": not written"));
}

// The folder a new or regular file is written in must exist and be writable.
void CheckFolder(const std::string& target, const std::string& shown, const std::string& field) {
  const size_t slash = target.find_last_of('/');
  const std::string dir =
      slash == std::string::npos ? "." : (slash == 0 ? "/" : target.substr(0, slash));
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) {
    throw InputError(field, StrCat("cannot write ", Quoted(shown), ": ", std::strerror(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    throw InputError(
        field, StrCat("cannot write ", Quoted(shown), ": ", Quoted(dir), " is not a directory"));
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw InputError(field, StrCat("cannot write ", Quoted(shown), ": ", std::strerror(errno)));
  }
}

// A symlink is written through: the file it points to (which may not exist yet).
std::string Target(const std::string& path) {
  std::string current = path;
  for (int hops = 0; hops < 40; ++hops) {
    struct stat lst;
    if (::lstat(current.c_str(), &lst) != 0 || !S_ISLNK(lst.st_mode)) return current;
    std::error_code ec;
    const std::filesystem::path link = std::filesystem::read_symlink(current, ec);
    if (ec) return current;
    current = (link.is_absolute() ? link : std::filesystem::path(current).parent_path() / link)
                  .lexically_normal()
                  .string();
  }
  return current;
}

// Writes all of `text` to `fd` (a write to a pipe whose reader left fails with EPIPE, not SIGPIPE).
void WriteAll(int fd, const std::vector<std::string_view>& chunks, const std::string& path,
              const std::string& field) {
  sigset_t block, saved;
  sigemptyset(&block);
  sigaddset(&block, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &block, &saved);
  int error = 0;
  for (const std::string_view text : chunks) {
    size_t done = 0;
    while (error == 0 && done < text.size()) {
      const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
      if (n < 0) {
        if (errno == EINTR) continue;
        error = errno;
        break;
      }
      done += static_cast<size_t>(n);
    }
    if (error != 0) break;
  }
  if (error == EPIPE) {  // consume the pending SIGPIPE before unblocking it
    const struct timespec zero = {0, 0};
    sigtimedwait(&block, nullptr, &zero);
  }
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (error != 0) {
    throw InputError(field, StrCat("writing ", Quoted(path), " failed: ", std::strerror(error)));
  }
}

void WriteStream(const std::string& path, const std::vector<std::string_view>& chunks, Kind kind,
                 const std::string& field) {
  // A FIFO is opened without waiting: no reader, no write (ENXIO).
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CLOEXEC | (kind == Kind::kFifo ? O_NONBLOCK : 0));
  if (fd < 0) {
    throw InputError(field, StrCat("cannot write ", Quoted(path), ": ",
                                   errno == ENXIO ? "it is a FIFO that no process reads"
                                                  : std::strerror(errno)));
  }
  if (kind == Kind::kFifo) ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  try {
    WriteAll(fd, chunks, path, field);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
}

void WriteAtomically(const std::string& path, const std::vector<std::string_view>& chunks,
                     const std::string& field) {
  const std::string target = Target(path);
  CheckFolder(target, path, field);
  const std::string tmp = StrCat(target, ".tmp.", ::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) {
    throw InputError(field, StrCat("cannot write ", Quoted(path), ": ", std::strerror(errno)));
  }
  try {
    WriteAll(fd, chunks, path, field);
  } catch (...) {
    ::close(fd);
    std::remove(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw InputError(field, StrCat("writing ", Quoted(path), " failed: ", std::strerror(e)));
  }
  if (std::rename(tmp.c_str(), target.c_str()) != 0) {
    const int e = errno;
    std::remove(tmp.c_str());
    throw InputError(field, StrCat("cannot move the output into place at ", Quoted(path), ": ",
                                   std::strerror(e)));
  }
}

}  // namespace

bool SameFile(const std::string& a, const std::string& b) {
  const Identity x = Identify(a);
  const Identity y = Identify(b);
  if (x.exists && y.exists) return x.dev == y.dev && x.ino == y.ino;
  if (x.exists != y.exists) return false;
  return x.canonical == y.canonical;
}

void CheckOutputFile(const std::string& path, const std::string& field) {
  const Kind kind = Classify(path, field);
  if (kind == Kind::kMissing || kind == Kind::kRegular) CheckFolder(Target(path), path, field);
}

void RunFiles::Input(const std::string& path, const std::string& field) {
  struct stat st;
  if (path == "-") {
    // Only a regular file can be replaced; a terminal or pipe on standard input is no file to keep.
    if (::fstat(STDIN_FILENO, &st) == 0 && S_ISREG(st.st_mode)) {
      entries_.push_back({"/dev/stdin", StrCat(field, " (standard input)"), false});
    }
    return;
  }
  entries_.push_back({path, field, false});
  const std::string sidecar = path + ".data";
  if (::stat(sidecar.c_str(), &st) == 0) {
    entries_.push_back({sidecar, StrCat(field, " (its data sidecar)"), false});
  }
}

void RunFiles::Output(const std::string& path, const std::string& field) {
  CheckOutputFile(path, field);
  for (const Entry& e : entries_) {
    if (!SameFile(path, e.path)) continue;
    // /dev/null may take several outputs (nothing is kept).
    struct stat st, null_st;
    if (e.output && ::stat(path.c_str(), &st) == 0 && ::stat("/dev/null", &null_st) == 0 &&
        st.st_dev == null_st.st_dev && st.st_ino == null_st.st_ino) {
      continue;
    }
    throw InputError(
        field, StrCat(Quoted(path), " is the same file as the ", e.output ? "output" : "input",
                      " of ", e.field, " (", Quoted(e.path), "): an output never replaces ",
                      e.output ? "another output of the same run" : "an input"));
  }
  entries_.push_back({path, field, true});
}

void WriteOutputFile(const std::string& path, const std::vector<std::string_view>& chunks,
                     const std::string& field) {
  const Kind kind = Classify(path, field);
  if (kind == Kind::kStdout || kind == Kind::kStderr) {
    // After what the process wrote there through stdio (C++ streams included): in order.
    std::fflush(nullptr);
    WriteAll(kind == Kind::kStdout ? STDOUT_FILENO : STDERR_FILENO, chunks, path, field);
  } else if (kind == Kind::kStream || kind == Kind::kFifo) {
    WriteStream(path, chunks, kind, field);
  } else {
    WriteAtomically(path, chunks, field);
  }
}

void WriteOutputFile(const std::string& path, const std::string& text, const std::string& field) {
  WriteOutputFile(path, std::vector<std::string_view>{text}, field);
}

std::string ReadInputFile(const std::string& path, const std::string& field, int64_t max_bytes) {
  const std::string name = StrCat("'", ExcerptText(path), "'");
  if (path.empty()) throw InputError(field, "the path is empty");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    throw InputError(field, StrCat("cannot open ", name, ": ", std::strerror(errno)));
  }
  if (S_ISDIR(st.st_mode)) throw InputError(field, StrCat(name, " is a directory, not a file"));
  if (S_ISCHR(st.st_mode))
    throw InputError(field, StrCat(name, " is a character device, not a file"));
  if (S_ISBLK(st.st_mode)) throw InputError(field, StrCat(name, " is a block device, not a file"));
  if (S_ISSOCK(st.st_mode)) throw InputError(field, StrCat(name, " is a socket, not a file"));
  const bool stream = S_ISFIFO(st.st_mode);
  if (!stream && st.st_size > max_bytes) {
    throw InputError(field, StrCat(name, " has ", st.st_size, " bytes; files over ", max_bytes,
                                   " bytes are refused"));
  }
  // Non-blocking open: opening a FIFO without a writer would otherwise wait forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(field, StrCat("cannot open ", name, ": ", std::strerror(errno)));
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  std::string text;
  // A regular file's size is known: one allocation (growing by doubling would hold up to twice the
  // file, and copy it at each step). A stream is shrunk to what it sent below.
  if (!stream) text.reserve(static_cast<size_t>(st.st_size));
  char buf[1 << 16];
  // A file that reports "regular" but blocks (procfs's /proc/kmsg: size 0, no data, EAGAIN on this
  // non-blocking descriptor) is waited for as a pipe is, up to kInputStallSeconds without data.
  auto stalled_since = std::chrono::steady_clock::now();
  while (true) {
    if (stream) {
      struct pollfd pfd = {fd, POLLIN, 0};
      const int ready = ::poll(&pfd, 1, kInputStallSeconds * 1000);
      if (ready < 0 && errno == EINTR) continue;
      if (ready == 0) {
        throw InputError(field, StrCat(name, " is a pipe that sent nothing for ",
                                       kInputStallSeconds, " s (no writer?)"));
      }
    }
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN) {
        if (std::chrono::steady_clock::now() - stalled_since >
            std::chrono::seconds(kInputStallSeconds)) {
          throw InputError(field, StrCat(name, " sent nothing for ", kInputStallSeconds,
                                         " s (a file that blocks, such as /proc/kmsg?)"));
        }
        struct pollfd pfd = {fd, POLLIN, 0};
        ::poll(&pfd, 1, 100);  // waits where the file can say when data comes; else a short pause
        continue;
      }
      throw InputError(field, StrCat("cannot read ", name, ": ", std::strerror(errno)));
    }
    stalled_since = std::chrono::steady_clock::now();
    if (n == 0) break;
    if (static_cast<int64_t>(text.size()) + n > max_bytes) {
      throw InputError(
          field, StrCat(name, " holds more than ", max_bytes, " bytes; larger files are refused"));
    }
    text.append(buf, static_cast<size_t>(n));
  }
  if (text.capacity() > text.size() + text.size() / 4) text.shrink_to_fit();
  return text;
}

int OpenFifoForReading(const std::string& path, const std::string& field) {
  const std::string name = StrCat("'", ExcerptText(path), "'");
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw InputError(field, StrCat("cannot open ", name, ": ", std::strerror(errno)));
  // A reader's poll on a FIFO that never had a writer reports nothing: POLLIN or POLLHUP means one
  // came (and wrote, or left: what it wrote stays readable while this descriptor is open).
  struct pollfd pfd = {fd, POLLIN, 0};
  int ready;
  do {
    ready = ::poll(&pfd, 1, kInputStallSeconds * 1000);
  } while (ready < 0 && errno == EINTR);
  if (ready <= 0) {
    ::close(fd);
    throw InputError(field, StrCat(name, " is a FIFO that no process wrote to within ",
                                   kInputStallSeconds, " s"));
  }
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0) ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

}  // namespace dtsim
