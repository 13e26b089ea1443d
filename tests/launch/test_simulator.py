"""The simulator backend: ln_vs_rms's whole pipeline on a known truth in seconds, every stage's
answer held against it; stages take any executor; simulated runs are stored as trained ones."""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import pandas as pd
import pytest
import yaml
from conftest import REPO, TINY, unrendered_figure

from ablate.core import store
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec
from ablate.core.simulate import true_edge, valley_loss
from ablate.core.store import SUMMARY_KEYS
from ablate.launch.execute import Obtained, Request, SayFn, obtain_each
from ablate.launch.pipeline import PipelineResult, run_experiment
from ablate.launch.simulator import SimulatedExecutor
from ablate.report.boundaries import monotone_text

LN_EDGE, RMS_EDGE = 0.15, 0.6  # divergence LRs before warmup's gain: a true ratio of 4
TRUTH = {
    "seed_sd": 0.01,
    "run_sd": 0.003,
    "variants": {
        "layernorm": {"divergence_lr": LN_EDGE, "opt_lr": 0.004},
        "rmsnorm": {"divergence_lr": RMS_EDGE, "opt_lr": 0.008, "best_loss": 1.70},
    },
}


def simulated_ln_vs_rms(tmp_path: Path, **changes: Any) -> Experiment:
    """experiments/ln_vs_rms.yaml, unchanged but for the simulator's backend and truth (and
    its studies in a journal file, which is faster than SQLite)."""
    raw = yaml.safe_load((REPO / "experiments" / "ln_vs_rms.yaml").read_text())
    raw["runtime"] = {"backend": "simulate", "simulate": TRUTH}
    raw["storage"] = f"journal:{tmp_path / 'studies.log'}"
    raw.update(changes)
    path = tmp_path / "ln_vs_rms.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load_experiment(path)


@dataclass
class RecordingExecutor:
    """Stands in for a backend: records every spec any stage asks for, simulates it."""

    imports: ClassVar[tuple[str, ...]] = ()
    root: Path
    inner: SimulatedExecutor = field(init=False)
    seen: list[RunSpec] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.inner = SimulatedExecutor(self.root)

    def prepare(self) -> None:
        self.inner.prepare()

    def obtain(
        self,
        request: Request,
        wait: bool = False,
        say: SayFn = print,
    ) -> dict[str, Any]:
        self.seen.append(request.spec)
        return self.inner.obtain(request, wait, say)

    def run(self, specs: list[RunSpec]) -> list[dict[str, Any]]:
        self.seen.extend(specs)
        return self.inner.run(specs)

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        return obtain_each(self, requests, say)


@pytest.fixture(scope="module")
def ln_vs_rms_recorded(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Experiment, PipelineResult, RecordingExecutor]:
    """ln_vs_rms's whole pipeline on the simulator under a recording executor, once."""
    tmp_path = tmp_path_factory.mktemp("ln_vs_rms")
    exp = simulated_ln_vs_rms(tmp_path)
    recorder = RecordingExecutor(tmp_path / "results")
    with pytest.MonkeyPatch.context() as patch:
        from ablate.report import builder

        patch.setattr(builder, "save_figure", unrendered_figure)
        result = run_experiment(exp, tmp_path / "results", tmp_path / "reports", executor=recorder)
    return exp, result, recorder


def test_ln_vs_rms_on_the_simulator_finds_the_truth_at_every_stage(
    ln_vs_rms_recorded: tuple[Experiment, PipelineResult, RecordingExecutor],
) -> None:
    exp, result, _ = ln_vs_rms_recorded
    assert not result.missing and result.report_rebuilt
    sim = exp.base.runtime.simulate
    boundaries = result.studies.max_lr
    for variant in exp.variants:
        probe_cfg = exp.variants[variant].model_copy(deep=True)
        probe_cfg.train.tokens = exp.max_lr.tokens or probe_cfg.train.tokens
        found = boundaries[variant]
        assert found.held_at == 64 and found.seed_bounds == []  # held: the divergence edge
        assert len(found.divergence_bounds) == len(exp.max_lr.seeds)
        for bound in found.divergence_bounds:  # each seed's bracket holds its true edge
            truth = true_edge(probe_cfg, variant, bound.seed)
            assert bound.last_stable <= truth < bound.first_unstable
            step = 2 ** (1 / exp.max_lr.per_octave)  # one step of the file's lattice
            assert bound.first_unstable / bound.last_stable == pytest.approx(step)
    runs = store.load_summaries(result.folder)
    tuned = runs[runs["group"] == "tuned"]
    for variant in exp.variants:  # tuned at its curve's optimum: within 2^(1/4) of the truth
        lrs = set(tuned.loc[tuned["variant"] == variant, "lr"])
        assert len(lrs) == 1 and abs(math.log2(lrs.pop() / sim.truth(variant).opt_lr)) < 0.25
    decided = store.read_manifest(result.folder).decide  # the file's decide: section
    assert decided["stopped"] == "decided" and decided["seeds"][:3] == [0, 1, 2]
    assert sorted(tuned["seed"]) == sorted(2 * decided["seeds"])  # every seed it took, matched
    crossover = runs[runs["group"] == "crossover"]  # the 2x2 on each of them
    assert sorted(crossover["seed"]) == sorted(2 * decided["seeds"])
    main = runs[runs["group"] == "main"].pivot(
        index="seed", columns="variant", values="final_val_loss"
    )
    # the truth at the shared LR 0.003: rmsnorm's valley is lower there by this much
    shared = exp.base.train.lr
    gap = valley_loss(sim.truth("rmsnorm"), shared) - valley_loss(sim.truth("layernorm"), shared)
    assert (main["rmsnorm"] - main["layernorm"]).mean() == pytest.approx(gap, abs=0.01)
    report = (result.report_dir / "report.md").read_text()
    assert report.splitlines()[6].startswith("**Simulated, not trained:**")


def test_a_stage_runs_on_any_executor_it_is_given(
    ln_vs_rms_recorded: tuple[Experiment, PipelineResult, RecordingExecutor],
) -> None:
    _, result, recorder = ln_vs_rms_recorded
    seen = {s.run_id for s in recorder.seen}
    stored = {p.parent.name for p in result.folder.path.glob("*/summary.json")}
    assert seen == stored and len(stored) == len(runs := store.load_summaries(result.folder))
    groups = {s.group for s in recorder.seen}
    stages = {"main", "curve", "tuned", "crossover", "usable", "max_lr"}  # the warmup declared
    assert groups == stages and set(runs["group"]) <= stages  # a walk may reuse a curve run


def test_a_simulated_run_is_stored_as_a_trained_one_and_reused(tmp_path: Path) -> None:
    exp = simulated_ln_vs_rms(tmp_path)
    spec = RunSpec(exp.name, "rmsnorm", 0, exp.variants["rmsnorm"])
    executor = SimulatedExecutor(tmp_path)
    summary = executor.obtain(Request(spec))
    assert set(SUMMARY_KEYS) <= summary.to_json().keys() and summary.stable is True
    folder = ExperimentFolder.of(tmp_path, exp.name).run(spec.run_id)
    assert json.loads(folder.summary.read_text()) == summary.to_json()
    assert folder.metrics.is_file() and folder.probes.is_file() and folder.config.is_file()
    again = executor.run([spec])
    assert again == [summary]
    assert (
        store.load_metrics(ExperimentFolder(tmp_path / exp.name))["val_loss"].notna().sum() == 4
    )  # 256 / 64


@pytest.mark.usefixtures("unrendered_figures")
def test_backend_simulate_on_the_command_line_keeps_trained_results_apart(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from ablate.cli import main

    path = tmp_path / "ln_vs_rms.yaml"
    raw = yaml.safe_load((REPO / "experiments" / "ln_vs_rms.yaml").read_text())
    raw.pop("curve"), raw.pop("max_lr")
    path.write_text(yaml.safe_dump(raw))
    results, reports = tmp_path / "results", tmp_path / "reports"
    code = main(
        [
            "run",
            str(path),
            "--backend",
            "simulate",
            "--results-dir",
            str(results),
            "--report-dir",
            str(reports),
        ]
    )
    assert code == 0
    assert [p.name for p in results.iterdir()] == ["ln_vs_rms-simulated"]
    assert (reports / "ln_vs_rms-simulated" / "report.md").is_file()
    said = capsys.readouterr()
    assert "simulated 6 runs" in said.out + said.err  # the wording is the point: what it says


@pytest.mark.usefixtures("unrendered_figures")
def test_a_simulated_experiment_reads_no_data_and_builds_no_model(tmp_path: Path) -> None:
    from ablate.core.errors import DataError

    (tmp_path / "short.txt").write_text("too short to train on")
    short = {"source": "text_file", "path": str(tmp_path / "short.txt")}
    exp = simulated_ln_vs_rms(tmp_path, data=short, curve=None, max_lr=None, decide=None)
    result = run_experiment(exp, tmp_path / "results", tmp_path / "reports")
    assert not result.missing and len(store.load_summaries(result.folder)) == 6
    exp.base.runtime.backend = "train"  # the same file, trained: its corpus is refused
    with pytest.raises(DataError, match="too few for model.seq_len"):
        run_experiment(exp, tmp_path / "trained", tmp_path / "reports")


def test_a_paced_run_lasts_its_pace_and_keeps_its_id(tmp_path: Path) -> None:
    import time

    exp = simulated_ln_vs_rms(tmp_path)
    spec = RunSpec(exp.name, "rmsnorm", 0, exp.variants["rmsnorm"])
    paced_cfg = spec.config.model_copy(deep=True)
    paced_cfg.runtime.simulate.pace_s = 0.5
    paced = RunSpec(exp.name, "rmsnorm", 0, paced_cfg)
    assert paced.run_id == spec.run_id  # the pace changes no result, so no id
    started = time.perf_counter()
    summary = SimulatedExecutor(tmp_path).obtain(Request(paced))
    assert time.perf_counter() - started >= 0.5
    unpaced = SimulatedExecutor(tmp_path / "unpaced").obtain(Request(spec))
    assert summary == dataclasses.replace(unpaced, wall_time_s=summary.wall_time_s)


@pytest.mark.usefixtures("unrendered_figures")
def test_a_sweep_best_at_the_grids_edge_is_flagged_in_the_report(tmp_path: Path) -> None:
    from conftest import write_experiment

    sim = {"default": {"opt_lr": 0.004}}  # below the whole grid: its best is the first point
    path = write_experiment(
        tmp_path / "e.yaml",
        sweep={"lr_min": 0.01, "lr_max": 0.1, "points": 3},
        runtime={"backend": "simulate", "simulate": sim},
    )
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    text = (result.report_dir / "report.md").read_text()
    table = pd.read_csv(result.report_dir / "lr_sensitivity.csv")
    assert sorted(table["variant"]) == ["layernorm", "rmsnorm"]
    assert table.columns[4] == "best_inside" and not table["best_inside"].any()
    # the wording is the point: the report's one warning for the variants at the edge
    assert "**Best at the grid's edge** (layernorm, rmsnorm)" in text


@pytest.mark.usefixtures("unrendered_figures")
def test_a_window_narrower_than_a_coarse_move_is_found_from_a_stored_stable_point(
    tmp_path: Path,
) -> None:
    from conftest import write_experiment

    # a steep valley: stable only within a factor 3.6 around 0.01, narrower than the 4x move;
    # train.lr 1e-3 lies below it, where a run does not learn yet
    steep = {"opt_lr": 0.01, "curvature": 15.0, "divergence_lr": 1.0, "boundary_sd": 0.0}
    path = write_experiment(
        tmp_path / "e.yaml",
        sweep={"lr_min": 1e-3, "lr_max": 0.1, "points": 9},
        max_lr={"seeds": [0, 1], "lr_max": 10.0},
        train={**TINY["train"], "lr": 1e-3},
        runtime={"backend": "simulate", "simulate": {"default": steep, "run_sd": 0.0}},
        storage=f"journal:{tmp_path / 'studies.log'}",
    )
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    exp = load_experiment(path)
    for variant, found in result.studies.max_lr.items():
        for bound in found.seed_bounds:  # the window's upper edge, not "nothing stable"
            truth = true_edge(exp.variants[variant], variant, bound.seed)
            assert bound.last_stable <= truth < bound.first_unstable
        assert found.monotone  # the sweep's 1e-3 did not learn yet: below the window, no hole
        assert {r.lr for r in found.below_window} >= {1e-3}
    text = (result.report_dir / "report.md").read_text()
    for found in result.studies.max_lr.values():  # the report states each check as found
        assert monotone_text(found) in text
