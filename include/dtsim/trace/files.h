// The output-path policy of every writer dtsim has (traces of redistribute / op / compare, export,
// layout pictures, the viewer's screenshots and record dumps): one place, so no writer can destroy
// an input or a device file.
//
//  * Identity: an output may not be the same file as an input of the run or as another of its
//    outputs, however spelled ("t.json", "./t.json", "sub/../t.json", "$PWD/t.json", a symlink or
//    a hard link to it): files that exist are compared by device and inode, outputs that do not
//    exist yet by the canonical path of their folder plus their name. InputError(<the output's
//    option>, "'./t.json' is the same file as the input of <option> ('t.json') ...").
//  * Special files are never replaced by a regular file: /dev/null is written as a stream; this
//    process's own standard output or error, however named (/dev/stdout, /proc/self/fd/2, or the
//    regular file the shell redirected it to), is written to that descriptor after what the
//    process wrote there, never replaced; a FIFO is written as a stream when a reader holds it
//    open, and refused otherwise (no wait); any other device, a socket or a directory is refused.
//    A failed write (a closed pipe, a full disk) is an InputError: the command fails.
//  * A symlinked output is written through: the file it points to is replaced (atomically) or
//    created, the link itself stays a link.
//  * A regular or new file is written atomically: a temporary file beside it, then a rename, so a
//    reader never sees half a file and a failed write leaves the old one (and no temporary).
//  * The inputs include what is read with them: standard input ("-") when it is a regular file
//    (`--batch - < cases.jsonl`: "/dev/stdin", "/proc/self/fd/0" and "cases.jsonl" are all it),
//    and a recording's data sidecar (`<input>.data`, read by replay, export and the viewer).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace dtsim {

// The files one run reads and writes, checked as they are named (before any work).
class RunFiles {
 public:
  // An input the run reads (a missing one is recorded by name only: reading it reports the error);
  // "-" is standard input. Its companions (above) are recorded with it, named "<field> (standard
  // input)" and "<field> (its data sidecar)".
  void Input(const std::string& path, const std::string& field);
  // Checks `path` as an output of the run — the identity rule above against every input and output
  // named so far, the special-file rule, a folder that exists and is writable — and records it.
  // InputError(field) naming both options when two paths are the same file.
  void Output(const std::string& path, const std::string& field);

 private:
  struct Entry {
    std::string path;
    std::string field;
    bool output = false;
  };
  std::vector<Entry> entries_;
};

// The checks of RunFiles::Output for one output alone (no other file to compare with).
void CheckOutputFile(const std::string& path, const std::string& field);

// True when `a` and `b` name the same file (device and inode when both exist, else the canonical
// path of the folder plus the name).
bool SameFile(const std::string& a, const std::string& b);

// Writes `text` to `path` by the policy above (atomically for regular and new files, as a stream
// for the special files it allows). InputError(field) naming the path and the reason.
void WriteOutputFile(const std::string& path, const std::string& text, const std::string& field);
// The same, for an output held in pieces (a recording's data sidecar: many shards' bytes), written
// in order without joining them.
void WriteOutputFile(const std::string& path, const std::vector<std::string_view>& chunks,
                     const std::string& field);

// The input side of the policy: every file dtsim reads whole (traces, op traces, plans) goes
// through ReadInputFile, so no read is unbounded.
//  * Regular files larger than `max_bytes` are refused before reading, and the read stops at
//    max_bytes + 1 bytes even if the file grows meanwhile.
//  * A FIFO or pipe (`<(cmd)`, a named pipe) is read as a stream with the same bound; a FIFO with
//    no writer, or one that sends nothing for kInputStallSeconds, is refused — never a hang.
//  * Directories, character and block devices (/dev/zero, /dev/urandom, a terminal) and sockets
//    are refused up front.
// InputError(field) naming the path and the reason, e.g. "trace: '/dev/zero' is a character
// device, not a file".
inline constexpr int kInputStallSeconds = 30;
std::string ReadInputFile(const std::string& path, const std::string& field, int64_t max_bytes);
// For readers that stream a FIFO themselves (--batch files): a file descriptor of `path` (blocking,
// close-on-exec; the caller closes it) once a writer has come, InputError(field) when none comes
// within kInputStallSeconds — opening a FIFO without a writer would otherwise wait forever.
int OpenFifoForReading(const std::string& path, const std::string& field);

}  // namespace dtsim
