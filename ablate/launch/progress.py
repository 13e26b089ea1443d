"""What the executor shows while runs train: a live line per run, an overall bar, one line per
finished run in a log; and a bar over a stage's studies (search trials, max-LR probes).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ablate.core import folders
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.launch.workers import Message


def _progress(console: Console, *extra: TextColumn, transient: bool) -> Progress:
    """Rich progress lines: description, bar, done / total, ``extra`` columns, elapsed, eta."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        *extra,
        TimeElapsedColumn(),
        TextColumn("eta"),
        TimeRemainingColumn(),
        console=console,
        transient=transient,
    )


class ProgressBoard:
    """Rich progress: an overall bar over all steps, and one line per active run."""

    def __init__(self, console: Console, specs: Sequence[RunSpec]) -> None:
        self.console = console
        self.specs = {spec.run_id: spec for spec in specs}
        total_steps = sum(spec.config.steps() for spec in specs)
        self.progress = _progress(console, TextColumn("{task.fields[loss]}"), transient=False)
        self.overall = self.progress.add_task(f"{len(specs)} runs", total=total_steps, loss="")
        self.tasks: dict[str, Any] = {}
        self.steps: dict[str, int] = {}

    def __enter__(self) -> ProgressBoard:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start(self, spec: RunSpec) -> None:
        """Add a line for a run that has begun (once: a second start of it changes nothing)."""
        if spec.run_id in self.tasks:
            return
        label = f"  {run_label(spec)}"
        self.tasks[spec.run_id] = self.progress.add_task(label, total=spec.config.steps(), loss="")
        self.steps[spec.run_id] = 0
        if not self.console.is_terminal:  # no live display in a log file: say what started
            self.console.print(f"started {label.strip()} [{spec.run_id}]", markup=False)

    def handle(self, message: Message) -> None:
        """A worker's message: a run started, or reached a step."""
        kind, run_id, step, loss = message
        if kind == "start":
            self.start(self.specs[run_id])
        else:
            self.update(run_id, step, loss)

    def update(self, run_id: str, step: int, loss: float) -> None:
        """Move a run's line (and the overall bar) to ``step``."""
        if run_id not in self.tasks:
            return
        delta = step - self.steps[run_id]
        self.steps[run_id] = step
        self.progress.update(self.tasks[run_id], completed=step, loss=f"loss {loss:.3f}")
        self.progress.advance(self.overall, delta)

    def finish(
        self, spec: RunSpec, summary: dict[str, Any] | None, error: str | None = None
    ) -> None:
        """Drop a run's line and print its outcome (``error`` says why there is no summary)."""
        task = self.tasks.pop(spec.run_id, None)
        if task is not None:
            self.progress.remove_task(task)
        left = spec.config.steps() - self.steps.pop(spec.run_id, 0)
        self.progress.advance(self.overall, left)
        self.console.print(
            outcome_line(spec, summary, error), markup=False, highlight=False, soft_wrap=True
        )


class StudyProgress:
    """A bar over the runs a stage's studies train (search trials, max-LR probes), counted from
    the store as their summaries appear (in this process or in workers alike); the studies'
    lines print above it. The max-LR total is an upper bound, as the bracket may close early."""

    def __init__(self, console: Console, exp_dir: Path, group: str, total: int) -> None:
        self.console, self.exp_dir, self.group = console, exp_dir, group
        self.seen = ExperimentFolder(exp_dir).summaries()
        self.progress = _progress(console, transient=True)
        self.task = self.progress.add_task(f"{group} runs (at most {total})", total=total)
        self.done = threading.Event()
        self.watcher = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> StudyProgress:
        self.progress.start()
        self.watcher.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.watcher.join()
        self.progress.stop()

    def _watch(self) -> None:
        while not self.done.wait(0.5):
            self.progress.advance(self.task, self.new_runs())

    def new_runs(self) -> int:
        """How many runs of the group were stored since the last look."""
        count = 0
        for path in ExperimentFolder(self.exp_dir).summaries() - self.seen:
            summary = folders.read_json(path)
            if summary is not None:
                self.seen.add(path)
                count += summary.get("group") == self.group
        return count

    def say(self, text: str) -> None:
        """Print one plain line above the bar."""
        self.console.print(text, markup=False, highlight=False, soft_wrap=True)


def run_label(spec: RunSpec) -> str:
    """``variant seed=S``, with the group and its LR (and warmup) beyond the main runs, e.g.
    ``rmsnorm seed=0 sweep lr=0.003``."""
    label = f"{spec.variant} seed={spec.seed}"
    if spec.group == "main":
        return label
    train = spec.config.train
    return f"{label} {spec.group} lr={train.lr:.3g} warmup={train.warmup_steps}"


def outcome_line(spec: RunSpec, summary: dict[str, Any] | None, error: str | None) -> str:
    """One line saying how a run ended."""
    head = f"{run_label(spec)} [{spec.run_id}]"
    if summary is None:
        return f"{head}: {error}"
    status = summary["status"]
    val = summary.get("final_val_loss")
    val_text = f"val loss {val:.4f}" if val is not None else "no val loss"
    extra = (
        f" at step {summary['diverged_step']} ({summary['diverged_reason']})"
        if status == "diverged"
        else ""
    )
    if status == "failed":
        extra = f": {summary.get('error')}"
    if status == "finished" and summary.get("stable") is False:  # trained, learned nothing
        status, extra = "collapsed", f" ({summary.get('unstable_reason')})"
    return f"{head}: {status}{extra}, {val_text}, {summary['wall_time_s']:.1f}s"
