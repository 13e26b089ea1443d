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


def test_a_run_that_diverged_below_the_probes_bracket_widens_it_down() -> None:
    import pandas as pd
    from conftest import max_lr_result

    from ablate.core.boundary import SeedBoundary
    from ablate.report.load import stored_divergence

    probed = [SeedBoundary(0, 0.648, 0.707), SeedBoundary(1, 0.648, 0.707)]
    result = max_lr_result("rms", {0: 0.5, 1: 0.5}, divergence_bounds=probed, run_ids=["p"])
    rows = [  # seed 0: diverged at 0.595, below its probes' bracket; seed 1 as probed
        ("p", 0, 0.545, "finished"),
        ("a", 0, 0.595, "diverged"),
        ("b", 0, 0.648, "finished"),  # collapsed at most: not diverged
        ("c", 0, 0.707, "diverged"),
        ("d", 1, 0.648, "finished"),
        ("e", 1, 0.707, "diverged"),
        ("x", 1, 0.1, "diverged"),  # another family's run: not held against it
    ]
    runs = pd.DataFrame(rows, columns=["run_id", "seed", "lr", "status"])
    runs["family"] = ["f"] * 6 + ["g"]
    above = pd.DataFrame(  # seed 1 again: it trained at 0.771 above its probes' divergence
        [("g1", 1, 0.771, "finished", "f"), ("g2", 1, 0.841, "diverged", "f")],
        columns=["run_id", "seed", "lr", "status", "family"],
    )
    studies, moved = stored_divergence(StoredStudies(max_lr={"rms": result}), runs)
    seed0, seed1 = studies.max_lr["rms"].divergence_bounds
    assert (seed0.last_stable, seed0.first_unstable) == (0.545, 0.707)  # somewhere between
    assert (seed1.last_stable, seed1.first_unstable) == (0.648, 0.707)
    assert moved == ["rms seed 0 [0.648, 0.707] → [0.545, 0.707]"]
    studies, moved = stored_divergence(
        StoredStudies(max_lr={"rms": result}), pd.concat([runs, above], ignore_index=True)
    )
    seed1 = studies.max_lr["rms"].divergence_bounds[1]
    assert (seed1.last_stable, seed1.first_unstable) == (0.648, 0.841)  # up to the next one
    held = above.assign(status=["pruned", "diverged"], group=["max_lr", "max_lr"])
    studies, _ = stored_divergence(  # a probe held at max_lr.stop_step did not diverge
        StoredStudies(max_lr={"rms": result}), pd.concat([runs, held], ignore_index=True)
    )
    seed1 = studies.max_lr["rms"].divergence_bounds[1]
    assert (seed1.last_stable, seed1.first_unstable) == (0.648, 0.841)
    searched = above.assign(status=["pruned", "diverged"], group=["search", "search"])
    studies, _ = stored_divergence(  # a trial a pruner stopped says nothing of divergence
        StoredStudies(max_lr={"rms": result}), pd.concat([runs, searched], ignore_index=True)
    )
    seed1 = studies.max_lr["rms"].divergence_bounds[1]
    assert (seed1.last_stable, seed1.first_unstable) == (0.648, 0.707)
