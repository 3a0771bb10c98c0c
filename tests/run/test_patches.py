"""The registry of what `dtsim run` replaces in torch and Python (python/dtsim/run/patches.py): every entry is where
it says on this torch, installing replaces what it names, uninstalling leaves every attribute as it was (the same
object), and an entry whose symbol moved fails loudly, naming the entry and the release."""
import importlib

import pytest
import torch

from dtsim.run import check_ops, emulation, patches, rank_state  # noqa: F401 (their tables)
from dtsim.run.config import RunConfig, RunSession


def current(path):
    owner, attr = patches.resolve_owner(path)
    return owner.__dict__.get(attr, patches._MISSING) if hasattr(owner, "__dict__") else getattr(owner, attr)


def test_every_entry_is_present_on_this_torch():
    present = patches.probe_all(config=RunConfig(check_ops=True, meta=True, memory=True, report=True))
    paths = {e.path for e in present}
    for path in ("torch.cuda.get_device_properties", "torch.cuda.mem_get_info", "threading.Thread.start",
                 "os._exit", "torch.distributed.distributed_c10d._world",
                 "torch.distributed.tensor.experimental._func_map._local_map_wrapped"):
        assert path in paths, path


@pytest.mark.parametrize("tables", [["cuda"], ["check_ops"], ["process"]])
def test_install_then_uninstall_leaves_torch_as_it_was(tables):
    session = RunSession(RunConfig(check_ops=True))
    replaced = [e for t in tables for e in patches._TABLES[t] if isinstance(e, patches.Replace)
                and e.applies(session.config, patches.torch_release()) and e.probe(patches.torch_release())]
    before = {e.path: current(e.path) for e in replaced}
    installed = patches.install(session, tables)
    try:
        changed = [e.path for e in replaced if current(e.path) is not before[e.path]]
        assert changed == [e.path for e in replaced]
    finally:
        installed.uninstall()
    after = {e.path: current(e.path) for e in replaced}
    assert all(after[p] is before[p] for p in before), [p for p in before if after[p] is not before[p]]


def test_cuda_answers_what_torchtitan_reads():
    session = RunSession(RunConfig())
    installed = patches.install(session, ["cuda"])
    try:
        props = torch.cuda.get_device_properties(0)
        assert props.total_memory == emulation.EMULATED_TOTAL_MEMORY
        assert (props.major, props.minor) == (9, 0) and props.pci_domain_id == 0
    finally:
        installed.uninstall()


def test_a_moved_symbol_fails_loudly_naming_entry_and_release():
    moved = patches.Replace("torch.cuda.no_such_function_dtsim", lambda s, o: None, releases=("2.13",))
    with pytest.raises(patches.TorchContractError, match=r"torch 2\.13 moved 'torch\.cuda\.no_such_function_dtsim'"):
        moved.probe("2.13")
    gone = patches.Read("torch.distributed.no_such_module_dtsim.thing")
    with pytest.raises(patches.TorchContractError, match="no_such_module_dtsim"):
        gone.probe("2.13")
    optional = patches.Replace("torch.cuda.no_such_function_dtsim", lambda s, o: None, optional=True)
    assert optional.probe("2.13") is False
    assert not moved.applies(RunConfig(), "2.15")  # known for 2.13 only: not installed on another release


def test_a_failure_halfway_undoes_what_was_installed():
    original = torch.cuda.is_available

    def fail(session):
        raise RuntimeError("planted")

    patches.register("test_halfway", [patches.Replace("torch.cuda.is_available", lambda s, o: (lambda: True)),
                                      patches.Custom("torch.cuda", fail)])
    try:
        with pytest.raises(RuntimeError, match="planted"):
            patches.install(RunSession(RunConfig()), ["test_halfway"])
        assert torch.cuda.is_available is original
    finally:
        del patches._TABLES["test_halfway"]


def test_registry_resolution_imports_the_longest_module_prefix():
    owner, attr = patches.resolve_owner("torch.distributed.device_mesh.DeviceMesh.__init__")
    assert owner is importlib.import_module("torch.distributed.device_mesh").DeviceMesh and attr == "__init__"
