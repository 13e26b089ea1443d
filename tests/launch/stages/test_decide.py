"""The ``decide:`` stage on the simulator: seeds are added until the report's verdict is
reached, stored runs are reused, and the report says how many seeds it took and why it
stopped."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import write_experiment

from ablate.core import store
from ablate.core.errors import ConfigError
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.sequential import decide_seeds
from ablate.launch.pipeline import run_experiment
from ablate.report.estimands import findings, primary_verdicts
from ablate.report.load import load_experiment_results
from ablate.report.plan import MATCHED
from ablate.report.verdict import Word


def _experiment(tmp_path: Path, gap: float, max_seeds: int, draw: int = 0, **extra: Any) -> Path:
    """Two simulated variants whose true final losses differ by ``gap`` nats, at paired
    noise √2 · 0.01 (the run noise calibrated on ln_vs_rms), drawn with ``simulate.seed``
    ``draw``."""
    truth = {
        "seed": draw,
        "seed_sd": 0.01,
        "run_sd": 0.01,
        "variants": {"rmsnorm": {"best_loss": 1.73 + gap}},
    }
    return write_experiment(
        tmp_path / "e.yaml",
        seeds=[0, 1, 2],
        runtime={"backend": "simulate", "simulate": truth},
        decide={"max_seeds": max_seeds, "step": 2},
        **extra,
    )


def _seeds_of(results: Path) -> list[int]:
    manifest = store.read_manifest(ExperimentFolder(results / "tiny"))
    return sorted({r.seed for r in manifest.runs if r.variant == "rmsnorm"})


@pytest.mark.usefixtures("unrendered_figures")
def test_a_large_gap_is_called_different_within_a_few_looks(tmp_path: Path) -> None:
    path = _experiment(tmp_path, gap=0.04, max_seeds=15)
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    decided = store.read_manifest(result.folder).decide
    assert decided["stopped"] == "decided"
    assert decided["looks"] == [3, 5, 7, 9, 11, 13, 15]
    assert decided["alpha"] == 0.05 / 7
    assert len(decided["seeds"]) < 15
    stored = load_experiment_results(result.folder)
    assert decided["rule"] == "primary"
    stopped_on = primary_verdicts(stored)  # the report's primary verdict is what it stopped on
    assert list(stopped_on) == ["rmsnorm"] and stopped_on["rmsnorm"].differs
    # the Answer's interval at the primary's level (all of α: no other estimand on the
    # simulator, over 7 looks) is wider than the evidence's 95% one
    primary = findings(stored).of(MATCHED, "rmsnorm")
    assert primary is not None and primary.verdict.word is Word.DIFFERS
    assert primary.estimate.level == pytest.approx(1 - 0.05 / 7)
    assert primary.estimate.seeds == 3 == len(decided["seeds"])
    summary = (result.report_dir / "report.md").read_text()
    narrow = summary.split("95% CI [")[1].split("]")[0]
    nl, nh = map(float, narrow.split(", "))
    assert primary.estimate.low < nl < nh < primary.estimate.high


@pytest.mark.usefixtures("unrendered_figures")
def test_no_gap_is_called_equivalent_and_a_larger_maximum_continues(tmp_path: Path) -> None:
    results = tmp_path / "results"
    # a draw under which five seeds leave Δ = 0 inconclusive (draws 1-3 do; under draw 0 five
    # seeds already reach equivalence, which a null may)
    small = run_experiment(_experiment(tmp_path, 0.0, 5, draw=1), results, tmp_path / "r")
    assert store.read_manifest(small.folder).decide["stopped"] == "maximum"
    assert _seeds_of(results) == [0, 1, 2, 3, 4]
    first = {p: p.stat().st_mtime_ns for p in (results / "tiny").glob("*/summary.json")}
    again = run_experiment(_experiment(tmp_path, 0.0, 40, draw=1), results, tmp_path / "r")
    decided = store.read_manifest(again.folder).decide
    assert decided["stopped"] == "decided"
    stopped_on = primary_verdicts(load_experiment_results(again.folder))
    assert {v: found.word for v, found in stopped_on.items()} == {"rmsnorm": Word.EQUIVALENT}
    assert _seeds_of(results) == sorted(decided["seeds"])
    assert decided["seeds"][:5] == [0, 1, 2, 3, 4] and len(decided["seeds"]) > 5
    assert {p: p.stat().st_mtime_ns for p in first} == first  # the stored runs were reused
    summaries = list((results / "tiny").glob("*/summary.json"))
    assert len(summaries) == 2 * len(decided["seeds"])
    primary = findings(load_experiment_results(again.folder)).of(MATCHED, "rmsnorm")
    assert primary is not None  # the report judges every seed the stopping rule took
    assert sorted(primary.seeds) == sorted(decided["seeds"]) == list(range(17))


def test_added_seeds_skip_the_seeds_the_search_uses(tmp_path: Path) -> None:
    search = {"n_trials": 2, "lr_min": 1e-3, "lr_max": 1e-2, "warmup_max": 4}
    experiment = load_experiment(_experiment(tmp_path, 0.0, max_seeds=6, search=search))
    assert experiment.search_seed() == 3
    assert decide_seeds(experiment) == [0, 1, 2, 4, 5, 6]


def test_decide_needs_room_for_more_seeds(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"decide.max_seeds is 3; it must exceed the 3 seeds"):
        load_experiment(_experiment(tmp_path, 0.0, max_seeds=3))


@pytest.mark.usefixtures("unrendered_figures")
def test_with_a_cross_over_every_seed_added_is_a_2x2_and_the_walks_come_after(
    tmp_path: Path,
) -> None:
    from ablate.launch.stages import STAGES

    truth = {
        "seed": 1,
        "run_sd": 0.01,
        "variants": {"layernorm": {"opt_lr": 0.004}, "rmsnorm": {"opt_lr": 0.016}},
    }
    path = write_experiment(
        tmp_path / "e.yaml",
        seeds=[0, 1, 2],
        curve={"seeds": [20, 21], "lr_min": 1e-3, "lr_max": 3e-2},
        runtime={"backend": "simulate", "simulate": truth},
        decide={"max_seeds": 7, "step": 2},
        storage=f"journal:{tmp_path / 'studies.log'}",
    )
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    decided = store.read_manifest(result.folder).decide
    assert len(decided["seeds"]) > 3  # under this draw a look added seeds
    runs = store.load_summaries(result.folder)
    for group in ("tuned", "crossover"):  # both variants at both settings on every seed taken
        cells = runs[runs["group"] == group].groupby("seed")["variant"].apply(sorted)
        assert sorted(cells.index) == sorted(decided["seeds"]), group
        assert all(found == ["layernorm", "rmsnorm"] for found in cells), group
    primary = findings(load_experiment_results(result.folder)).of(MATCHED, "rmsnorm")
    assert primary is not None and sorted(primary.seeds) == sorted(decided["seeds"])
    order = [stage.name for stage in STAGES]
    assert order.index("crossover") < order.index("decide") < order.index("usable")


@pytest.mark.usefixtures("unrendered_figures")
def test_futility_stops_where_the_seeds_left_cannot_decide_and_says_so(tmp_path: Path) -> None:
    truth = {"seed": 0, "seed_sd": 0.05, "run_sd": 0.05, "variants": {"rmsnorm": {}}}

    def decided(futility: bool) -> dict[str, Any]:
        path = write_experiment(
            tmp_path / f"{futility}.yaml",
            name=f"futile_{futility}".lower(),
            seeds=[0, 1, 2],
            runtime={"backend": "simulate", "simulate": truth},
            decide={"max_seeds": 11, "step": 2, "futility": futility},
        )
        result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
        return {**store.read_manifest(result.folder).decide, "report": result.report_dir}

    stopped, looked = decided(True), decided(False)
    assert looked["stopped"] == "maximum" and len(looked["seeds"]) == 11  # noise: never decided
    assert stopped["stopped"] == "futile" and stopped["futility"] is True
    assert len(stopped["seeds"]) == 5  # the second look, the first futility may stop at
    assert stopped["seeds"] == looked["seeds"][:5]  # the same seeds, fewer of them
    verdict = primary_verdicts(
        load_experiment_results(ExperimentFolder(tmp_path / "results" / "futile_true"))
    )
    assert verdict["rmsnorm"].word is Word.INCONCLUSIVE
    assert verdict["rmsnorm"].more_seeds is None or verdict["rmsnorm"].more_seeds > 11 - 5
    assert "its futility stop" in (stopped["report"] / "report.md").read_text()
