"""The lines a run prints (a collapsed run is named collapsed, not finished) and the progress
lines of a log (the stage's, then the whole experiment's time left at most)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import tiny_config, write_experiment

from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.launch.progress import RunOutcome, outcome_line, run_outcome


def _summary(**fields: object) -> RunRecord:
    """A finished run's record with these fields (the others None)."""
    return RunRecord.from_json(
        {"status": "finished", "stable": True, "final_val_loss": 1.75, "wall_time_s": 3.0, **fields}
    )


def test_a_run_that_learned_is_finished() -> None:
    spec = RunSpec("tiny", "dyt", 0, tiny_config())
    line = outcome_line(spec, _summary(), None)
    assert line == f"dyt seed=0 [{spec.run_id}]: finished, val loss 1.7500, 3.0s"


def test_a_collapsed_run_is_printed_collapsed_with_its_reason() -> None:
    spec = RunSpec("tiny", "dyt", 0, tiny_config())
    reason = "collapsed: final val loss 3.2932 is within 0.05 of the unigram floor 3.2465"
    record = _summary(stable=False, unstable_reason=reason)
    assert run_outcome(record) == RunOutcome("collapsed", reason, None, 1.75, 3.0)
    # the wording is the point here: the line names it collapsed, with its reason
    line = outcome_line(spec, record, None)
    assert line == f"dyt seed=0 [{spec.run_id}]: collapsed ({reason}), val loss 1.7500, 3.0s"


def test_a_diverged_or_failed_run_carries_its_step_and_reason() -> None:
    diverged = _summary(status="diverged", diverged_step=7, diverged_reason="nan")
    assert run_outcome(diverged) == RunOutcome("diverged", "nan", 7, 1.75, 3.0)
    failed = _summary(status="failed", error="boom", final_val_loss=None)
    assert run_outcome(failed) == RunOutcome("failed", "boom", None, None, 3.0)


def test_a_log_gets_a_progress_line_every_interval_and_a_terminal_none() -> None:
    import io
    import time

    from rich.console import Console

    from ablate.launch.progress import Heartbeat, ProgressBoard, Standing, remaining_text

    log = io.StringIO()
    console = Console(file=log, force_terminal=False, width=200)
    specs = [RunSpec("e", "ln", seed, tiny_config()) for seed in range(3)]
    board = ProgressBoard(console, specs)
    board.heartbeat.every = 0.05
    with board:
        board.start(specs[0])
        half = specs[0].config.steps() // 2
        board.update(specs[0].run_id, half, 2.5)
        time.sleep(0.2)
        assert board.standing() == Standing(0, 3, 1, half / (3 * specs[0].config.steps()))
    lines = [line for line in log.getvalue().splitlines() if line.startswith("progress")]
    assert lines and lines[0].startswith("progress (main): 0 of 3 runs done, 1 running, 17% of")
    assert remaining_text(60.0, 0.25) == "eta 3m00s" and remaining_text(5.0, 0.0) == "eta unknown"
    terminal = io.StringIO()
    beat = Heartbeat(Console(file=terminal, force_terminal=True), lambda: "progress x", 0.01)
    with beat:
        time.sleep(0.05)
    assert beat.thread.ident is None and terminal.getvalue() == ""  # never beat, printed nothing


def test_the_experiments_line_counts_down_its_steps_at_the_pace_of_stored_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ablate.launch import progress

    def store(run: str, variant: str, group: str, steps: int) -> None:
        (tmp_path / run).mkdir()
        summary = {"variant": variant, "group": group, "steps": steps}
        (tmp_path / run / "summary.json").write_text(json.dumps(summary))

    store("old", "ln", "main", 100)  # stored before the experiment began: neither counts
    clock = iter([0.0, 50.0, 100.0])
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    steps_of = {("ln", "main"): 100, ("ln", "max_lr"): 40}
    pace = progress.ExperimentPace(ExperimentFolder(tmp_path), lambda: (400, steps_of))
    assert pace.text() == "experiment: 400 steps left at most, eta unknown"  # at 50 s
    store("a", "ln", "main", 100)
    store("b", "ln", "max_lr", 10)  # diverged at step 10: 40 planned steps are off the total
    # at 100 s: 110 steps trained, 260 left at most -> 100 s * 260 / 110
    assert pace.text() == "experiment: 260 steps left at most, eta 3m56s at most"


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")  # the progress lines are the point
def test_every_progress_line_of_an_experiment_ends_with_the_experiments(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    from rich.console import Console

    from ablate.launch import progress
    from ablate.launch.pipeline import run_experiment

    monkeypatch.setattr(progress.Heartbeat.__init__, "__defaults__", (0.05,))
    paced: list[str] = []  # every text the experiment's pace gave
    counted: list[int | None] = []  # the steps it had counted as left, each time
    text = progress.ExperimentPace.text

    def recorded(pace: progress.ExperimentPace) -> str:
        paced.append(text(pace))
        counted.append(pace.steps_left)
        return paced[-1]

    monkeypatch.setattr(progress.ExperimentPace, "text", recorded)
    path = write_experiment(tmp_path / "e.yaml")
    log = io.StringIO()
    console = Console(file=log, force_terminal=False, width=300)
    root = tmp_path / "results"
    run_experiment(path, root, tmp_path / "reports", workers=1, console=console)
    lines = [line for line in log.getvalue().splitlines() if line.startswith("progress")]
    assert not progress.PACE  # the experiment's line ends with it
    assert lines and all(any(line.endswith(f"; {p}") for p in paced) for line in lines)
    assert counted and None not in counted  # the store was counted, each line its steps


def test_a_store_the_pace_cannot_count_is_said_not_raised(tmp_path: Path) -> None:
    from ablate.launch.progress import ExperimentPace

    def broken() -> tuple[int, dict]:
        raise ValueError("a config that no longer loads")

    assert ExperimentPace(ExperimentFolder(tmp_path), broken).text() == (
        "experiment: steps left not counted (ValueError)"
    )
