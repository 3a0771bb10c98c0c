"""`dtsim record -o FILE [--max-data-bytes N] [--no-ops] -- COMMAND [ARGS...]`: records every rank of a real job,
unchanged, into one recording (docs/recording.md).

    dtsim record -o real.json -- torchrun --standalone --nproc_per_node 4 train.py
    dtsim run --nproc-per-node 4 --trace sim.json train.py
    dtsim trace-diff real.json sim.json

The command runs with a start-up hook on its Python path (a `sitecustomize` in the job's own temporary folder): every
process of it that is a rank (RANK set, as torchrun sets it) records its whole program — redistributions, and with
ops every DTensor op and collective (dtsim/events.py) — into a part file, written when the rank destroys its default
process group or exits. When the command ends, this process merges the parts into FILE (and FILE.data), atomically.
Nothing is written when a rank is missing.

Exit status: the command's own when it failed (nothing written), 2 for bad input or parts that cannot be merged, else
0. The job's processes get SIGTERM if this process dies.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from typing import List, Optional, Sequence

_BOOT = '''# dtsim record's start-up hook (python/dtsim/record_command.py): every rank of the job records into a part file.
import os as _os
if _os.environ.get("DTSIM_RECORD_PARTS") and "RANK" in _os.environ:
    import dtsim.recorder as _recorder
    _recorder._start_part()
'''


class BadInput(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise BadInput(f"arguments: {message}")


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    argv = list(argv)
    if "--" in argv:
        at = argv.index("--")
        own, command = argv[:at], argv[at + 1:]
    else:
        own, command = argv, []
    p = _Parser(prog="dtsim record", allow_abbrev=False,
                description="Record every rank of a real job (torchrun ...) into one recording.")
    p.add_argument("-o", "--output", required=True, help="the recording to write (FILE.data beside it)")
    p.add_argument("--max-data-bytes", default=str(256 << 20),
                   help="shard bytes kept for replay, in all (default 256 MiB)")
    p.add_argument("--no-ops", action="store_true", help="redistributions only: no op and collective events")
    p.add_argument("--memory", action="store_true",
                   help="ranks without CUDA also record their memory at module boundaries (dtsim's tensor meter; "
                        "CUDA ranks always record the allocator's)")
    args = p.parse_args(own)
    if args.memory and args.no_ops:
        raise BadInput("memory: --memory records memory beside the op events, which --no-ops turns off")
    if not command:
        raise BadInput("command: missing; give it after '--' (dtsim record -o run.json -- torchrun ... script.py)")
    args.command = command
    try:
        args.max_data_bytes = int(args.max_data_bytes)
    except ValueError:
        raise BadInput(f"max-data-bytes: '{args.max_data_bytes}' is not a whole number") from None
    if args.max_data_bytes < 0:
        raise BadInput(f"max-data-bytes: {args.max_data_bytes} is out of range (0 or more)")
    return args


def _check_output(path: str, command: List[str]) -> None:
    """The recording and its data sidecar: writable, and neither one a file the command names."""
    from ._files import check_outputs, check_recording_path

    try:
        check_recording_path(path, "output")
        check_outputs([(path, "output"), (path + ".data", "output (its data sidecar)")],
                      [(word, "the command") for word in command if os.path.isfile(word)])
    except ValueError as e:
        raise BadInput(str(e)) from None


def _die_with_parent() -> None:
    """In the child, before exec: SIGTERM when this process dies (Linux's parent-death signal)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _remove_stale_folders() -> None:
    """Removes the working folders (`dtsim-record-<pid>-*` in the temporary directory) of `dtsim record` processes
    that no longer run: one killed by SIGKILL could not remove its own. A folder is left alone while its process
    lives, or when it is not this user's."""
    root = tempfile.gettempdir()
    try:
        names = os.listdir(root)
    except OSError:
        return
    for name in names:
        parts = name.split("-")
        if len(parts) < 4 or parts[:2] != ["dtsim", "record"] or not parts[2].isdigit():
            continue
        path = os.path.join(root, name)
        try:
            if os.lstat(path).st_uid != os.getuid() or not os.path.isdir(path):
                continue
            os.kill(int(parts[2]), 0)
        except ProcessLookupError:
            shutil.rmtree(path, ignore_errors=True)
        except (OSError, OverflowError, ValueError):
            continue


def main(argv: Sequence[str]) -> int:
    try:
        args = _parse(argv)
        _check_output(args.output, args.command)
    except BadInput as e:
        print(f"dtsim: error: {e}", file=sys.stderr)
        return 2
    _remove_stale_folders()
    folder = tempfile.mkdtemp(prefix=f"dtsim-record-{os.getpid()}-")
    try:
        boot = os.path.join(folder, "boot")
        os.mkdir(boot)
        with open(os.path.join(boot, "sitecustomize.py"), "w") as f:
            f.write(_BOOT)
        package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join([boot, package_parent] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                                       else []))
        env.update({"DTSIM_RECORD_PARTS": folder, "DTSIM_RECORD_OUT": os.path.abspath(args.output),
                    "DTSIM_RECORD_MAX": str(args.max_data_bytes), "DTSIM_RECORD_OPS": "0" if args.no_ops else "1",
                    "DTSIM_RECORD_MEMORY": "1" if args.memory else "0"})
        try:
            child = subprocess.Popen(args.command, env=env, preexec_fn=_die_with_parent)
        except OSError as e:
            print(f"dtsim: error: command: cannot run '{args.command[0]}': {e.strerror}", file=sys.stderr)
            return 2

        # The merge needs torch; it loads while the job runs rather than after it (nothing here needed it so far). The
        # load is always waited for, whatever the job's outcome: an interpreter that exits while a thread is inside
        # torch's import could hang in the dynamic loader.
        loaded: List[BaseException] = []

        def load() -> None:
            try:
                import torch  # noqa: F401  (the merge writes tensors' bytes)

                from . import recorder  # noqa: F401
            except BaseException as e:  # noqa: BLE001  raised again where the merge needs them
                loaded.append(e)

        loader = threading.Thread(target=load, name="dtsim-record-load")
        loader.start()

        def forward(signum, _frame):
            child.send_signal(signum)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGINT, signal.SIGTERM)}
        try:
            code = child.wait()
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)
            loader.join()
        if code != 0:
            print(f"dtsim record: the command exited with {code}; no recording written", file=sys.stderr)
            return code if code > 0 else 128 - code
        if loaded:
            raise loaded[0]
        from .recorder import merge_parts

        try:
            summary = merge_parts(folder, args.output, args.max_data_bytes, " ".join(args.command))
        except (ValueError, RuntimeError, OSError) as e:
            print(f"dtsim: error: recording: {e}; nothing written", file=sys.stderr)
            return 2
        note = f"; ops not recorded: {summary['unsupported']}" if summary["unsupported"] else ""
        print(f"dtsim record: {summary['world']} ranks recorded into {args.output}: {summary['redistributions']} "
              f"redistributions, {summary['events']} events (ops and collectives, all ranks){note}", file=sys.stderr)
        return 0
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
