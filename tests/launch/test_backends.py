"""Which executor a runtime names, and when the pool's server starts before the work that
needs it (the server itself: test_workers.py)."""

from __future__ import annotations

import pytest
from conftest import REPO

from ablate.core.load import load_experiment
from ablate.launch import backends

SMOKE = REPO / "experiments" / "smoke.yaml"
ONE_STUDY = ["variants={layernorm: {model.norm.kind: layernorm}}", "max_lr=null"]


@pytest.mark.parametrize(
    ("settings", "pooled"),
    [
        ([], True),  # two variants: their studies side by side
        (ONE_STUDY, False),  # one study, one trial at a time: it trains here
        ([*ONE_STUDY, "search.parallel_trials=2"], True),
    ],
)
def test_studies_use_a_pool_where_several_runs_go_at_once(
    settings: list[str], pooled: bool
) -> None:
    assert backends.studies_use_a_pool(load_experiment(SMOKE, settings=settings)) == pooled


def test_the_server_starts_early_only_where_runs_train_here_in_a_pool(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    started: list[bool] = []
    monkeypatch.setattr(backends, "start_server", lambda ctx, imports, wait: started.append(wait))
    monkeypatch.setattr(backends.os, "cpu_count", lambda: 2)
    trained = load_experiment(SMOKE)
    backends.start_trainer_early(trained, None)
    assert started == [False]  # spawned, not waited for
    backends.start_trainer_early(trained, 1)  # one worker: runs train in this process
    backends.start_trainer_early(load_experiment(SMOKE, settings=["runtime.workers=1"]), None)
    backends.start_trainer_early(trained, None, pooled=False)
    backends.start_trainer_early(load_experiment(SMOKE, "simulate"), None)  # nothing trains
    backends.start_trainer_early(load_experiment(SMOKE, launcher="slurm"), None)  # elsewhere
    assert started == [False]
