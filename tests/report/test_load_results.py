"""Reading stored results for the report: stability.json typed, in the experiment's variant
order."""

from __future__ import annotations

from pathlib import Path

from ablate.core import store
from ablate.core.folders import ExperimentFolder, write_json_atomic
from ablate.core.studies import BoundaryResult, SearchResult, StoredStudies


def _boundary(variant: str) -> dict:
    return BoundaryResult(
        variant, f"e.{variant}.max_lr", [0], 4, [], None, [], None, [], []
    ).stored()


def _search(variant: str) -> dict:
    return SearchResult(f"e.{variant}.search", [], 0, 0, 0, 0, None, None).stored()


def test_studies_come_typed_in_the_experiments_variant_order_not_the_files(tmp_path: Path) -> None:
    # stability.json is written with sorted keys: "ln.post" sorts before the baseline
    old = {"variant": "old", "probes": []}  # stored before per-seed brackets: left out
    stored = {
        "experiment": "grid",
        "max_lr": {"ln.post": _boundary("ln.post"), "ln.pre": _boundary("ln.pre"), "old": old},
        "search": {"ln.post": _search("ln.post"), "ln.pre": _search("ln.pre")},
    }
    write_json_atomic(tmp_path / "stability.json", stored)
    found = store.read_studies(ExperimentFolder(tmp_path)).in_order(["ln.pre", "ln.post"])
    assert found.experiment == "grid" and found.criterion is None
    assert list(found.max_lr) == ["ln.pre", "ln.post"]  # the baseline first; "old" dropped
    assert list(found.search) == ["ln.pre", "ln.post"]
    assert found.max_lr["ln.pre"].monotone is None  # not held against the store
    assert (
        store.read_studies(ExperimentFolder(tmp_path / "none")) == StoredStudies()
    )  # no studies ran
