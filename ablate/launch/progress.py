"""What the executor shows while runs train: a live line per run, an overall bar, one line per
finished run in a log; and a bar over a stage's studies (search trials, max-LR probes).

Where the console is not a terminal (a log file, a cluster job, ``nohup``) no bar can redraw,
so both also print a progress line every :data:`LOG_EVERY_S` seconds: the stage, runs done of
its total, its share of steps and its remaining time at the pace so far (:class:`Heartbeat`),
and, while an experiment runs, the whole experiment's remaining time at most
(:class:`ExperimentPace`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ablate.core.folders import ExperimentFolder, RunFolder
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.launch.workers import Message

LOG_EVERY_S = 30.0  # seconds between progress lines where the console is not a terminal

StepsLeft = tuple[int, dict[tuple[str, str], int]]  # steps at most, steps per (variant, stage)


class ExperimentPace:
    """The whole experiment's remaining time, at most: the steps every stage may still train,
    each at its maximum (``count()``, run once, at the first line: it reads the store), at the
    pace of the steps the runs stored since the experiment began trained. Read from the
    store, so runs in workers and Slurm jobs count alike."""

    def __init__(self, folder: ExperimentFolder, count: Callable[[], StepsLeft]) -> None:
        self.folder, self.count = folder, count
        self.before = folder.summarized() if folder.path.is_dir() else set()
        self.started_at = time.monotonic()
        self.steps_left: int | None = None
        self.steps_of: dict[tuple[str, str], int] = {}
        self.counted_from: set[RunFolder] = set()
        self.read: dict[RunFolder, tuple[str, str, int]] = {}  # run: variant, stage, steps

    def text(self) -> str:
        """``experiment: S steps left at most, eta XmYYs at most``."""
        if self.steps_left is None:
            try:
                self.steps_left, self.steps_of = self.count()
            except (OSError, ValueError) as exc:  # a store it cannot count: say so, go on
                return f"experiment: steps left not counted ({type(exc).__name__})"
            self.counted_from = self.folder.summarized()
        now = self.folder.summarized()
        for run in now - self.before - set(self.read):
            record = run.read_any_record()
            if record is not None:
                self.read[run] = (record.variant, record.group, int(record.steps or 0))
        trained = sum(steps for _, _, steps in self.read.values())
        done = sum(
            self.steps_of.get((variant, group), steps)
            for run, (variant, group, steps) in self.read.items()
            if run not in self.counted_from
        )
        left = max(self.steps_left - done, 0)
        elapsed = time.monotonic() - self.started_at
        share = trained / (trained + left) if trained + left else 1.0
        eta = remaining_text(elapsed, share) + (" at most" if trained else "")
        return f"experiment: {left:,} steps left at most, {eta}"


PACE: list[ExperimentPace] = []  # the experiment now running in this process, if any


@contextmanager
def pacing(pace: ExperimentPace) -> Iterator[None]:
    """Add ``pace``'s line to every progress line printed while the block runs."""
    PACE.append(pace)
    try:
        yield
    finally:
        PACE.remove(pace)


class Heartbeat:
    """Print ``line()`` every ``every`` seconds from a thread, where ``console`` is not a
    terminal (a live bar shows the same on one); nothing on a terminal."""

    def __init__(self, console: Console, line: Callable[[], str], every: float = LOG_EVERY_S):
        self.console, self.line, self.every = console, line, every
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._beat, daemon=True)

    def __enter__(self) -> Heartbeat:
        if not self.console.is_terminal:
            self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        if self.thread.is_alive():
            self.thread.join()

    def _beat(self) -> None:
        while not self.done.wait(self.every):
            line = "; ".join([self.line(), *(pace.text() for pace in PACE)])
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)


def remaining_text(elapsed_s: float, share: float) -> str:
    """The time left at the pace so far, once anything is done."""
    if share <= 0:
        return "eta unknown"
    left = elapsed_s * (1 - share) / share
    return f"eta {int(left // 60)}m{int(left % 60):02d}s"


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


class Standing(NamedTuple):
    """Where a :class:`ProgressBoard`'s runs stand: how many ended, of how many, how many
    train now, and the share of all their steps done."""

    finished: int
    total: int
    running: int
    share: float


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
        self.total_steps, self.finished, self.started_at = total_steps, 0, time.monotonic()
        self.stages = ", ".join(dict.fromkeys(spec.group for spec in specs))
        self.heartbeat = Heartbeat(console, self.progress_line)

    def __enter__(self) -> ProgressBoard:
        self.progress.start()
        self.heartbeat.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.heartbeat.__exit__(*exc)
        self.progress.stop()

    def standing(self) -> Standing:
        """Where the runs stand now."""
        task = self.progress.tasks[self.overall]
        share = task.completed / self.total_steps if self.total_steps else 1.0
        return Standing(self.finished, len(self.specs), len(self.tasks), share)

    def progress_line(self) -> str:
        """Where the runs stand, for a log: runs done of all, the steps' share, the time left."""
        now = self.standing()
        elapsed = time.monotonic() - self.started_at
        return (
            f"progress ({self.stages}): {now.finished} of {now.total} runs done, "
            f"{now.running} running, {now.share:.0%} of their steps, "
            f"{remaining_text(elapsed, now.share)}"
        )

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

    def finish(self, spec: RunSpec, record: RunRecord | None, error: str | None = None) -> None:
        """Drop a run's line and print its outcome (``error`` says why there is no record)."""
        task = self.tasks.pop(spec.run_id, None)
        self.finished += 1
        if task is not None:
            self.progress.remove_task(task)
        left = spec.config.steps() - self.steps.pop(spec.run_id, 0)
        self.progress.advance(self.overall, left)
        self.console.print(
            outcome_line(spec, record, error), markup=False, highlight=False, soft_wrap=True
        )


class StudyProgress:
    """A bar over the runs a stage's studies train (search trials, max-LR probes), counted from
    the store as their summaries appear (in this process or in workers alike); the studies'
    lines print above it. The max-LR total is an upper bound, as the bracket may close early."""

    def __init__(self, console: Console, folder: ExperimentFolder, group: str, total: int) -> None:
        self.console, self.folder, self.group = console, folder, group
        self.seen = folder.summarized()
        self.progress = _progress(console, transient=True)
        self.task = self.progress.add_task(f"{group} runs (at most {total})", total=total)
        self.total, self.started_at = total, time.monotonic()
        self.done = threading.Event()
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.heartbeat = Heartbeat(console, self.progress_line)

    def __enter__(self) -> StudyProgress:
        self.progress.start()
        self.watcher.start()
        self.heartbeat.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.heartbeat.__exit__(*exc)
        self.done.set()
        self.watcher.join()
        self.progress.stop()

    def progress_line(self) -> str:
        """Where the stage's studies stand, for a log (the total is an upper bound)."""
        done = int(self.progress.tasks[self.task].completed)
        share = done / self.total if self.total else 1.0
        elapsed = time.monotonic() - self.started_at
        return (
            f"progress ({self.group}): {done} runs stored of at most {self.total}, "
            f"{remaining_text(elapsed, share)} at most"
        )

    def _watch(self) -> None:
        while not self.done.wait(0.5):
            self.progress.advance(self.task, self.new_runs())

    def new_runs(self) -> int:
        """How many runs of the group were stored since the last look."""
        count = 0
        for run in self.folder.summarized() - self.seen:
            record = run.read_any_record()
            if record is not None:
                self.seen.add(run)
                count += record.group == self.group
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


class RunOutcome(NamedTuple):
    """How a run ended, as :func:`outcome_line` prints it: its status (a record's, or
    ``collapsed`` for a finished run that learned nothing), why (a divergence's or collapse's
    reason, a failure's error; None otherwise), the step it diverged at, its final val loss and
    its wall time."""

    status: str
    reason: str | None
    step: int | None
    val_loss: float | None
    wall_time_s: float


def run_outcome(record: RunRecord) -> RunOutcome:
    """The :class:`RunOutcome` of a stored run."""
    status, reason, step = record.status, None, None
    if status == "diverged":
        reason, step = record.diverged_reason, record.diverged_step
    if status == "failed":
        reason = record.error
    if status == "finished" and record.stable is False:  # trained, learned nothing
        status, reason = "collapsed", record.unstable_reason
    return RunOutcome(status, reason, step, record.final_val_loss, record.wall_time_s)


def outcome_text(outcome: RunOutcome) -> str:
    """``status[ why], val loss V, Ts``: a :class:`RunOutcome` in words."""
    extra = {
        "diverged": f" at step {outcome.step} ({outcome.reason})",
        "failed": f": {outcome.reason}",
        "collapsed": f" ({outcome.reason})",
    }.get(outcome.status, "")
    val = outcome.val_loss
    val_text = f"val loss {val:.4f}" if val is not None else "no val loss"
    return f"{outcome.status}{extra}, {val_text}, {outcome.wall_time_s:.1f}s"


def outcome_line(spec: RunSpec, record: RunRecord | None, error: str | None) -> str:
    """One line saying how a run ended."""
    head = f"{run_label(spec)} [{spec.run_id}]"
    if record is None:
        return f"{head}: {error}"
    return f"{head}: {outcome_text(run_outcome(record))}"
