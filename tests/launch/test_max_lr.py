"""The maximum stable LR: every seed bracketed on its own on the shared lattice, resumed probes
reused only under the same budget, and a study that reads as its boundary."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import optuna
import pytest
from conftest import search_workers, simulated_experiment, study_trials, write_experiment

from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec
from ablate.core.simulate import edges, true_edge
from ablate.core.studies import BoundaryResult
from ablate.launch import max_lr, storage, studies
from ablate.launch.max_lr import run_max_lr
from ablate.launch.simulator import SimulatedExecutor
from ablate.launch.storage import storage_url


class InterruptedExecutor(SimulatedExecutor):
    """The simulator, interrupted (Ctrl-C) at its ``at``-th run."""

    def __init__(self, root: Path, at: int) -> None:
        super().__init__(root)
        self.calls, self.at = 0, at

    def obtain(self, spec: RunSpec, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return super().obtain(spec, **kwargs)


def _run(exp: Experiment, root: Path, variant: str = "rmsnorm", **kwargs: Any) -> BoundaryResult:
    url = storage_url(exp, root)
    return run_max_lr(exp, variant, SimulatedExecutor(root), url, say=lambda _: None, **kwargs)


def test_max_lr_resumed_after_interruption_redoes_nothing(tmp_path: Path) -> None:
    sections = {"max_lr": {"seeds": [0, 1], "start": 0.01, "lr_max": 50.0}}
    (tmp_path / "ref").mkdir()
    reference = _run(simulated_experiment(tmp_path / "ref", **sections), tmp_path / "ref" / "r")
    exp = simulated_experiment(tmp_path, **sections)
    root = tmp_path / "results"
    url = storage_url(exp, root)
    with pytest.raises(KeyboardInterrupt):
        run_max_lr(exp, "rmsnorm", InterruptedExecutor(root, at=3), url, say=lambda _: None)
    runs_before = {p.parent.name for p in root.glob("tiny/*/summary.json")}
    resumed = _run(exp, root)
    assert [p.reused for p in resumed.probes[:2]] == [True, True]
    assert not any(p.reused for p in resumed.probes[2:])
    assert resumed.seed_bounds == reference.seed_bounds and resumed.boundary == reference.boundary
    assert resumed.runs_total == reference.runs_total
    assert resumed.trained == reference.runs_total - 2  # the two stored probes were not rerun
    complete = [t for t in study_trials(url, "tiny.rmsnorm.max_lr") if t.state.name == "COMPLETE"]
    assert len(complete) == len(resumed.probes)
    assert {(t.params["lr"], t.user_attrs["seed"]) for t in complete} == {
        (p.lr, p.seed) for p in resumed.probes
    }
    runs_after = {p.parent.name for p in root.glob("tiny/*/summary.json")}
    assert len(runs_before) == 2  # the two probes stored before the interruption ...
    assert len(runs_after - runs_before) == resumed.trained  # ... kept; only the rest trained


def test_each_seed_is_bracketed_on_its_own_so_the_first_to_fail_decides_nothing(
    tmp_path: Path,
) -> None:
    # seed jitter of 0.4 in ln: the two seeds' edges differ by more than a lattice step
    truth = {"variants": {"rmsnorm": {"divergence_lr": 0.2, "boundary_sd": 0.4}}}
    exp = simulated_experiment(
        tmp_path,
        runtime={"backend": "simulate", "simulate": truth},
        max_lr={"seeds": [0, 1, 2], "start": 0.01, "lr_max": 50.0},
    )
    found = _run(exp, tmp_path / "results")
    probe_cfg = exp.variants["rmsnorm"]
    edges = {seed: true_edge(probe_cfg, "rmsnorm", seed) for seed in (0, 1, 2)}
    assert max(edges.values()) / min(edges.values()) > 2 ** (2 / 8)  # seeds apart on the lattice
    for bound in found.seed_bounds:  # every seed's bracket holds its own edge, one step wide
        assert bound.last_stable <= edges[bound.seed] < bound.first_unstable
        assert bound.first_unstable / bound.last_stable == pytest.approx(2 ** (1 / 8))
    worst = min(edges.values())
    assert found.boundary.value > worst * 2 ** (1 / 8)  # the median, not the worst seed
    median = sorted(edges.values())[1]
    assert found.boundary.low <= median <= found.boundary.high
    later = found.probes[len(found.seed_bounds[0].probes) :]
    assert len(later) <= 2 * 5  # the later seeds start from the first's boundary: few probes


def test_every_variant_probes_the_same_lattice_wherever_it_starts(tmp_path: Path) -> None:
    exp = simulated_experiment(tmp_path, max_lr={"seeds": [0], "lr_max": 50.0})
    root = tmp_path / "results"
    starts = {"layernorm": 0.00731, "rmsnorm": 0.0213}  # not lattice points, not a step apart
    lrs = {v: {p.lr for p in _run(exp, root, v, best_lr=lr).probes} for v, lr in starts.items()}
    for found in lrs.values():
        indices = [math.log2(lr) * 8 for lr in found]
        assert all(k == pytest.approx(round(k), abs=1e-9) for k in indices)  # 2^(k/8) exactly
    assert lrs["layernorm"] & lrs["rmsnorm"]  # where the two searches meet, the same LRs


def test_max_lr_probes_are_reused_only_under_the_same_budget(tmp_path: Path) -> None:
    root = tmp_path / "results"
    sections = {"seeds": [0], "start": 0.01, "factor": 8.0, "per_octave": 1, "lr_max": 50.0}
    first = simulated_experiment(tmp_path, max_lr=sections)
    done = _run(first, root)
    again = _run(first, root)
    assert all(p.reused for p in again.probes) and again.seed_bounds == done.seed_bounds
    longer = simulated_experiment(tmp_path, max_lr={**sections, "tokens": 4 * 16 * 30})
    fresh = _run(longer, root)
    assert not any(p.reused for p in fresh.probes) and fresh.trained >= 1
    more_seeds = simulated_experiment(tmp_path, max_lr={**sections, "seeds": [0, 1]})
    grown = _run(more_seeds, root)  # seed 0's probes are stored; seed 1 is probed afresh
    assert [p.reused for p in grown.probes] == [p.seed == 0 for p in grown.probes]
    url = storage_url(first, root)
    replayed = studies.stored_result("max_lr", first, "rmsnorm", SimulatedExecutor(root), url)
    assert replayed.seed_bounds == done.seed_bounds and replayed.trained == 0  # a rerun: no pool
    unrun = simulated_experiment(tmp_path, max_lr={**sections, "tokens": 4 * 16 * 40})
    assert studies.stored_result("max_lr", unrun, "rmsnorm", SimulatedExecutor(root), url) is None


def test_a_max_lr_study_reads_in_the_dashboard_as_its_boundary(tmp_path: Path) -> None:
    sections = {"seeds": [0, 1], "start": 0.01, "factor": 8.0, "per_octave": 2, "lr_max": 50.0}
    exp = simulated_experiment(tmp_path, max_lr=sections)
    root = tmp_path / "results"
    found = _run(exp, root)
    assert found.boundary is not None
    url = storage_url(exp, root)
    study = optuna.load_study(study_name=found.study, storage=storage.open_storage(url))
    largest = max(b.last_stable for b in found.seed_bounds)
    assert study.best_trial.params["lr"] == pytest.approx(largest)  # best: largest stable LR
    assert study.metric_names == [max_lr.PROBE_METRIC]
    interval = [found.boundary.low, found.boundary.high]
    assert study.user_attrs == {
        "max_stable_lr": found.boundary.value,
        "max_stable_lr_interval": interval,
    }
    stable = {(p.lr, p.seed): p.stable for p in found.probes}
    for trial in study.trials:
        lr = trial.params["lr"]
        assert trial.value == (-lr if stable[lr, trial.user_attrs["seed"]] else 0.0)
        assert trial.distributions["lr"].high >= 50.0  # the section's range, not one point


@pytest.mark.slow
def test_two_processes_bracket_max_lr_together(tmp_path: Path) -> None:
    # simulated runs that last 0.3 s each, so that the two processes probe at the same time
    path = write_experiment(
        tmp_path / "e.yaml",
        runtime={"backend": "simulate", "simulate": {"pace_s": 0.3}},
        max_lr={"seeds": [0], "start": 0.01, "factor": 4.0, "per_octave": 2, "lr_max": 50.0},
    )
    url = f"sqlite:///{tmp_path / 'study.db'}"
    outputs = [p.communicate(timeout=600)[0] for p in search_workers(path, url, 2)]
    brackets = [re.findall(r"^max stable lr (\w+): (.*) after", o, re.MULTILINE) for o in outputs]
    assert len(brackets[0]) == 2 and brackets[0] == brackets[1], outputs
    stored = json.loads((tmp_path / "results" / "tiny" / "stability.json").read_text())
    for variant, found in stored["max_lr"].items():
        probed = {p["lr"] for p in found["probes"]}
        study = study_trials(url, f"tiny.{variant}.max_lr")
        assert {t.params["lr"] for t in study if t.state.name == "COMPLETE"} == probed
        assert all(t.state.name == "COMPLETE" for t in study)
    runs = [
        json.loads(p.read_text()) for p in (tmp_path / "results" / "tiny").glob("*/summary.json")
    ]
    assert len(runs) == sum(len(f["probes"]) for f in stored["max_lr"].values())  # seed 0 each
    assert not list((tmp_path / "results" / "tiny" / ".claims").iterdir())


def test_the_divergence_boundary_is_bracketed_apart_from_the_quality_boundary(
    tmp_path: Path,
) -> None:
    # a collapse band: from collapse_lr a run ends at the floor, from divergence_lr it blows up
    band = {"collapse_lr": 0.1, "divergence_lr": 0.4, "boundary_sd": 0.1, "curvature": 0.02}
    exp = simulated_experiment(
        tmp_path,
        runtime={"backend": "simulate", "simulate": {"variants": {"rmsnorm": band}}},
        max_lr={"seeds": [0, 1], "start": 0.01, "lr_max": 50.0},
    )
    found = _run(exp, tmp_path / "results")
    cfg = exp.variants["rmsnorm"]
    sim = cfg.runtime.simulate
    for quality, diverged in zip(found.seed_bounds, found.divergence_bounds, strict=True):
        seen = edges(sim, "rmsnorm", quality.seed, cfg.train.warmup_steps)
        assert quality.last_stable < seen.collapse <= quality.first_unstable
        assert diverged.last_stable < seen.divergence <= diverged.first_unstable
        assert diverged.first_unstable / diverged.last_stable == pytest.approx(2 ** (1 / 8))
    assert found.divergence.value / found.boundary.value == pytest.approx(4.0, rel=0.1)
    reasons = {p.diverged: p.reason.split(":")[0] for p in found.probes if not p.stable}
    assert reasons == {True: "diverged", False: "collapsed"}
