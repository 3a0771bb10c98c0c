"""A pytest plugin that runs one share of the collected tests, so that several pytest processes can run one suite on
several cores (scripts/sanitize.sh runs the bad-input table against the ASan build this way).

    DTSIM_TEST_SHARD=K/N pytest -p pytest_shard ...   (with tests/ on PYTHONPATH)

keeps the tests whose position in the collection is K modulo N (0 <= K < N); the N shares together run every test
once. Without DTSIM_TEST_SHARD it changes nothing."""
import os

import pytest


def parse_shard(spec):
    """(K, N) from "K/N"; a clear error for anything else."""
    try:
        k, n = (int(part) for part in spec.split("/"))
    except ValueError:
        raise pytest.UsageError(f"DTSIM_TEST_SHARD: '{spec}' is not K/N (e.g. 0/2)") from None
    if n < 1 or not 0 <= k < n:
        raise pytest.UsageError(f"DTSIM_TEST_SHARD: '{spec}' needs 0 <= K < N")
    return k, n


def pytest_collection_modifyitems(config, items):
    spec = os.environ.get("DTSIM_TEST_SHARD")
    if not spec:
        return
    k, n = parse_shard(spec)
    keep = [item for i, item in enumerate(items) if i % n == k]
    config.hook.pytest_deselected(items=[item for i, item in enumerate(items) if i % n != k])
    items[:] = keep
