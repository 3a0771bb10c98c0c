"""One sharding-propagation cache for all simulated ranks.

Upstream caches DTensor's sharding propagation per thread (`LocalLRUCache`, a `threading.local`), and its C++ fast
path keeps a per-thread cache too. In a real job that is one cache per rank, which is what a process has. Under
`dtsim run` every rank is a thread, so every rank pays the first propagation of every op again: at 1,024 ranks that is
1,024 propagations of each op where one would do.

`SharedPropagation` sits in front of upstream's cache. An op schema (the op, its arguments' specs and values) is equal
on every rank of a mesh, because `DeviceMesh` compares its rank map and layout, not the rank that holds it. A result
that one rank computed serves another rank after its specs are rebound to that rank's own `DeviceMesh` objects: a
mesh object carries its rank's coordinate, and everything downstream (local shapes, redistribution, the outputs'
`DTensor`s) reads the coordinate from there.

Contract: a result is shared only when it cannot depend on the rank that computed it. Propagation reads the rank in one
way: it rewrites shape arguments (`view`, `new_empty`, group norm's sizes, ...) to the rank's local shape. So a result
is shared only when every spec in the schema and in the result is evenly sharded (every sharded tensor dim divides
into equal shards) on meshes that hold the rank, so that every rank's local shapes are equal. Anything else is
propagated per rank, as upstream does.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from torch.distributed.tensor._dtensor_spec import DTensorSpec
from torch.distributed.tensor._op_schema import OpSchema, OutputSharding
from torch.distributed.tensor.placement_types import Shard, _StridedShard


def _specs(value: Any):
    """The DTensorSpecs in an argument, a (nested) list or tuple of them, or a dict's values."""
    if isinstance(value, DTensorSpec):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _specs(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _specs(item)


def _schema_specs(schema: Optional[OpSchema]):
    if schema is not None:
        yield from _specs(schema.args_schema)
        yield from _specs(schema.kwargs_schema)


def _evenly_sharded(spec: DTensorSpec) -> bool:
    """Whether every rank of the spec's mesh holds a local shard of the same shape (and this rank is one of them)."""
    meta = spec.tensor_meta
    if meta is None or spec.mesh.get_coordinate() is None:
        return False
    shards: Dict[int, int] = {}
    for mesh_dim, placement in enumerate(spec.placements):
        if isinstance(placement, Shard):  # _StridedShard too: it splits its dim into split_factor x mesh size pieces
            factor = placement.split_factor if isinstance(placement, _StridedShard) else 1
            dim = placement.dim if placement.dim >= 0 else placement.dim + len(meta.shape)
            shards[dim] = shards.get(dim, 1) * spec.mesh.size(mesh_dim) * factor
    return all(0 <= dim < len(meta.shape) and meta.shape[dim] % count == 0 for dim, count in shards.items())


def _rank_uniform(schema: OpSchema, result: Any) -> bool:
    if not isinstance(result, OutputSharding):
        return False
    specs = list(_schema_specs(schema)) + list(_specs(result.output_spec)) + \
        list(_schema_specs(result.redistribute_schema))
    return bool(specs) and all(_evenly_sharded(spec) for spec in specs)


class _Rebinder:
    """Copies specs (and the schemas and results that hold them) onto the current rank's mesh objects."""

    def __init__(self, own_meshes: Dict[Any, Any]):
        self.own = own_meshes

    def spec(self, spec: DTensorSpec) -> DTensorSpec:
        mesh = self.own.get(spec.mesh)
        if mesh is None:
            raise KeyError(spec.mesh)
        if mesh is spec.mesh:
            return spec
        copy = object.__new__(DTensorSpec)
        copy.__dict__.update(spec.__dict__)
        # The meshes are equal, so the spec's cached hash and its equality stay as they were.
        copy.__dict__["mesh"] = mesh
        return copy

    def value(self, value: Any) -> Any:
        if isinstance(value, DTensorSpec):
            return self.spec(value)
        if isinstance(value, list):
            return [self.value(item) for item in value]
        if isinstance(value, tuple):
            return tuple(self.value(item) for item in value)
        if isinstance(value, dict):
            return {key: self.value(item) for key, item in value.items()}
        return value

    def schema(self, schema: Optional[OpSchema]) -> Optional[OpSchema]:
        if schema is None:
            return None
        return OpSchema(schema.op, self.value(schema.args_schema), self.value(schema.kwargs_schema),
                        schema_info=schema.schema_info)

    def result(self, result: OutputSharding) -> OutputSharding:
        return OutputSharding(output_spec=self.value(result.output_spec),
                              redistribute_schema=self.schema(result.redistribute_schema),
                              needs_redistribute=result.needs_redistribute,
                              use_val_from_redistribute_schema=result.use_val_from_redistribute_schema)


class SharedPropagation:
    """Stands in for `ShardingPropagator.propagate_op_sharding_non_cached`, which upstream calls on a miss of either
    per-thread cache (the C++ fast path's, or the Python `LocalLRUCache`); the original is the fallback."""

    def __init__(self, propagate):
        self.propagate = propagate
        self.shared: Dict[OpSchema, OutputSharding] = {}
        self.hits = 0

    def __call__(self, op_schema: OpSchema):
        entry = self.shared.get(op_schema)
        if entry is not None:
            own = {spec.mesh: spec.mesh for spec in _schema_specs(op_schema)}
            if all(mesh.get_coordinate() is not None for mesh in own):
                try:
                    rebound = _Rebinder(own).result(entry)
                except KeyError:  # a mesh in the result that no argument holds: propagate for this rank
                    rebound = None
                if rebound is not None:
                    self.hits += 1
                    return rebound
        result = self.propagate(op_schema)
        if entry is None and _rank_uniform(op_schema, result):
            self.shared[op_schema] = result
        return result


def install() -> None:
    """Puts the shared cache behind both of DTensor's per-thread caches; called once, before the ranks start."""
    from torch.distributed.tensor import DTensor

    propagator = DTensor._op_dispatcher.sharding_propagator
    if isinstance(propagator.propagate_op_sharding_non_cached, SharedPropagation):
        return
    shared = SharedPropagation(propagator.propagate_op_sharding_non_cached)
    propagator.propagate_op_sharding_non_cached = shared
    # The Python cache holds the original bound method; a fresh one of the same kind holds the shared cache.
    propagator.propagate_op_sharding = type(propagator.propagate_op_sharding)(shared)
