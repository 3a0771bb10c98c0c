"""The per-release lists of known differences (release_differences.py) explain exactly what they list: an unlisted
mismatch still fails, a listed one that no longer occurs fails a full run, and the project's torch has no list."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import release_differences  # noqa: E402

CASE = {"mesh": [2], "shape": [4], "from": "S(0)", "to": "P(sum)", "values": [1, 2]}
OTHER = {"mesh": [2], "shape": [6], "from": "S(0)", "to": "P(sum)"}


@pytest.fixture
def release(tmp_path, monkeypatch):
    monkeypatch.setattr(release_differences, "_DIR", str(tmp_path))
    monkeypatch.setattr(release_differences, "torch_minor", lambda: "2.14")
    (tmp_path / "torch-2.14.json").write_text(json.dumps(
        {"suite": [{"kind": "refusal differs", "case": {k: v for k, v in CASE.items() if k != "values"}}]}))
    (tmp_path / "torch-2.15.json").write_text(json.dumps({"same_as": "2.14"}))
    return tmp_path


def explain(failures, full_run=True):
    return release_differences.unexplained("suite", failures, lambda f: f[1], lambda f: f[0], full_run)


def test_a_listed_mismatch_is_explained_and_others_are_not(release):
    listed = ("refusal differs", dict(CASE, values=[7]))  # the case's values are not part of its identity
    assert explain([listed]) == []
    unlisted = [("refusal differs", OTHER), ("plan differs", CASE)]  # another case; the listed case, another kind
    assert explain([listed] + unlisted) == unlisted


def test_a_listed_mismatch_that_no_longer_occurs_fails_a_full_run(release):
    with pytest.raises(AssertionError, match="no longer occur"):
        explain([])
    assert explain([], full_run=False) == []  # a partial run need not meet every listed case


def test_same_as_reads_the_other_release(release, monkeypatch):
    monkeypatch.setattr(release_differences, "torch_minor", lambda: "2.15")
    assert explain([("refusal differs", CASE)]) == []
    assert "1 listed differences of torch 2.15" in release_differences.summary("suite")


def test_the_project_torch_has_no_list(release, monkeypatch):
    monkeypatch.setattr(release_differences, "torch_minor", lambda: release_differences.PROJECT_TORCH)
    failures = [("refusal differs", CASE)]
    assert explain(failures) == failures
