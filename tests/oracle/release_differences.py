"""Known differences from a torch release other than the project's, case by case (scripts/compat.sh, issue 35).

dtsim's C++ planner and op layer follow the DTensor semantics of the project's torch (PROJECT_TORCH). A later release
changes some of them (torch 2.14: Shard -> Partial(sum) becomes a user redistribution; cat, reductions and some views
keep more sharding). Run against that release, the oracle tests meet those changes as mismatches. Each is listed,
with its kind, in differences/torch-<minor>.json (or that file names the release whose list is the same:
{"same_as": "2.14"}); docs/python.md ("Supported torch releases") sums them up. Against a listed release a suite
then fails on:
- any mismatch that is not listed (a new difference, or a listed case now differing in another way), and
- any listed mismatch that did not occur in a full run (fixed, or the list is stale): the list stays exact.
Against the project's torch no list applies, and every mismatch fails as before.

DTSIM_RECORD_DIFFERENCES=1 writes the list of the running release for the suites that run (their mismatches then
pass): how a list is made, after reading each mismatch it records.
"""

from __future__ import annotations

import json
import os
from typing import Any, Callable, List, Sequence

import torch

PROJECT_TORCH = "2.13"
_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "differences")


def torch_minor() -> str:
    return ".".join(torch.__version__.split("+")[0].split(".")[:2])


def _path() -> str:
    return os.path.join(_DIR, f"torch-{torch_minor()}.json")


def _listed() -> dict:
    """The running release's list; {"same_as": "<minor>"} stands for another release's, when the two are equal."""
    if not os.path.exists(_path()):
        return {}
    doc = json.load(open(_path()))
    if "same_as" in doc:
        doc = json.load(open(os.path.join(_DIR, f"torch-{doc['same_as']}.json")))
    return doc


def _key(case: Any) -> str:
    return json.dumps({k: v for k, v in case.items() if k != "values"}, sort_keys=True)


def unexplained(suite: str, failures: Sequence[Any], case_of: Callable[[Any], Any], kind_of: Callable[[Any], str],
                full_run: bool) -> List[Any]:
    """The failures of `suite` that the running release's list does not explain. Raises AssertionError where a full
    run (`full_run`: the suite's default cases) missed a listed one."""
    if torch_minor() == PROJECT_TORCH:
        return list(failures)
    met = {(_key(case_of(f)), kind_of(f)) for f in failures}
    if os.environ.get("DTSIM_RECORD_DIFFERENCES") == "1":
        doc = json.load(open(_path())) if os.path.exists(_path()) else {}
        doc["torch"] = torch.__version__
        doc[suite] = [{"kind": kind, "case": json.loads(key)} for key, kind in sorted(met)]
        os.makedirs(_DIR, exist_ok=True)
        with open(_path() + ".tmp", "w") as f:
            json.dump(doc, f, indent=1, sort_keys=True)
            f.write("\n")
        os.replace(_path() + ".tmp", _path())
        return []
    listed = {(_key(e["case"]), e["kind"]) for e in _listed().get(suite, [])}
    if full_run:
        stale = listed - met
        assert not stale, (f"{len(stale)} differences listed for torch {torch_minor()} in {_path()} no longer occur "
                           f"(fixed? remove them), first: {sorted(stale)[0]}")
    return [f for f in failures if (_key(case_of(f)), kind_of(f)) not in listed]


def summary(suite: str) -> str:
    """'N listed differences (kind: n, ...)' of `suite` for the running release, for the tests' printout."""
    entries = _listed().get(suite, []) if torch_minor() != PROJECT_TORCH else []
    if not entries:
        return "no listed differences"
    kinds: dict = {}
    for e in entries:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    return f"{len(entries)} listed differences of torch {torch_minor()} ({kinds})"
