"""The maximum stable LR: every seed bracketed on its own on the shared lattice, resumed probes
reused only under the same budget, and a study that reads as its boundary."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import optuna
import pandas as pd
import pytest
from conftest import search_workers, simulated_experiment, study_trials, write_experiment

from ablate.core.boundary import lattice_index, lattice_lr
from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from ablate.core.record import RunRecord
from ablate.core.simulate import edges, true_edge
from ablate.core.studies import BoundaryResult, Probe
from ablate.launch import max_lr, storage, studies
from ablate.launch.execute import Obtained, Request, SayFn
from ablate.launch.max_lr import Brackets, run_max_lr
from ablate.launch.simulator import SimulatedExecutor
from ablate.launch.storage import storage_url


class InterruptedExecutor(SimulatedExecutor):
    """The simulator, interrupted (Ctrl-C) at its ``at``-th run."""

    def __init__(self, root: Path, at: int) -> None:
        super().__init__(root)
        self.calls, self.at = 0, at

    def obtain(self, request: Request, *args: Any, **kwargs: Any) -> RunRecord:
        self.calls += 1
        if self.calls == self.at:
            raise KeyboardInterrupt
        return super().obtain(request, *args, **kwargs)


class RoundCounter(SimulatedExecutor):
    """The simulator, recording how many runs each round (``obtain_all`` call) asked for."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.rounds: list[int] = []

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        self.rounds.append(len(requests))
        return super().obtain_all(requests, say)


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


def _brackets(tmp_path: Path, at_once: int) -> tuple[BoundaryResult, list[int]]:
    truth = {"variants": {"rmsnorm": {"divergence_lr": 0.2, "boundary_sd": 0.4}}}
    sections = {"seeds": [0, 1, 2], "start": 0.01, "lr_max": 50.0, "parallel_seeds": at_once}
    exp = simulated_experiment(
        tmp_path, runtime={"backend": "simulate", "simulate": truth}, max_lr=sections
    )
    root = tmp_path / "results"
    executor = RoundCounter(root)
    found = run_max_lr(exp, "rmsnorm", executor, storage_url(exp, root), say=lambda _: None)
    return found, executor.rounds


def test_parallel_seeds_bracket_a_wave_together_in_rounds_of_one_probe_per_seed(
    tmp_path: Path,
) -> None:
    paths = {k: tmp_path / f"k{k}" for k in (1, 2, 3)}
    for path in paths.values():
        path.mkdir()
    (one, one_rounds), (two, two_rounds), (three, three_rounds) = (
        _brackets(paths[k], k) for k in (1, 2, 3)
    )
    assert set(one_rounds) == {1} and len(one_rounds) == len(one.probes)  # one probe a round
    assert three_rounds[0] == 3 and max(three_rounds) == 3  # every seed's probe at once
    assert len(three_rounds) < len(one_rounds)  # fewer rounds ...
    assert len(three.probes) > len(one.probes)  # ... for more probes: all start at the start
    assert max(two_rounds) == 2 and len(three_rounds) < len(two_rounds) < len(one_rounds)
    seed_probes = {
        k: {s: [(p.lr, p.stable) for p in found.probes if p.seed == s] for s in (0, 1, 2)}
        for k, found in {1: one, 2: two, 3: three}.items()
    }
    assert seed_probes[1][0] == seed_probes[2][0] == seed_probes[3][0]  # seed 0 starts alike
    assert seed_probes[2][1] == seed_probes[3][1]  # seed 1 starts with seed 0, at the start
    assert {probes[0][0] for probes in seed_probes[3].values()} == {seed_probes[1][0][0][0]}
    # in waves of two, seed 2 starts where k = 1 starts it: at the median of seeds 0 and 1
    assert seed_probes[2][2] == seed_probes[1][2]
    for found in (one, two, three):  # each way, every seed's bracket is its own, one step wide
        assert [b.seed for b in found.seed_bounds] == [0, 1, 2]
        assert [(b.last_stable, b.first_unstable) for b in found.seed_bounds] == [
            (b.last_stable, b.first_unstable) for b in one.seed_bounds
        ]
        assert [p.seed for p in found.probes] == sorted(p.seed for p in found.probes)
    (tmp_path / "again").mkdir()
    again, again_rounds = _brackets(tmp_path / "again", 3)
    assert again_rounds == three_rounds  # the same file, k and results: the same probes
    assert [(p.lr, p.seed, p.stable) for p in again.probes] == [
        (p.lr, p.seed, p.stable) for p in three.probes
    ]


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


@pytest.mark.parametrize(
    ("at_once", "workers", "turns"), [(2, 4, True), (2, 2, False), (1, 4, False)]
)
def test_max_lr_studies_with_parallel_seeds_take_turns_only_while_too_few_to_fill_the_workers(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, at_once: int, workers: int, turns: bool
) -> None:
    """Two max-LR studies of 2 seeds at once: with workers for 4 runs they take turns, each
    round filling a pool; with 2 they run side by side, each round's probes one after another
    in its study's worker; one seed at a time, as they always did."""
    from ablate.launch.execute import LocalExecutor
    from ablate.launch.resources import Resources

    sections = {"seeds": [0, 1], "start": 0.01, "parallel_seeds": at_once}
    exp = load_experiment(write_experiment(tmp_path / "e.yaml", max_lr=sections))
    assert studies.runs_at_once(exp, ("max_lr",)) == at_once
    assert studies.runs_at_once(exp, ("search",)) == 1  # the file has no parallel search
    seen: list[tuple[int, int | None]] = []

    def record(job, jobs, res, say, imports):  # type: ignore[no-untyped-def]
        seen.extend((res.workers, args[3].workers) for args in jobs)
        return [None] * len(jobs)

    monkeypatch.setattr(studies, "run_parallel", record)
    executor = LocalExecutor(tmp_path / "results")
    url = storage_url(exp, tmp_path / "results")
    studies.run_studies(exp, executor, url, Resources(workers, 1), ("max_lr",))
    side_by_side = (workers, 1) if at_once > 1 else (workers, None)
    assert seen == ([(1, None)] * 2 if turns else [side_by_side] * 2)


class StoredTruth:
    """A study holding every probe: stable up to lattice index ``edge``, diverged from
    ``edge + 3`` (what :class:`Brackets` reads through ``get``)."""

    def __init__(self, edge: int, per_octave: int) -> None:
        self.edge, self.per_octave, self.asked = edge, per_octave, []

    def get(self, key: tuple[int, int]) -> Probe:
        self.asked.append(key)
        index, seed = key
        lr = lattice_lr(index, self.per_octave)
        return Probe(lr, seed, stable=index <= self.edge, diverged=index >= self.edge + 3)


def test_brackets_walk_a_seed_to_both_edges_from_stored_probes_alone(tmp_path: Path) -> None:
    exp = simulated_experiment(tmp_path, max_lr={"seeds": [0], "start": 0.01, "lr_max": 50.0})
    per_octave = exp.max_lr.per_octave
    edge = lattice_index(0.01, per_octave) + 9
    lines: list[str] = []
    brackets = Brackets("rmsnorm", [0], per_octave, lines.append)
    walk = brackets.walks(exp, [0], 0.01)[0]
    truth = StoredTruth(edge, per_octave)
    assert brackets.answer(0, walk, next(walk), truth) is None  # done: nothing left to train
    quality, went = brackets.bounds[0], brackets.divergence[0]
    assert (quality.last_stable, quality.first_unstable) == (
        lattice_lr(edge, per_octave),
        lattice_lr(edge + 1, per_octave),
    )
    assert (went.last_stable, went.first_unstable) == (
        lattice_lr(edge + 2, per_octave),
        lattice_lr(edge + 3, per_octave),
    )
    shown = brackets.probes[0]
    assert len({p.lr for p in shown}) == len(shown) == len(lines)  # each probe shown once
    assert len(truth.asked) > len(shown)  # the divergence walk re-read the quality bracket's


def test_probes_held_at_a_step_find_the_divergence_brackets_whole_probes_find(
    tmp_path: Path,
) -> None:
    band = {"collapse_lr": 0.1, "divergence_lr": 0.4, "boundary_sd": 0.1, "curvature": 0.02}
    runtime = {"backend": "simulate", "simulate": {"variants": {"rmsnorm": band}}}
    sections = {"seeds": [0, 1], "start": 0.01, "lr_max": 50.0}
    (tmp_path / "whole").mkdir()
    whole = _run(
        simulated_experiment(tmp_path / "whole", runtime=runtime, max_lr=sections),
        tmp_path / "whole" / "r",
    )
    exp = simulated_experiment(tmp_path, runtime=runtime, max_lr={**sections, "stop_step": 8})
    held = _run(exp, tmp_path / "results")
    assert held.held_at == 8 and held.seed_bounds == [] and held.boundary is None

    def ends(found: BoundaryResult) -> list[tuple[int, float | None, float | None]]:
        return [(b.seed, b.last_stable, b.first_unstable) for b in found.divergence_bounds]

    assert ends(held) == ends(whole)  # the same lattice brackets, by another path
    assert held.divergence == whole.divergence
    assert held.runs_total < whole.runs_total  # no quality bracket to walk first
    sim = exp.variants["rmsnorm"].runtime.simulate
    for bound in held.divergence_bounds:
        seen = edges(sim, "rmsnorm", bound.seed, exp.variants["rmsnorm"].train.warmup_steps)
        assert bound.last_stable < seen.divergence <= bound.first_unstable
    assert all(p.stable == (not p.diverged) for p in held.probes)
    steps = [
        json.loads(path.read_text())["steps"]
        for path in (tmp_path / "results").glob("tiny/*/summary.json")
    ]
    assert len(steps) == held.runs_total and max(steps) <= 8  # none trained past the hold


def test_a_probe_hold_at_or_past_the_budget_is_refused(tmp_path: Path) -> None:
    from ablate.core.errors import ConfigError

    with pytest.raises(ConfigError) as refused:
        simulated_experiment(tmp_path, max_lr={"stop_step": 20})  # the budget is 20 steps
    assert refused.value.key == "max_lr.stop_step"
    assert simulated_experiment(tmp_path, max_lr={"stop_step": 19}).max_lr.stop_step == 19


@pytest.mark.usefixtures("unrendered_figures")
def test_held_probes_are_stored_stopped_and_the_report_brackets_divergence_alone(
    tmp_path: Path,
) -> None:
    from ablate.core import store
    from ablate.launch.pipeline import run_experiment

    band = {"collapse_lr": 0.1, "divergence_lr": 0.4, "boundary_sd": 0.1, "curvature": 0.02}
    path = write_experiment(
        tmp_path / "e.yaml",
        seeds=[0, 1],
        runtime={"backend": "simulate", "simulate": {"variants": {"rmsnorm": band}}},
        storage=f"journal:{tmp_path / 'studies.log'}",
        max_lr={"seeds": [0, 1], "start": 0.01, "lr_max": 50.0, "stop_step": 8},
    )
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    runs = store.load_summaries(result.folder)
    probes = runs[runs["group"] == "max_lr"]
    assert set(probes["status"]) == {"pruned", "diverged"}
    assert (probes.loc[probes["status"] == "pruned", "steps"] == 8).all()
    assert (probes.loc[probes["status"] == "diverged", "steps"] <= 8).all()
    assert not list((tmp_path / "results").rglob("checkpoint.ckpt"))  # none left behind
    text = (result.report_dir / "report.md").read_text()
    assert "**no boundary found**" not in text and "Max stable LR (the largest" not in text
    seeds = pd.read_csv(result.report_dir / "max_lr_divergence_seeds.csv")
    assert len(seeds) == 4 and (seeds["last_stable"] < seeds["first_unstable"]).all()
    assert not (result.report_dir / "max_lr_seeds.csv").exists()
    again = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    assert len(store.load_summaries(again.folder)) == len(runs)  # read back, none retrained
