"""The Set-up section's counts: each stage's runs, the distinct runs they add up to, and what
training cost, from the runs' own times and the stored job records."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd

from ablate.core.jobs import JOB_COLUMNS
from ablate.core.simulate import SIMULATED_IMPL
from ablate.report.setup import _stage_text, compute_of, compute_text, files_text


def _stored(jobs: pd.DataFrame) -> SimpleNamespace:
    """Two main runs that are also points of a 3-run sweep, and a max-LR probe whose
    bracket also names a main run."""
    runs = pd.DataFrame(
        {
            "run_id": ["a", "b", "c", "p"],
            "group": ["main", "main", "sweep", "max_lr"],
            "planned_steps": [200] * 4,
            "wall_time_s": [60.0, 60.0, 30.0, 90.0],
        }
    )
    sweep = runs.iloc[:2].assign(group="sweep")  # a, b are also points of the sweep
    studies = SimpleNamespace(run_ids=lambda: {("layernorm", "max_lr"): ["p", "a"]})
    planned = pd.concat([runs.iloc[:3], sweep])
    stored = SimpleNamespace(stored_runs=runs, runs=planned, studies=studies, jobs=jobs)
    stored.runs = stored.runs.assign(norm_impl="torch")
    return stored


def test_a_run_two_stages_share_is_counted_once() -> None:
    text = _stage_text(_stored(pd.DataFrame(columns=JOB_COLUMNS)))  # type: ignore[arg-type]
    assert text.startswith("main 2 runs of 200 steps, sweep 3 runs of 200 steps, max_lr ")
    assert text.endswith("; 4 distinct runs in all, 3 of them in two stages")


def test_compute_sums_the_runs_and_the_invocations() -> None:
    jobs = pd.DataFrame(
        [
            {"wall_s": 90.0, "outcome": "interrupted", "workers": 2, "threads": 1, "cores": 2,
             "cpu": "X", "machine": "idle", "others_share": 0.02},
            {"wall_s": 150.0, "outcome": "finished", "workers": 2, "threads": 1, "cores": 2,
             "cpu": "X", "machine": "busy", "others_share": 0.4},
        ]
    )  # fmt: skip
    cost = compute_of(_stored(jobs))  # type: ignore[arg-type]
    assert (cost.runs, cost.run_minutes, cost.unused, cost.simulated) == (4, 4.0, 0, False)
    assert (cost.invocations, cost.cut_short, cost.wall_minutes) == (2, 1, 4.0)
    assert (cost.setups, cost.cpus) == ({(2, 1)}, {(2, "X")})
    assert cost.machines == {"busy", "idle"} and cost.others_share == 0.4
    # the wording, once: the line as the Set-up prints it
    assert compute_text(cost) == (
        "4 runs, 4.0 run-minutes (each run's own wall time, summed); wall time 4.0 min in 2 "
        "invocation(s), 1 of them cut short of `ablate run`, 2 worker(s) x 1 thread(s) on 2 "
        "cores of X, machine busy/idle, other work 40% of the cores at most (jobs.csv)"
    )
    ahead = _stored(jobs)
    ahead.stored_runs = pd.concat(
        [ahead.stored_runs, ahead.stored_runs.iloc[:1].assign(run_id="w")]
    )
    assert compute_of(ahead).unused == 1  # type: ignore[arg-type]
    simulated = _stored(jobs)
    simulated.runs = simulated.runs.assign(norm_impl=SIMULATED_IMPL)
    assert compute_of(simulated).simulated  # type: ignore[arg-type]
    unrecorded = compute_of(_stored(pd.DataFrame(columns=JOB_COLUMNS)))  # type: ignore[arg-type]
    assert unrecorded.invocations == 0 and unrecorded.run_minutes == 4.0


def test_a_shard_set_is_named_by_its_count_and_ends() -> None:
    assert files_text(None) == ""
    assert files_text("/d/train.bin") == " /d/train.bin"
    shards = [f"/d/fineweb_train_{k:06d}.bin" for k in range(1, 104)]
    assert files_text(shards) == (
        " 103 shards (/d/fineweb_train_000001.bin … /d/fineweb_train_000103.bin)"
    )
