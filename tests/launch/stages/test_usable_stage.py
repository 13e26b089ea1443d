"""The usable stage: a walk per variant and seed, the same runs however many workers fill a
round (a point a walk never reaches is trained ahead, not planned)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from conftest import simulated_experiment

from ablate.core.folders import ExperimentFolder
from ablate.core.optimum import trained_lr
from ablate.core.plan import RunSpec, Settings, plan_crossover, plan_tuned
from ablate.core.record import RunRecord
from ablate.launch.simulator import SimulatedExecutor
from ablate.launch.stages.usable import round_lrs, usable_stage


@dataclass
class Rounds(SimulatedExecutor):
    """The simulator, counting the runs of each round it is given."""

    rounds: list[int] = field(default_factory=list)

    def run(self, specs: list[RunSpec]) -> list[RunRecord]:
        self.rounds.append(len(specs))
        return super().run(specs)


def _walked(tmp_path: Path, slots: int) -> tuple[list[str], list[int], list[list[str]]]:
    truth = {"variants": {"layernorm": {"opt_lr": 0.004}, "rmsnorm": {"opt_lr": 0.009}}}
    experiment = simulated_experiment(
        tmp_path,
        runtime={"backend": "simulate", "simulate": truth},
        max_lr={"within": 0.1, "lr_max": 1.0, "seeds": [0, 1]},
    )
    executor = Rounds(tmp_path / "results")
    recorded: list[list[str]] = []
    planned = usable_stage(
        experiment,
        executor,
        {"layernorm": Settings(0.004, 30), "rmsnorm": Settings(0.009, 30)},
        lambda specs: recorded.append([s.run_id for s in specs]),
        lambda _: None,
        slots,
    )
    return [s.run_id for s in planned], executor.rounds, recorded


def test_free_workers_walk_ahead_and_the_stage_plans_the_same_runs(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "eight").mkdir()
    one, one_rounds, _ = _walked(tmp_path / "one", 1)
    eight, eight_rounds, recorded = _walked(tmp_path / "eight", 8)
    assert eight == one and recorded[-1] == one  # the runs and their order: one step a round
    assert len(eight_rounds) < len(one_rounds) and max(one_rounds) <= 4
    assert sum(eight_rounds) >= sum(one_rounds)  # trained ahead, some never reached


def test_a_round_fills_the_workers_with_each_walks_next_points() -> None:
    lattice = {"ln": [1.0, 2.0, 4.0, 8.0], "rms": [2.0, 4.0, 8.0]}
    pending = {("ln", 0): 2.0, ("rms", 0): 4.0}
    assert round_lrs(pending, lattice, 1) == {("ln", 0): [2.0], ("rms", 0): [4.0]}
    assert round_lrs(pending, lattice, 5) == {("ln", 0): [2.0, 4.0], ("rms", 0): [4.0, 8.0]}


def test_a_walk_trains_at_its_variant_s_tuned_warmup(tmp_path: Path) -> None:
    truth = {"variants": {"layernorm": {"opt_lr": 0.004}, "rmsnorm": {"opt_lr": 0.009}}}
    experiment = simulated_experiment(
        tmp_path,
        runtime={"backend": "simulate", "simulate": truth},
        max_lr={"within": 0.1, "lr_max": 1.0, "seeds": [0]},
    )
    tuned = {"layernorm": Settings(2.0**-8, 40), "rmsnorm": Settings(2.0**-7, 64)}
    planned = usable_stage(
        experiment, SimulatedExecutor(tmp_path / "results"), tuned, lambda _: None, print
    )
    warmups = {(s.variant, s.config.train.warmup_steps) for s in planned}
    assert warmups == {("layernorm", 40), ("rmsnorm", 64)}
    starts = {
        s.variant: min(p.config.train.lr for p in planned if p.variant == s.variant)
        for s in planned
    }
    assert starts == {"layernorm": 2.0**-8, "rmsnorm": 2.0**-7}


def test_a_walk_from_the_tuned_optima_is_the_tuned_and_cross_over_runs_where_they_meet(
    tmp_path: Path,
) -> None:
    """A tuned LR is the walk's lattice point itself: on a seed the 2x2 trains too, the walk's
    start is the tuned run and LayerNorm's step to RMSNorm's LR its cross-over run."""
    truth = {"variants": {"layernorm": {"opt_lr": 0.0055}, "rmsnorm": {"opt_lr": 0.0066}}}
    experiment = simulated_experiment(
        tmp_path,
        runtime={"backend": "simulate", "simulate": truth},
        max_lr={"within": 0.1, "lr_max": 1.0, "seeds": [0]},
    )
    tuned = {
        "layernorm": Settings(trained_lr(0.0055), 64),
        "rmsnorm": Settings(trained_lr(0.0066), 64),
    }
    walked = usable_stage(
        experiment, SimulatedExecutor(tmp_path / "results"), tuned, lambda _: None, print
    )
    two_by_two = plan_tuned(experiment, tuned, [0]) + plan_crossover(experiment, tuned, [0])
    met = {s.run_id for s in walked}
    shared = sorted((s.variant, s.config.train.lr) for s in two_by_two if s.run_id in met)
    ln, rms = tuned["layernorm"].lr, tuned["rmsnorm"].lr
    assert shared == [("layernorm", ln), ("layernorm", rms), ("rmsnorm", rms)]


def _walk(tmp_path: Path, **max_lr: object) -> tuple[list[RunSpec], Rounds, ExperimentFolder]:
    truth = {"variants": {"layernorm": {"opt_lr": 0.004}, "rmsnorm": {"opt_lr": 0.009}}}
    experiment = simulated_experiment(
        tmp_path,
        runtime={"backend": "simulate", "simulate": truth},
        max_lr={"within": 0.1, "lr_max": 1.0, "seeds": [0, 1, 2], **max_lr},
    )
    executor = Rounds(tmp_path / "results")
    folder = ExperimentFolder.of(tmp_path / "results", experiment.name)
    tuned = {"layernorm": Settings(0.004, 3), "rmsnorm": Settings(0.009, 3)}
    said: list[str] = []
    planned = usable_stage(experiment, executor, tuned, lambda _: None, said.append, 2, folder)
    return planned, executor, folder


def _records(folder: ExperimentFolder, planned: list[RunSpec]) -> dict[str, RunRecord]:
    found = {s.run_id: folder.run(s.run_id).read_record() for s in planned}
    return {run_id: record for run_id, record in found.items() if record is not None}


def test_a_held_walk_decides_points_at_its_step_and_ends_where_the_whole_walk_does(
    tmp_path: Path,
) -> None:
    (tmp_path / "whole").mkdir()
    (tmp_path / "held").mkdir()
    whole, _, whole_folder = _walk(tmp_path / "whole")
    held, _, folder = _walk(tmp_path / "held", walk_step=10, walk_margin_within=0.09)
    assert [s.run_id for s in held] == [s.run_id for s in whole]  # the same points reached
    records, every = _records(folder, held), _records(whole_folder, whole)
    stopped = {rid: r for rid, r in records.items() if r.status == "pruned"}
    assert stopped and all(r.steps == 10 for r in stopped.values())
    starts = {s.run_id for s in held if s.config.train.lr in (0.004, 0.009)}
    assert not starts & set(stopped)  # a walk's start is trained whole: the band is its loss
    asked = {s.run_id: s.config.runtime.pause_step for s in held}
    assert {rid for rid, step in asked.items() if step == 10} == set(stopped)
    for run_id, record in records.items():  # what trained on is the run trained whole
        if run_id not in stopped:
            assert record.final_val_loss == every[run_id].final_val_loss
    assert sum(r.steps for r in records.values()) < sum(r.steps for r in every.values())
    for record in stopped.values():  # each decided by its gap at the step against the band
        gap = float(record.stopped_reason.split(": ")[1].split(" nats")[0])
        assert abs(gap - 0.1) > 0.09
        assert ("within the band" in record.stopped_reason) == (gap < 0.1)
    again, _, _ = _walk(tmp_path / "held", walk_step=10, walk_margin_within=0.09)
    assert [s.run_id for s in again] == [s.run_id for s in held]
    assert _records(folder, again) == records  # nothing trained again, nothing restored
