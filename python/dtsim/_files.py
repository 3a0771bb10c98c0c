"""The output-path policy of dtsim's Python writers: `dtsim record`, `dtsim import-fr`, `dtsim.record` and
`dtsim run`'s --trace and --report-json. It is the C++ writers' policy (include/dtsim/trace/files.h), run by the same
code through dtsim._files_c (an extension without LibTorch: `dtsim record` checks its outputs before it loads torch),
so every command refuses and writes alike:
- an output is never an input or another output of the run, however spelled (a relative path, `..`, a link);
- a directory, a device other than /dev/null or the process's own standard output or error, a socket, or a FIFO no
  process reads is refused; a folder that is missing or not writable is refused;
- the process's own standard output or error, however named (/dev/stdout, or the file the shell redirected it to), is
  written to that descriptor after the program's output, never replaced; a recording (a file with a sidecar) is
  refused there;
- a regular or new file is written atomically (a temporary file beside it, renamed), a symlink is written through,
  and the special files allowed are written as streams; a failed write raises ValueError, and the command fails.
Refusals raise ValueError("<field>: <why>")."""

from __future__ import annotations

from typing import Any, Iterable, Sequence, Tuple


def check_outputs(outputs: Sequence[Tuple[str, str]], inputs: Iterable[Tuple[str, str]] = ()) -> None:
    """Checks each (path, field) output against the policy, the run's (path, field) inputs and the outputs named
    before it; nothing is written."""
    from . import _files_c

    _files_c.check_outputs([(str(p), f) for p, f in outputs], [(str(p), f) for p, f in inputs])


def check_recording_path(path: str, field: str) -> None:
    """A recording is written with its data sidecar (`<path>.data`) beside it, so it must be a regular or new file
    (not /dev/null or a stream, whose sidecar would be a new file in /dev); check_outputs checks the rest."""
    import os

    if os.path.lexists(path) and not os.path.isfile(path):
        raise ValueError(f"{field}: '{path}' is not a regular file: a recording is a file with its data sidecar "
                         f"('{path}.data') beside it")
    if os.path.isfile(path):
        st = os.stat(path)
        for fd, name in ((1, "standard output"), (2, "standard error")):
            try:
                own = os.fstat(fd)
            except OSError:
                continue
            if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
                raise ValueError(f"{field}: '{path}' is this process's {name} (redirected to that file): a "
                                 f"recording is a file of its own, with its data sidecar ('{path}.data') beside it; "
                                 "writing it there would replace the program's output")


def write_output(path: str, chunks: Sequence[Any], field: str) -> None:
    """Writes the contiguous buffers (bytes, numpy arrays) in order to `path`, without joining them."""
    from . import _files_c

    _files_c.write_output(str(path), list(chunks), field)

