"""dtsim.record: turns a run of an upstream PyTorch DTensor program into a dtsim recording that `dtsim replay` re-runs
in simulation, step by step and rank by rank.

    with dtsim.record("run.json"):
        ...  # torch.distributed.tensor code: Gloo or NCCL ranks under torchrun / mpirun, or LocalTensorMode

What is recorded, for every redistribution upstream runs (explicit `redistribute` / `full_tensor`, implicit ones from
op dispatch with the op and argument, and those of autograd's backward): the mesh, source and target placements,
global shape and dtype; the collectives upstream issued (kind, groups, each rank's input and output shape and bytes);
the measured time on every rank; every rank's local shape and shard hash before and after; and, up to
`max_data_bytes` in all, every rank's source shard values in a sidecar file `<path>.data`, so replay recomputes the
result. Past the cap replay checks layouts, collectives and bytes only, and says so. On real ranks every rank records
its own rows and rank 0 writes the merged file when the `with` block ends (every rank must leave it; it is a
collective). The format is docs/python.md's "dtsim-recording".

Hook points (upstream 2.13): `redistribute_local_tensor` (where every redistribution runs; its `is_explicit` flag
tells DTensor.redistribute apart), `OpDispatcher.redistribute_local_args` (the op of an implicit one),
`DTensor.full_tensor`, and the dispatcher ops of c10d's functional collectives (`torch.ops._c10d_functional.*`,
`torch.ops._dtensor.shard_dim_alltoall`), where every DTensor collective passes. Another torch version is refused
with a clear error rather than recorded wrongly.
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import sys
import threading
import time
from typing import Any, Dict, Iterator, List, Optional

import torch

from . import _C

SUPPORTED_TORCH = ("2.13",)
FORMAT = "dtsim-recording"
VERSION = 1

_COLLECTIVE_OPS = {
    # namespace, op name -> dtsim's collective kind
    ("_c10d_functional", "all_gather_into_tensor"): "all_gather",
    ("_c10d_functional", "reduce_scatter_tensor"): "reduce_scatter",
    ("_c10d_functional", "all_reduce"): "all_reduce",
    ("_c10d_functional", "all_to_all_single"): "all_to_all",
    ("_c10d_functional", "broadcast"): "broadcast",
    ("_c10d_functional_autograd", "all_gather_into_tensor"): "all_gather",
    ("_c10d_functional_autograd", "reduce_scatter_tensor"): "reduce_scatter",
    ("_c10d_functional_autograd", "all_to_all_single"): "all_to_all",
    ("_dtensor", "shard_dim_alltoall"): "all_to_all",
}
# The argument holding the group name, per op (position in the op's schema).
_GROUP_ARG = {"all_gather_into_tensor": 2, "reduce_scatter_tensor": 3, "all_reduce": 2, "all_to_all_single": 3,
              "broadcast": 2, "shard_dim_alltoall": 3}


def _check_torch_version() -> None:
    version = ".".join(torch.__version__.split("+")[0].split(".")[:2])
    if version not in SUPPORTED_TORCH:
        raise RuntimeError(f"dtsim.record: torch {torch.__version__} is not supported (supported: "
                           f"{', '.join(SUPPORTED_TORCH)}); its DTensor internals may differ, so no trace is written")


def _shards(t: torch.Tensor) -> Dict[int, torch.Tensor]:
    """{rank: local tensor}: every rank's under LocalTensorMode, this process's rank on a real process group."""
    if type(t).__name__ == "AsyncCollectiveTensor":
        t = t.wait()
    local = getattr(t, "_local_tensors", None)
    if local is not None:
        return {int(r): v for r, v in local.items()}
    import torch.distributed as dist
    return {dist.get_rank() if dist.is_initialized() else 0: t}


def _outside_local_tensor_mode() -> Any:
    """Upstream's LocalTensorMode would turn the recorder's own tensor work (hashing, copying shards) into
    per-rank ops: run it with the mode disabled."""
    from torch.distributed._local_tensor import local_tensor_mode
    mode = local_tensor_mode()
    return mode.disable() if mode is not None else contextlib.nullcontext()


_MESH_JSON: Dict[int, Any] = {}  # id(mesh) -> (mesh, its JSON): meshes live as long as their DTensors


def _mesh_json(mesh: Any) -> Dict[str, Any]:
    hit = _MESH_JSON.get(id(mesh))
    if hit is not None and hit[0] is mesh:
        return hit[1]
    names = list(mesh.mesh_dim_names) if mesh.mesh_dim_names else []
    value = {"shape": list(mesh.mesh.shape), "names": names, "ranks": mesh.mesh.flatten().tolist()}
    _MESH_JSON[id(mesh)] = (mesh, value)
    return value


def _spec_json(spec: Any) -> Dict[str, Any]:
    """The SPEC of docs/trace-format.md; on a submesh (mesh["tp"]), "mesh" is the root mesh and "submesh" names the
    root dims the placements apply to, which every rank writes alike (each rank's own submesh differs)."""
    mesh = spec.mesh
    root = mesh._get_root_mesh() if hasattr(mesh, "_get_root_mesh") else mesh
    out = {"mesh": _mesh_json(root),
           "placements": "[" + ", ".join(_placement_text(p) for p in spec.placements) + "]",
           "shape": list(spec.tensor_meta.shape), "dtype": str(spec.tensor_meta.dtype).replace("torch.", "")}
    if root is not mesh and mesh.mesh_dim_names is not None:
        out["submesh"] = list(mesh.mesh_dim_names)
    return out


def _placement_text(p: Any) -> str:
    """An upstream placement in dtsim's text ("S(0)", "_S(0,2)", "R", "P(sum)"): the package's own converter."""
    from . import _one_placement_text  # the package imports this module at its end
    return _one_placement_text(p, "placements")


def _reduces_partial(src: Any, dst: Any) -> bool:
    """Whether the redistribution reduces a Partial sum or avg of floating-point values (a mesh dim Partial in
    `src`, not in `dst`): only then may the run's result differ from dtsim's in the last bits (summation order), and
    replay needs the result's values (data_after) to tell that from a wrong result. Every other result is exact."""
    if not src.tensor_meta.dtype.is_floating_point and not src.tensor_meta.dtype.is_complex:
        return False
    for p, q in zip(src.placements, dst.placements):
        if p.is_partial() and not q.is_partial() and getattr(p, "reduce_op", "sum") in ("sum", "avg"):
            return True
    return False


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor of its own (a snapshot: the program may change `t` later)."""
    c = t.detach().cpu()
    if c.numel() == 0:
        return torch.empty(0, dtype=torch.uint8)
    return c.contiguous().reshape(-1).view(torch.uint8).clone()


def _rank_states(t: torch.Tensor) -> List[Dict[str, Any]]:
    with _outside_local_tensor_mode():
        return [{"rank": r, "local_shape": list(v.shape), "hash": _C.shard_hash(v.detach().cpu())}
                for r, v in sorted(_shards(t).items())]


class _OpProxy:
    """Stands in for an op packet (torch.ops.<ns>.<op>) while recording: calls are recorded, everything else
    (`.default`, the overloads upstream compares by identity) is the packet's own."""

    def __init__(self, packet: Any, on_call: Any):
        self._packet = packet
        self._on_call = on_call

    def __call__(self, *args, **kwargs):
        out = self._packet(*args, **kwargs)
        self._on_call(args, kwargs, out)
        return out

    def __getattr__(self, name: str) -> Any:
        return getattr(self._packet, name)


class _Recorder:
    def __init__(self, path: str, max_data_bytes: int):
        self.path = path
        self.max_data_bytes = max_data_bytes
        self.records: List[Dict[str, Any]] = []
        self.data: List[torch.Tensor] = []  # this process's shard bytes (flat uint8), in record order
        self.data_bytes = 0
        self.data_complete = True
        self.local = threading.local()
        self.patches: List[tuple] = []
        self.t0 = time.perf_counter()  # start_us counts from here (each rank's own clock)

    # ---- hooks ----
    def _patch(self, owner: Any, name: str, value: Any) -> None:
        self.patches.append((owner, name, owner.__dict__.get(name, getattr(owner, name))))
        setattr(owner, name, value)

    def install(self) -> None:
        import torch.distributed.tensor._api as api
        import torch.distributed.tensor._dispatch as dispatch
        import torch.distributed.tensor._redistribute as redistribute
        original = redistribute.redistribute_local_tensor
        wrapped = self._wrap_redistribute(original)
        for module in (redistribute, dispatch, api):
            if getattr(module, "redistribute_local_tensor", None) is original:
                self._patch(module, "redistribute_local_tensor", wrapped)
        args_original = dispatch.OpDispatcher.redistribute_local_args
        recorder = self

        def redistribute_local_args(op_info, suggested_input_schema, *args, **kwargs):
            recorder.local.op_info = (op_info, suggested_input_schema)
            try:
                return args_original(op_info, suggested_input_schema, *args, **kwargs)
            finally:
                recorder.local.op_info = None

        self._patch(dispatch.OpDispatcher, "redistribute_local_args", staticmethod(redistribute_local_args))
        full_original = api.DTensor.full_tensor

        def full_tensor(dt, *args, **kwargs):
            recorder.local.call = "full_tensor"
            try:
                return full_original(dt, *args, **kwargs)
            finally:
                recorder.local.call = None

        self._patch(api.DTensor, "full_tensor", full_tensor)
        for (namespace, name), kind in _COLLECTIVE_OPS.items():
            ns = getattr(torch.ops, namespace)
            try:
                op = getattr(ns, name)
            except (AttributeError, RuntimeError):
                continue  # not in this build (the version check guards the ones that matter)
            self._patch(ns, name, self._wrap_collective(op, kind, name))

    def uninstall(self) -> None:
        for owner, name, value in reversed(self.patches):
            setattr(owner, name, value)
        self.patches.clear()

    def _wrap_collective(self, op: Any, kind: str, name: str) -> Any:
        recorder = self

        def on_call(args, kwargs, out):
            current = getattr(recorder.local, "collectives", None)
            if current is not None:
                group = args[_GROUP_ARG[name]] if len(args) > _GROUP_ARG[name] else kwargs.get("group_name")
                current.append({"op": kind, "input": args[0], "output": out, "group_name": group})

        return _OpProxy(op, on_call)

    def _wrap_redistribute(self, original: Any) -> Any:
        recorder = self

        def redistribute_local_tensor(local_tensor, current_spec, target_spec, *args, **kwargs):
            if getattr(recorder.local, "collectives", None) is not None:  # nested: the outer one records
                return original(local_tensor, current_spec, target_spec, *args, **kwargs)
            explicit = bool(kwargs.get("is_explicit", False))
            op_info = getattr(recorder.local, "op_info", None)
            record: Dict[str, Any] = {"src": _spec_json(current_spec), "dst": _spec_json(target_spec),
                                      "op": None, "arg": None}
            if explicit:
                record["call"] = getattr(recorder.local, "call", None) or "redistribute"
            elif op_info is not None:
                info, schema = op_info
                record["call"] = "implicit"
                op = info.schema.op if info.schema is not None else schema.op
                record["op"] = str(op.name()) if hasattr(op, "name") else str(op)
                record["arg"] = next((i for i, a in enumerate(info.flat_args_schema) if a is current_spec), None)
            else:
                record["call"] = "backward"
            record["ranks_before"] = _rank_states(local_tensor)
            recorder._keep_data(record, "data", local_tensor)
            recorder.local.collectives = []
            start = time.perf_counter()
            try:
                out = original(local_tensor, current_spec, target_spec, *args, **kwargs)
                states = _rank_states(out)  # waits for an async result
            finally:
                seen, recorder.local.collectives = recorder.local.collectives, None
            elapsed_us = (time.perf_counter() - start) * 1e6
            record["ranks_after"] = states
            if _reduces_partial(current_spec, target_spec):
                recorder._keep_data(record, "data_after", out)
            else:
                record["data_after"] = None  # the result is exact: replay compares hashes, needs no values
            record["collectives"] = [recorder._collective_rows(c, current_spec.mesh) for c in seen]
            record["time_us"] = {str(r["rank"]): elapsed_us for r in states}
            record["start_us"] = {str(r["rank"]): (start - recorder.t0) * 1e6 for r in states}
            recorder.records.append(record)
            return out

        return redistribute_local_tensor

    def _keep_data(self, record: Dict[str, Any], key: str, local_tensor: torch.Tensor) -> None:
        """Keeps every shard's bytes under record[key] (source shards: "data"; results: "data_after", which let
        replay tell floating-point summation order from a wrong result) while the cap allows."""
        shards = _shards(local_tensor)
        size = sum(v.numel() * v.element_size() for v in shards.values())
        if not self.data_complete or self.data_bytes + size > self.max_data_bytes or \
                (key == "data_after" and record.get("data") is None):
            self.data_complete = False
            record[key] = None
            return
        record[key] = {}
        for r, v in sorted(shards.items()):
            with _outside_local_tensor_mode():
                blob = _bytes_of(v)
            record[key][str(r)] = len(self.data)
            self.data.append(blob)
        self.data_bytes += size

    def _collective_rows(self, c: Dict[str, Any], mesh: Any) -> Dict[str, Any]:
        """One collective as this process saw it: {rank: (group, input shape, output shape, bytes in, bytes out)}."""
        ins, outs = _shards(c["input"]), _shards(c["output"])
        group = None
        try:
            from torch.distributed import distributed_c10d as c10d
            pg = c10d._resolve_process_group(c["group_name"])
            group = [int(r) for r in c10d.get_process_group_ranks(pg)]
        except Exception:  # noqa: BLE001  LocalTensorMode's fake groups: the group is the mesh's (below)
            group = None
        rows = {}
        for r, v in sorted(ins.items()):
            o = outs.get(r)
            rows[str(r)] = {"group": group, "input_shape": list(v.shape),
                            "output_shape": list(o.shape) if o is not None else None,
                            "input_bytes": v.numel() * v.element_size(),
                            "output_bytes": o.numel() * o.element_size() if o is not None else 0}
        return {"op": c["op"], "ranks": rows}

    # ---- writing ----
    def finish(self, argv: str) -> None:
        import torch.distributed as dist
        from torch.distributed._local_tensor import local_tensor_mode
        real = dist.is_initialized() and dist.get_backend() != "fake" and local_tensor_mode() is None
        if real:
            world = dist.get_world_size()
            # The rows as objects (small); the shard bytes as one uint8 tensor per rank, gathered as tensors
            # (no pickling of megabytes), padded to the largest rank's.
            sizes = [int(b.numel()) for b in self.data]
            mine = {"records": self.records, "sizes": sizes, "complete": self.data_complete}
            gathered: Optional[List[Any]] = [None] * world if dist.get_rank() == 0 else None
            dist.gather_object(mine, gathered, dst=0)
            totals = torch.tensor([sum(sizes)], dtype=torch.int64)
            all_totals = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
            dist.all_gather(all_totals, totals)
            longest = max(int(t.item()) for t in all_totals)
            if longest > 0:
                flat = torch.zeros(longest, dtype=torch.uint8)
                if self.data:
                    torch.cat(self.data, out=flat[:sum(sizes)])
                bufs = [torch.empty(longest, dtype=torch.uint8) for _ in range(world)] \
                    if dist.get_rank() == 0 else None
                dist.gather(flat, bufs, dst=0)
                if gathered is not None and bufs is not None:
                    for part, buf in zip(gathered, bufs):
                        cuts, at = [], 0
                        for n in part["sizes"]:
                            cuts.append(buf[at:at + n])
                            at += n
                        part["data"] = cuts
            elif gathered is not None:
                for part in gathered:
                    part["data"] = [torch.empty(0, dtype=torch.uint8) for _ in part["sizes"]]
            # Rank 0 writes; then every rank hears how it went, so all leave the block together (ranks
            # that raced ahead into destroy_process_group while rank 0 still wrote made Gloo abort) and
            # all raise if the write failed.
            status: List[Any] = [None]
            if dist.get_rank() == 0:
                try:
                    self._write(gathered, f"torch-{dist.get_backend()}", world, argv)
                except Exception as e:  # noqa: BLE001  re-raised on every rank below
                    status[0] = f"{type(e).__name__}: {e}"
            dist.broadcast_object_list(status, src=0)
            if status[0] is not None:
                raise RuntimeError(f"dtsim.record: rank 0 could not write the recording: {status[0]}")
            return
        world = dist.get_world_size() if dist.is_initialized() else 1
        parts = [{"records": self.records, "data": self.data, "complete": self.data_complete}]
        self._write(parts, "torch-local", world, argv)

    def _write(self, parts: List[Dict[str, Any]], backend: str, world: int, argv: str) -> None:
        counts = {len(p["records"]) for p in parts}
        if len(counts) != 1:
            raise RuntimeError(f"dtsim.record: the ranks recorded different numbers of redistributions "
                               f"({sorted(counts)}): the program is not SPMD inside the record block")
        complete = all(p["complete"] for p in parts)
        data_path = self.path + ".data"
        blobs: List[torch.Tensor] = []
        written: Dict[Any, int] = {}  # (hash, nbytes) -> offset of the bytes already in the data file
        offset = 0
        out_records = []
        for i in range(counts.pop()):
            rows = [p["records"][i] for p in parts]
            first = rows[0]
            for other in rows[1:]:
                if (other["src"], other["dst"], other["call"], other["op"]) != \
                        (first["src"], first["dst"], first["call"], first["op"]):
                    raise RuntimeError(f"dtsim.record: redistribution {i} differs between ranks "
                                       f"({first['src']['placements']} -> {first['dst']['placements']} vs "
                                       f"{other['src']['placements']} -> {other['dst']['placements']})")
            rec = {"index": i, "call": first["call"], "op": first["op"], "arg": first["arg"],
                   "src": first["src"], "dst": first["dst"],
                   "ranks_before": sorted((s for r in rows for s in r["ranks_before"]), key=lambda s: s["rank"]),
                   "ranks_after": sorted((s for r in rows for s in r["ranks_after"]), key=lambda s: s["rank"]),
                   "time_us": {k: v for r in rows for k, v in r["time_us"].items()},
                   "start_us": {k: v for r in rows for k, v in r["start_us"].items()},
                   "collectives": _merge_collectives(rows, first["src"]), "data": None, "data_after": None}
            for key, states in (("data", "ranks_before"), ("data_after", "ranks_after")):
                if all(r.get(key) is not None for r in rows):
                    hashes = {s["rank"]: s["hash"] for s in rec[states]}
                    entries = []
                    for p, r in zip(parts, rows):
                        for rank, k in sorted(r[key].items(), key=lambda kv: int(kv[0])):
                            blob = p["data"][k]
                            nbytes = int(blob.numel())
                            # Shards with the same hash and size (replicas, a result that is the next
                            # source) are written once; replay checks every shard against its hash.
                            where = written.get((hashes[int(rank)], nbytes))
                            if where is None:
                                where = written[(hashes[int(rank)], nbytes)] = offset
                                blobs.append(blob)
                                offset += nbytes
                            entries.append({"rank": int(rank), "offset": where, "nbytes": nbytes})
                    entries.sort(key=lambda e: e["rank"])
                    rec[key] = entries
            out_records.append(rec)
        doc = {"format": FORMAT, "version": VERSION,
               "meta": {"tool": "dtsim.record", "backend": backend, "world_size": world, "argv": argv,
                        "torch_version": torch.__version__, "data": True,
                        "data_file": os.path.basename(data_path) if blobs else None,
                        "data_complete": complete, "max_data_bytes": self.max_data_bytes},
               "redistributions": out_records}
        _write_atomically(data_path, [b.numpy() for b in blobs]) if blobs else None
        _write_atomically(self.path, [(json.dumps(doc, separators=(",", ":")) + "\n").encode()])


def _merge_collectives(rows: List[Dict[str, Any]], src: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Every rank's view of the i-th collective of a redistribution, merged: kind, groups, per-rank shapes and
    buffer bytes (ranks ascending)."""
    counts = {len(r["collectives"]) for r in rows}
    if len(counts) != 1:
        raise RuntimeError(f"dtsim.record: ranks issued different numbers of collectives ({sorted(counts)})")
    out = []
    for k in range(counts.pop()):
        per_rank: Dict[int, Dict[str, Any]] = {}
        kinds = set()
        for r in rows:
            c = r["collectives"][k]
            kinds.add(c["op"])
            for rank, row in c["ranks"].items():
                per_rank[int(rank)] = row
        if len(kinds) != 1:
            raise RuntimeError(f"dtsim.record: collective {k} differs between ranks ({sorted(kinds)})")
        ranks = sorted(per_rank)
        groups = sorted({tuple(v["group"]) for v in per_rank.values() if v["group"] is not None})
        out.append({"op": kinds.pop(), "groups": [list(g) for g in groups], "ranks": ranks,
                    "input_shapes": [per_rank[r]["input_shape"] for r in ranks],
                    "output_shapes": [per_rank[r]["output_shape"] for r in ranks],
                    "input_bytes": [per_rank[r]["input_bytes"] for r in ranks],
                    "output_bytes": [per_rank[r]["output_bytes"] for r in ranks]})
    return out


def _write_atomically(path: str, chunks: List[Any]) -> None:
    """A temporary file beside `path`, renamed into place; an existing special file (a device, a FIFO) is refused,
    never replaced."""
    try:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"path: '{path}' exists and is not a regular file; not replaced")
    except FileNotFoundError:
        pass
    folder = os.path.dirname(os.path.abspath(path))
    tmp = os.path.join(folder, f".{os.path.basename(path)}.tmp{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:  # bytes or arrays, written as they are (no joined copy)
                f.write(chunk)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def record(path: "str | os.PathLike[str]", *, max_data_bytes: int = 256 << 20) -> Iterator[None]:
    """Records every DTensor redistribution run inside the block into `path` (rank 0 writes it; source shard values
    go to `<path>.data` up to `max_data_bytes` in all). See the module docstring."""
    _check_torch_version()
    path = os.fspath(path)
    if not path:
        raise ValueError("path: empty")
    if isinstance(max_data_bytes, bool) or not isinstance(max_data_bytes, int) or max_data_bytes < 0:
        raise ValueError(f"max_data_bytes: expected an int >= 0, got {max_data_bytes!r}")
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"path: folder '{folder}' does not exist")
    for p in (path, path + ".data"):
        if os.path.exists(p) and not os.path.isfile(p):
            raise ValueError(f"path: '{p}' exists and is not a regular file; not replaced")
    recorder = _Recorder(path, max_data_bytes)
    try:
        recorder.install()  # inside the try: a failure halfway restores what was patched
        yield
    finally:
        recorder.uninstall()
        _MESH_JSON.clear()
    recorder.finish(" ".join(sys.argv))
