"""The callbacks that end a run early or measure it: divergence (the stability criterion's rule),
pruning, peak memory."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pytest
import torch
from conftest import tiny_config

from ablate.core.config import StabilityConfig
from ablate.core.folders import RunFolder
from ablate.core.plan import RunSpec
from ablate.core.stability import StopKind
from ablate.launch.search import pruning_watch
from ablate.training.callbacks import DivergenceMonitor, EvalStop
from ablate.training.run import execute_run


def _monitor(warmup: int, **criterion: object) -> DivergenceMonitor:
    """A monitor with an explicit threshold (default 5.0) and a window of 1 unless given."""
    settings = {"threshold": 5.0, "window": 1, **criterion}
    return DivergenceMonitor(StabilityConfig(**settings), math.log(256), warmup)


def test_non_finite_loss_diverges_at_any_step() -> None:
    monitor = _monitor(10)
    assert monitor.check(2, math.nan).kind is StopKind.NON_FINITE
    assert monitor.check(3, math.inf).step == 3


def test_threshold_applies_only_after_warmup() -> None:
    monitor = _monitor(10)
    assert monitor.check(10, 9.0) is None
    found = monitor.check(11, 9.0)
    assert found is not None and (found.step, found.kind) == (11, StopKind.ABOVE_THRESHOLD)
    assert (found.loss, found.threshold, found.after_warmup) == (9.0, 5.0, True)
    assert monitor.check(50, 4.9) is None


def test_threshold_from_the_first_step_when_after_warmup_is_off() -> None:
    monitor = _monitor(10, after_warmup=False)
    assert monitor.check(1, 6.0) is not None


def test_default_threshold_is_the_start_loss_plus_the_margin() -> None:
    l0 = math.log(256)
    above = DivergenceMonitor(StabilityConfig(window=1), l0, warmup_steps=0)
    assert above.check(1, 5.558) is None  # an untrained model a little above ln(256)
    assert above.threshold == pytest.approx(5.558 + 0.5)
    assert above.check(2, 6.0) is None and above.check(3, 6.1).step == 3
    below = DivergenceMonitor(StabilityConfig(window=1, divergence_margin=0.2), l0, 0)
    below.check(1, 5.0)  # a first loss under ln(V): the threshold starts from ln(V)
    assert below.threshold == pytest.approx(l0 + 0.2)


def test_windowed_threshold_ignores_a_one_batch_spike_but_not_a_blow_up() -> None:
    monitor = _monitor(2, window=5)
    for step, loss in enumerate([5.5, 4.0, 3.5, 3.4, 3.3], start=1):
        assert monitor.check(step, loss) is None
    assert monitor.check(6, 10.0) is None  # mean of the last 5: (3.5+3.4+3.3+10+...)/5 < 5
    assert monitor.check(7, 3.2) is None
    blow_up = _monitor(2, window=5)
    losses = [5.5, 4.0, 3.5, 6.0, 8.0]  # the mean of these five is 5.4
    stops = [blow_up.check(step, loss) for step, loss in enumerate(losses, start=1)]
    assert stops[:4] == [None] * 4
    assert stops[4] is not None and (stops[4].step, stops[4].steps) == (5, 5)
    assert stops[4].loss == pytest.approx(5.4) and stops[4].kind is StopKind.ABOVE_THRESHOLD


def test_peak_memory_is_per_run_on_cpu() -> None:
    from ablate.training.memory import read_peak_rss_mb, reset_peak_rss

    block = torch.ones(64 * 2**20, dtype=torch.float32)  # 256 MiB, touched
    high = read_peak_rss_mb()
    del block
    assert reset_peak_rss()
    low = read_peak_rss_mb()
    assert high is not None and low is not None and high - low > 200


@pytest.mark.trains
def test_pruner_stops_a_poor_trial_as_a_stored_result(tmp_path: Path) -> None:
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    good = study.ask()
    for step in (10, 20):
        good.report(1.0, step)  # a trial far better than a 20-step tiny model can do
    study.tell(good, 1.0)
    trial = study.ask()
    spec = RunSpec("tiny", "layernorm", 0, tiny_config(), group="search")
    watch = pruning_watch(trial, "in-memory", spec.config.steps())
    summary = execute_run(spec, tmp_path, stoppers=[EvalStop(watch)])
    assert summary.status == "pruned" and summary.steps == 10
    assert summary.stopped_reason == "pruned by Optuna at step 10"
    assert summary.stable is None and summary.diverged_step is None
    assert RunFolder(tmp_path / "tiny" / spec.run_id).is_done()  # a result: reused, not retrained
