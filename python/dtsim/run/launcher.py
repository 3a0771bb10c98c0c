"""`dtsim run`: a torchrun script, unchanged, as N simulated ranks in this one process.

    dtsim run [--nproc-per-node N] [--nnodes M] [--standalone] [--rank-prefix] [--local-ranks-filter R]
              [--timeout S] [--report] [--report-json FILE] [--trace FILE] [--memory] [--meta] [--check-ops]
              [--shared-modules PKG,...|all] (SCRIPT | -m MODULE) [ARGS...]

Exit status: 0 when every rank's program ended normally; 1 when a rank raised or exited non-zero (as torchrun, which
exits 1 for any failed worker; the rank's own code is in the summary); 2 for bad input (options, a missing script or
module, a script that is not a regular file) and for an output of the run that could not be written; 4 when the
simulated world found what would hang or corrupt a real job (ranks at different collectives, a wait no rank can end, a
rank past --timeout, a message sent and never received); 5 when --check-ops found a divergent op; 130 on Ctrl-C
(SIGINT), 143 on SIGTERM, both with the report written.
"""

from __future__ import annotations

import argparse
import contextlib
import atexit
import importlib.util
import io
import os
import signal
import stat
import sys
import threading
import time
import traceback
import types
from typing import List, Optional, Sequence, Tuple

from .config import RunConfig, RunSession

EXIT_OK, EXIT_RANK_FAILED, EXIT_BAD_INPUT, EXIT_HANG, EXIT_OP_DIVERGED, EXIT_INTERRUPTED = 0, 1, 2, 4, 5, 130
EXIT_TERMINATED = 143  # 128 + SIGTERM, as a shell reports a process that SIGTERM ended
MAX_RANKS = 4096
MAX_SCRIPT_BYTES = 64 << 20


class BadInput(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        raise BadInput("arguments", message)


def _positive_int(field: str, text: str, limit: int) -> int:
    try:
        if not text.isascii():
            raise ValueError(text)
        value = int(text)
    except ValueError:
        raise BadInput(field, f"'{text}' is not a whole number") from None
    if not 1 <= value <= limit:
        raise BadInput(field, f"{value} is out of range (1 to {limit})")
    return value


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    p = _Parser(prog="dtsim run", add_help=True, allow_abbrev=False,
                description="Run a torchrun script, unchanged, as N simulated ranks in one process.")
    p.add_argument("--nproc-per-node", "--nproc_per_node", dest="nproc_per_node", default="1",
                   help="ranks per node: a number, 'cpu' or 'auto' (this machine's core count), as torchrun")
    p.add_argument("--nnodes", default="1", help="nodes (every node is simulated here): a number, or MIN:MAX with "
                   "MIN == MAX")
    p.add_argument("--node-rank", "--node_rank", dest="node_rank", default="0",
                   help="accepted for torchrun's sake; every node is simulated")
    p.add_argument("--standalone", action="store_true", help="accepted for torchrun's sake (always standalone)")
    for name in ("--master-addr", "--master_addr", "--master-port", "--master_port", "--rdzv-backend",
                 "--rdzv_backend", "--rdzv-endpoint", "--rdzv_endpoint", "--rdzv-id", "--rdzv_id", "--max-restarts",
                 "--max_restarts"):
        p.add_argument(name, dest=name.lstrip("-").replace("-", "_"), default=None, help=argparse.SUPPRESS)
    p.add_argument("--rank-prefix", action="store_true", help="prefix every output line with [rankN]:")
    p.add_argument("--local-ranks-filter", "--local_ranks_filter", dest="ranks_filter", default=None,
                   help="show the output of these ranks only (comma list), as torchrun's option")
    p.add_argument("--timeout", default="600",
                   help="seconds a rank may compute without reaching a collective or the end of its program before "
                        "the run ends with its stack (default 600, NCCL's default collective timeout)")
    p.add_argument("--report", action="store_true",
                   help="after the run, print every collective by group, kind, cause and program line (stderr)")
    p.add_argument("--report-json", dest="report_json", default=None, metavar="FILE",
                   help="write that report as JSON (written atomically, also when the run fails)")
    p.add_argument("--trace", default=None, metavar="FILE",
                   help="write a dtsim recording of the run (every DTensor redistribution with its collectives and "
                        "every rank's shard hashes, source shards in FILE.data): dtsim replay, trace-diff, export "
                        "and the viewer read it")
    p.add_argument("--memory", action="store_true",
                   help="count every rank's tensor memory: torch.cuda's memory statistics answer from it (on with "
                        "--report, --report-json and --meta)")
    p.add_argument("--meta", action="store_true",
                   help="metadata-only: every tensor on the meta device (shapes, collectives, per-rank memory; no "
                        "values), for large rank counts")
    p.add_argument("--check-ops", "--check_ops", dest="check_ops", action="store_true",
                   help="check every DTensor op against the same op on the global tensors (replicas equal, results "
                        "equal within float rounding); the first divergence is reported with its op, module, ranks "
                        "and line, and the run exits 5")
    p.add_argument("--shared-modules", dest="shared_modules", default=None, metavar="PKG,...",
                   help="top-level packages every rank shares instead of importing its own copy (comma list), or "
                        "'all' for none per rank (docs/run.md, \"What the ranks share\")")
    p.add_argument("-m", "--module", dest="module", action="store_true", help="run a module, as python -m")
    p.add_argument("--no-python", "--no_python", dest="no_python", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("script", help="the training script (or module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's own arguments")
    _refuse_repeats(p, list(argv))
    return p.parse_args(list(argv))


def _refuse_repeats(parser: argparse.ArgumentParser, argv: List[str]) -> None:
    """BadInput for an option of dtsim run's own given twice (under any of its spellings): torchrun keeps the last,
    which hides a mistake; what follows the script is the script's and is not looked at."""
    seen = {}
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--" or not word.startswith("-") or word == "-":
            return  # the script (or -m's module, handled by the option's action below) starts here
        name = word.split("=", 1)[0]
        action = parser._option_string_actions.get(name)  # noqa: SLF001 (argparse's table of option strings)
        if action is None:
            return  # parse_args names the unknown option
        takes_value = action.nargs is None  # store actions take one value; flags take none (nargs 0)
        shown = f"{word} {argv[i + 1]}" if takes_value and "=" not in word and i + 1 < len(argv) else word
        if action.dest in seen and action.dest != "help":
            raise BadInput(action.option_strings[0].lstrip("-"),
                           f"given twice ('{seen[action.dest]}' and '{shown}'); give it once")
        seen[action.dest] = shown
        i += 2 if takes_value and "=" not in word else 1
        if action.dest == "module":
            return  # -m MODULE: the module's name comes next, then its arguments


def _nodes(text: str) -> int:
    if ":" in text:
        low, _, high = text.partition(":")
        if low != high:
            raise BadInput("nnodes", f"'{text}': elastic node ranges are not simulated; give one number")
        text = low
    return _positive_int("nnodes", text, MAX_RANKS)


def _procs(text: str) -> int:
    if text in ("cpu", "auto"):
        return os.cpu_count() or 1
    if text == "gpu":
        raise BadInput("nproc-per-node", "'gpu' counts the GPUs of a real node; give the number of ranks")
    return _positive_int("nproc-per-node", text, MAX_RANKS)


def _other_venv() -> Optional[str]:
    """The active venv ($VIRTUAL_ENV) where it is not the interpreter running dtsim run, else None."""
    venv = os.environ.get("VIRTUAL_ENV")
    if not venv or not os.path.isdir(venv):
        return None
    same = os.path.realpath(venv) in (os.path.realpath(sys.prefix), os.path.realpath(sys.exec_prefix))
    return None if same else venv


def _shared_modules(text: Optional[str]) -> Optional[Tuple[str, ...]]:
    """--shared-modules: None (the default: the program's modules are per rank), ('all',) for no per-rank modules, or
    the top-level package names every rank shares."""
    if text is None:
        return None
    if text == "all":
        return ("all",)
    names = tuple(n.strip() for n in text.split(","))
    for name in names:
        if not name.isidentifier() or not name.isascii():
            raise BadInput("shared-modules", f"'{name}' is not a top-level package name (a comma list of names, or "
                           "'all')")
    return names


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise BadInput("timeout", f"'{text}' is not a number of seconds") from None
    if not 0.001 <= value <= 86400:
        raise BadInput("timeout", f"{text} is out of range (0.001 to 86400 seconds)")
    return value


class _Program:
    """The script or module each rank runs as its `__main__`: its code compiled once."""

    def __init__(self, target: str, is_module: bool):
        self.target = target
        if is_module:
            try:
                spec = importlib.util.find_spec(target)
            except (ImportError, ValueError) as e:
                raise BadInput("module", f"'{target}': {e}") from None
            if spec is None:
                raise BadInput("module", f"No module named '{target}'")
            if spec.submodule_search_locations is not None:
                main_name = target + ".__main__"
                spec = importlib.util.find_spec(main_name)
                if spec is None:
                    raise BadInput("module", f"'{target}' is a package and has no __main__ module")
            get_code = getattr(spec.loader, "get_code", None)
            self.code = get_code(spec.name) if get_code is not None else None
            if self.code is None:
                raise BadInput("module", f"'{target}' has no Python code to run (a module built into the interpreter "
                               "or compiled from C); give a module written in Python")
            self.path = spec.origin
            self.spec = spec
            self.path_entry = os.getcwd()
        else:
            try:
                st = os.stat(target)
                if not stat.S_ISREG(st.st_mode):
                    kind = ("a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode)
                            else "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                            else "a socket" if stat.S_ISSOCK(st.st_mode) else "not a file")
                    raise BadInput("script", f"'{target}' is {kind}, not a regular file: dtsim run runs a script "
                                   "file, which every rank reads as its own")
                if st.st_size > MAX_SCRIPT_BYTES:
                    raise BadInput("script", f"'{target}' has {st.st_size} bytes; scripts over {MAX_SCRIPT_BYTES} "
                                   "bytes are refused")
                with open(target, "rb") as f:
                    source = f.read(MAX_SCRIPT_BYTES + 1)
            except OSError as e:
                raise BadInput("script", f"cannot open '{target}': {e.strerror}") from None
            if len(source) > MAX_SCRIPT_BYTES:
                raise BadInput("script", f"'{target}' holds more than {MAX_SCRIPT_BYTES} bytes; larger scripts are "
                               "refused")
            self.path = target
            self.spec = None
            self.path_entry = os.path.dirname(os.path.abspath(target))
            self.code = compile(source, target, "exec")

    def new_main(self) -> types.ModuleType:
        module = types.ModuleType("__main__")
        module.__file__ = self.path
        module.__builtins__ = __builtins__
        module.__spec__ = self.spec
        if self.spec is not None:
            module.__package__ = self.spec.parent
            module.__loader__ = self.spec.loader
        return module


class _RankOutput(io.TextIOBase):
    """sys.stdout or sys.stderr as every rank writes it: to the real stream, in order, with an optional prefix."""

    def __init__(self, real, rank_of, prefix: bool, shown: Optional[set]):
        self._real = real
        self._rank_of = rank_of
        self._prefix = prefix
        self._shown = shown
        self._partial = {}

    def writable(self) -> bool:
        return True

    @property
    def encoding(self):
        return self._real.encoding

    def isatty(self) -> bool:
        return self._real.isatty()

    def fileno(self) -> int:
        return self._real.fileno()

    @property
    def buffer(self):
        """Bytes written here bypass the prefix and the rank filter, as writes to the file descriptor do."""
        return self._real.buffer

    def write(self, text: str) -> int:
        rank = self._rank_of()
        if rank is None:
            return self._real.write(text)
        if self._shown is not None and rank not in self._shown:
            return len(text)
        if not self._prefix:
            return self._real.write(text)
        pending = self._partial.get(rank, "") + text
        *lines, rest = pending.split("\n")
        self._partial[rank] = rest
        for line in lines:
            self._real.write(f"[rank{rank}]:{line}\n")
        return len(text)

    def flush(self) -> None:
        self._real.flush()

    def end_lines(self) -> None:
        """Writes what each rank left after its last newline, as a line of its own (the run is over)."""
        for rank, rest in sorted(self._partial.items()):
            if rest:
                self._real.write(f"[rank{rank}]:{rest}\n")
        self._partial.clear()
        self._real.flush()


def _check_outputs(outputs, script: str, recording: Optional[str]) -> None:
    """The run's (path, field) outputs (--report-json, --trace and its .data): refused before any rank runs when one
    cannot be written, is another of them, or would replace the program (dtsim/_files.py). `recording`: the
    --trace path, which must be a file."""
    from .._files import check_outputs, check_recording_path

    try:
        if recording is not None:
            check_recording_path(recording, "trace")
        check_outputs(outputs, [(script, "the program")] if script and os.path.isfile(script) else [])
    except ValueError as e:
        field = str(e).split(":", 1)[0]
        raise BadInput(field.split(" ", 1)[0], str(e)[len(field) + 2:]) from None


class _Tracing:
    """--trace FILE: every rank's program runs inside a `dtsim.record(FILE)` block of its own (the recorder keeps one
    per simulated rank's thread). The block ends where the rank destroys its default group, or where its program
    ends: ending it is a collective (rank 0 gathers every rank's rows and writes the recording)."""

    def __init__(self, path: str):
        self.path = path
        self._open = {}

    def open(self, rank: int) -> None:
        from ..recorder import record

        block = record(self.path, ops=True)
        block.__enter__()
        self._open[rank] = block

    def close(self, rank: Optional[int]) -> None:
        block = self._open.pop(rank, None)
        if block is not None:
            block.__exit__(None, None, None)

    def abandon(self, rank: int, error: BaseException) -> None:
        block = self._open.pop(rank, None)
        if block is not None:
            with contextlib.suppress(BaseException):
                block.__exit__(type(error), error, error.__traceback__)


def _rank_env(rank: int, nproc: int, nnodes: int, master_addr: str, master_port: str) -> dict:
    world = nproc * nnodes
    node = rank // nproc
    return {
        "RANK": str(rank), "LOCAL_RANK": str(rank % nproc), "GROUP_RANK": str(node), "ROLE_RANK": str(rank),
        "ROLE_NAME": "default", "LOCAL_WORLD_SIZE": str(nproc), "WORLD_SIZE": str(world),
        "GROUP_WORLD_SIZE": str(nnodes), "ROLE_WORLD_SIZE": str(world), "MASTER_ADDR": master_addr,
        "MASTER_PORT": master_port, "TORCHELASTIC_RESTART_COUNT": "0", "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": "dtsim", "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1", "DTSIM_RUN": "1",
    }


def _run_rank(scheduler, rank: int, program: _Program, mode_factory) -> None:
    scheduler.bind(rank)
    from .rank_state import RankExit
    from .scheduler import RunAborted
    try:
        scheduler.wait_first_turn(rank)
    except RunAborted:
        return
    code, error = 0, None
    try:
        with (mode_factory(rank) if os.environ.get("DTSIM_NO_MODE") is None else contextlib.nullcontext()):
            exec(program.code, scheduler.ranks[rank].context.main_module.__dict__)
    except RunAborted:
        return
    except RankExit as e:  # os._exit(code): the rank's process ends here, without its finally blocks' output
        code = e.code
        if code != 0:
            error = f"os._exit({code}) ended rank {rank}'s process"
    except SystemExit as e:
        if e.code is None:
            code = 0
        elif isinstance(e.code, int):
            code = e.code
        else:
            print(e.code, file=sys.stderr)
            code = 1
    except BaseException:
        code, error = 1, traceback.format_exc()
        lines = error.rstrip("\n").split("\n")
        sys.__stderr__.write("".join(f"[rank{rank}]: {line}\n" for line in lines))
    sys.stdout.flush()
    scheduler.finish(rank, code, error)


def main(argv: Sequence[str]) -> int:
    started = time.monotonic()
    try:
        args = _parse(argv)
        nproc, nnodes = _procs(args.nproc_per_node), _nodes(args.nnodes)
        world_size = nproc * nnodes
        if world_size > MAX_RANKS:
            raise BadInput("nproc-per-node", f"{nproc} x {nnodes} nodes = {world_size} ranks; at most {MAX_RANKS}")
        timeout = _seconds(args.timeout)
        shown = None
        if args.ranks_filter is not None:
            try:
                if not args.ranks_filter.isascii():
                    raise ValueError(args.ranks_filter)
                shown = {int(r) for r in args.ranks_filter.split(",")}
            except ValueError:
                raise BadInput("local-ranks-filter", f"'{args.ranks_filter}' is not a comma list of ranks") from None
            outside = sorted(r for r in shown if not 0 <= r < world_size)
            if outside:
                raise BadInput("local-ranks-filter", f"'{args.ranks_filter}' names rank {outside[0]}, outside the "
                               f"{world_size} ranks (0 to {world_size - 1})")
        if args.no_python:
            raise BadInput("no-python", "dtsim run runs Python programs in its own process")
        program = _Program(args.script, args.module)
        if args.check_ops and args.meta:
            raise BadInput("check-ops", "a metadata-only run (--meta) has no values to check; check ops on a run "
                           "with values")
        if args.trace is not None:
            if args.meta:
                raise BadInput("trace", "a metadata-only run (--meta) has no shard values to hash or keep; trace a "
                               "run with values, or use --report-json for the collectives of a --meta run")
        shared = _shared_modules(args.shared_modules)
        outputs = [] if args.report_json is None else [(args.report_json, "report-json")]
        if args.trace is not None:
            outputs += [(args.trace, "trace"), (args.trace + ".data", "trace (its data sidecar)")]
        _check_outputs(outputs, program.path, args.trace)
        config = RunConfig(nproc_per_node=nproc, nnodes=nnodes, meta=args.meta, memory=args.memory,
                           check_ops=args.check_ops, report=args.report, report_json=args.report_json,
                           trace=args.trace, rank_prefix=args.rank_prefix,
                           shown_ranks=frozenset(shown) if shown is not None else None, timeout_s=timeout,
                           timeout_text=args.timeout,
                           shared_modules=() if shared in (None, ("all",)) else shared,
                           per_rank_modules=shared != ("all",))
    except BadInput as e:
        print(f"dtsim: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except SyntaxError:
        traceback.print_exc()
        return EXIT_RANK_FAILED

    import torch
    import torch.distributed as dist

    other_venv = _other_venv()
    if other_venv is not None:
        print(f"dtsim run: the program runs with {sys.executable} (torch {torch.__version__}), not with the active "
              f"venv {other_venv}; to use that one, run `python -m dtsim run ...` from it with dtsim installed there "
              "(docs/python.md), or set DTSIM_PYTHON to its python", file=sys.stderr)

    # Imported for their registry tables.
    from . import check_ops, emulation, gpu_kernels, meta, modules, patches, rank_state  # noqa: F401
    from .modules import MemoryMeter, Tracker
    from .process_group import World
    from .scheduler import RankContext, Scheduler

    try:
        patches.probe_all(config=config)
    except patches.TorchContractError as e:
        print(f"dtsim: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    master_addr = getattr(args, "master_addr", None) or "127.0.0.1"
    master_port = getattr(args, "master_port", None) or "29500"
    sys.path.insert(0, program.path_entry)
    argv0 = [program.path] + list(args.args)
    sys.argv[:] = argv0
    world_size = config.world_size
    contexts = [RankContext(dict(_rank_env(r, nproc, nnodes, master_addr, master_port),
                                 **({"DTSIM_RUN_META": "1"} if args.meta else {})), program.new_main(), list(argv0))
                for r in range(world_size)]
    os.environ["TORCH_DIST_INIT_BARRIER"] = "0"
    scheduler = Scheduler(contexts, os.environ)
    world = World(scheduler, world_size)
    world.tracker = Tracker(world_size, scheduler.current_rank, modules=config.tracks_modules,
                            metered=config.metered, meta_run=config.meta)
    if config.reporting:
        from .report import Report

        world.report = Report(world_size, world.tracker)
    session = RunSession(config, scheduler=scheduler, world=world, tracker=world.tracker, store=dist.HashStore())
    if args.check_ops:
        from .check_ops import OpChecker, OpCheckMode

        def module_of(rank: int) -> str:
            path, pass_ = world.tracker.collective_keys(rank)[-1]
            return f"{path} ({pass_})"

        session.checker = OpChecker(module_of)
    patches.install(session, ["c10d", "cuda", "gpu_kernels", "dtensor", "modules", "meta", "check_ops", "process"])
    tracing = _Tracing(args.trace) if args.trace is not None else None
    if tracing is not None:
        from .. import recorder

        recorder.RUN_WHERE = lambda rank: world.tracker.collective_keys(rank)[-1]

        def boundary(*sample) -> None:  # every rank's memory at its module boundaries, into its own recording
            current = recorder._current()
            if current is not None and current.event_log is not None:
                current.event_log.boundary(*sample)

        world.tracker.boundary = boundary
        world.collective_log = []
        emulation.before_destroy(session, lambda group: tracing.close(scheduler.current_rank())
                                 if group is None or group is dist.GroupMember.WORLD else None)

    value_reads = meta.ValueReads(session.rank_of)

    def device_and_meter(rank: int):
        """What a rank's threads run under: GPU devices on the CPU (or meta), and the rank's memory meter."""
        stack = contextlib.ExitStack()
        program_meta = (lambda out: world.tracker.uncount(rank, out)) if world.tracker.metered else None
        stack.enter_context(meta.MetaForAll(value_reads, program_meta) if args.meta else emulation.CpuForGpu())
        if world.tracker.metered:
            stack.enter_context(MemoryMeter(world.tracker, rank))
        return stack

    session.rank_modes = device_and_meter

    @contextlib.contextmanager
    def rank_modes(rank: int):
        """What each rank's program runs under: its device and meter modes, with --check-ops its op checker, and
        with --trace its record block."""
        with device_and_meter(rank), \
                (OpCheckMode(session.checker, rank) if session.checker is not None else contextlib.nullcontext()):
            if tracing is None:
                yield
                return
            tracing.open(rank)
            try:
                yield
            except SystemExit as e:
                if e.code not in (None, 0):
                    tracing.abandon(rank, e)
                else:
                    tracing.close(rank)
                raise
            except BaseException as e:
                tracing.abandon(rank, e)
                raise
            tracing.close(rank)
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout = _RankOutput(real_out, scheduler.current_rank, config.rank_prefix, config.shown_ranks)
    sys.stderr = _RankOutput(real_err, scheduler.current_rank, config.rank_prefix, config.shown_ranks)
    _RANK_STREAMS[:] = [sys.stdout, sys.stderr]
    scheduler.process_state = rank_state.ProcessState(world_size, config.shared_modules, config.per_rank_modules)

    threads = []
    for rank in range(world_size):
        t = threading.Thread(target=_run_rank, name=f"dtsim-rank{rank}", daemon=True,
                             args=(scheduler, rank, program, rank_modes))
        scheduler.ranks[rank].thread = t
        threads.append(t)
    for t in threads:
        t.start()
    watchdog = _arm_watchdog(timeout, args.timeout, threads)
    if watchdog is not None:
        scheduler.holder_cell = watchdog.holder_cell()
    # SIGTERM (a scheduler's or `timeout`'s) ends the run as Ctrl-C does: the report is written, with where every rank
    # was. The ranks' own handlers are theirs alone (rank_state.py) and are not called.
    signal.signal(signal.SIGTERM, _terminated)
    scheduler.start()

    def check_timeout() -> None:
        holder = scheduler.holder
        if watchdog is not None:
            watchdog.kick(-1 if holder is None else holder)
        if holder is not None and time.monotonic() - scheduler.turn_started > timeout:
            stack = scheduler.running_report(holder)
            report = (f"rank {holder} has run for more than {args.timeout} s (--timeout) without reaching a "
                      f"collective or the end of its program; the other ranks wait for it\n"
                      + "\n".join(f"      at {frame}" for frame in stack))
            scheduler.abort(report, EXIT_HANG)

    try:
        scheduler.wait_until_over(min(0.25, timeout / 4), check_timeout)
    except (KeyboardInterrupt, _Terminated) as e:
        if watchdog is not None:
            watchdog.disarm()
        _write_report(world.report, args, real_err, complete=False)
        report = scheduler.hang_report().split("\n", 1)[-1]
        how, code = ("terminated (SIGTERM)", EXIT_TERMINATED) if isinstance(e, _Terminated) else \
            ("interrupted (Ctrl-C)", EXIT_INTERRUPTED)
        _finish(real_out, real_err, f"{how}; where every rank was:\n{report}", code)
    if watchdog is not None:
        watchdog.disarm()
    elapsed = time.monotonic() - started
    written = _write_report(world.report, args, real_err, complete=scheduler.abort_reason is None)
    if scheduler.abort_reason is not None:
        failure = scheduler.first_failure
        if failure is not None:
            text = (f"rank {failure.rank} (local rank {failure.rank % nproc}) failed with exit code "
                    f"{failure.exit_code}")
            if failure.error:
                text += ":\n" + failure.error.rstrip("\n").split("\n")[-1]
                if "ModuleNotFoundError" in failure.error.rstrip("\n").split("\n")[-1]:
                    text += (f"\n(the ranks run with {sys.executable}"
                             + (f", not with the active venv {other_venv}" if other_venv else "")
                             + "; set DTSIM_PYTHON, or run `python -m dtsim run` from the environment that has the "
                             "module: docs/run.md, \"Which Python runs the program\")")
            _finish(real_out, real_err, text, EXIT_RANK_FAILED)
        _finish(real_out, real_err, scheduler.abort_reason, scheduler.abort_code)
    for t in threads:
        t.join()
    scheduler.process_state.restore_base()
    _end_rank_lines()
    sys.stdout, sys.stderr = real_out, real_err
    unreceived = world.unreceived()
    if unreceived:
        _finish(real_out, real_err, "messages sent and never received by the end of the run (a real job ends with "
                "their sends pending, or hangs in them):\n" + "\n".join(f"  {line}" for line in unreceived),
                EXIT_HANG)
    if tracing is not None:
        written = _add_run_collectives(args.trace, world.collective_log, real_err) and written
    real_out.flush()
    diverged = False
    if session.checker is not None:
        text, diverged = session.checker.summary()
        real_err.write(text + "\n")
    reads = value_reads.summary() if args.meta else None
    if reads is not None:
        real_err.write(reads + "\n")
    print(f"dtsim run: {world_size} simulated ranks finished in {elapsed:.2f} s; {world.collective_count} "
          "collectives, every rank's call checked against its peers (kind, group, reduce op, shapes, dtypes)"
          + (f"; recording written to {args.trace}" if args.trace is not None else ""), file=real_err)
    # The program's exit handlers run, as at a normal exit; the interpreter's teardown of torch (a second or more)
    # is skipped: nothing is left to flush or remove once the handlers ran.
    atexit._run_exitfuncs()
    if diverged:
        _finish(real_out, real_err, "--check-ops: a DTensor op diverged from the unsharded op (above)",
                EXIT_OP_DIVERGED)
    if not written:
        _finish(real_out, real_err, "an output of the run could not be written (above)", EXIT_BAD_INPUT)
    _finish(real_out, real_err, None, EXIT_OK)


def _add_run_collectives(path: str, log, real_err) -> bool:
    """Adds every collective of the run ("collectives": c10d, functional, FSDP2, DDP, direct; with each rank's input
    and output hash) to the recording rank 0 wrote."""
    import json

    from .._files import write_output

    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read())
        doc["collectives"] = log
        write_output(path, [(json.dumps(doc, separators=(",", ":")) + "\n").encode()], "trace")
    except (OSError, ValueError) as e:
        real_err.write(f"dtsim run: error: trace: cannot add the run's collectives to '{path}': {e}\n")
        return False
    return True


def _write_report(report, args, real_err, complete: bool) -> bool:
    """Prints --report and writes --report-json; False when the JSON could not be written (said on stderr)."""
    if report is None:
        return True
    sys.stdout.flush()
    if args.report:
        real_err.write(report.text() + ("\n" if complete else "\n(the run ended early: collectives up to then)\n"))
    if args.report_json is not None:
        report.complete = complete
        try:
            report.write_json(args.report_json)
        except ValueError as e:
            real_err.write(f"dtsim run: error: {e}\n")
            return False
    return True


class _Terminated(BaseException):
    """SIGTERM reached the launcher's thread."""


def _terminated(signum, frame) -> None:
    raise _Terminated()


def _arm_watchdog(timeout: float, timeout_text: str, threads):
    """The watchdog (dtsim._watchdog_c) that ends the run when the launcher's thread cannot run for longer than
    --timeout: a rank holds the GIL in one C call. None where the extension is not built (the check of a rank that
    runs Python code past --timeout, check_timeout, works without it)."""
    try:
        from .. import _watchdog_c
    except ImportError:
        return None
    _watchdog_c.arm(timeout + 1.0, EXIT_HANG,
                    f"has run for more than {timeout_text} s (--timeout) inside one call that never lets the "
                    "interpreter go (a C function holding the GIL), so neither the other ranks nor dtsim could run; "
                    "the run ends here, without its report or recording (docs/run.md, \"--timeout\")")
    for rank, t in enumerate(threads):
        if t.ident is not None:
            _watchdog_c.name_thread(t.ident, rank)
    return _watchdog_c


_RANK_STREAMS: List[_RankOutput] = []  # the ranks' sys.stdout and sys.stderr, while the ranks run


def _end_rank_lines() -> None:
    for stream in _RANK_STREAMS:
        stream.end_lines()


def _finish(real_out, real_err, text: Optional[str], code: int) -> None:
    """Ends the process now: ranks still waiting are threads of this process, and end with it."""
    try:
        _end_rank_lines()
        sys.stdout.flush()
        real_out.flush()
        if text is not None:
            real_err.write(f"dtsim run: error: {text}\n")
        real_err.flush()
    finally:
        os._exit(code)
