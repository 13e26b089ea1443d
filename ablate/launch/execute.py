"""Running RunSpecs: skip finished ones, run the rest in a process pool, show live progress.

The executor knows nothing about norms or models: it checks the store for finished runs, picks a
worker count for the machine (dividing torch threads among workers), and hands each pending
spec to :func:`obtain` — the one claim / train / reuse path of every run of every stage,
search trials and max-LR probes included — in this process when there is one worker and in a
``spawn`` process pool otherwise (:func:`worker_pool`, also the studies' pool). Workers
report steps through a queue; the main process draws them with rich (one line per active run
and an overall bar with an ETA).

Ctrl-C at any moment ends ``ablate`` within seconds and leaves no process behind: workers start
with SIGINT blocked and ignore it except while they run a job; the ``ablate`` process then
stops them (:func:`stop_workers`: nothing new starts, running runs are stored as interrupted,
a worker that does not finish within :data:`INTERRUPT_GRACE_S` is killed).
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue as queue_module
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from ablate.core import folders, store
from ablate.core.folders import ExperimentFolder, RunFolder
from ablate.core.plan import RunSpec

T = TypeVar("T")
ProgressFn = Callable[[int, float], None]


@dataclass(frozen=True)
class Resources:
    """How many runs go at once and how many torch threads each one gets."""

    workers: int
    threads: int


def choose_resources(
    pending: int,
    workers: int | None = None,
    threads: int | None = None,
    cores: int | None = None,
    gpus: int = 0,
) -> Resources:
    """Default: one worker per GPU when runs use GPUs, else one per core (at most one per
    pending run); the cores are shared among the workers."""
    cores = cores or os.cpu_count() or 1
    n = workers or max(1, min(pending, gpus or cores))
    return Resources(workers=n, threads=threads or max(1, cores // n))


def gpu_count(accelerator: str) -> int:
    """GPUs the runs will use: CUDA devices for ``cuda`` / ``auto``, none for ``cpu``."""
    if accelerator == "cpu":
        return 0
    import torch

    return torch.cuda.device_count()


def run_folder_of(spec: RunSpec, root: Path) -> RunFolder:
    """The folder a spec's results live in."""
    return store.run_folder(root, spec.experiment, spec.run_id)


def split_done(specs: list[RunSpec], root: Path) -> tuple[list[dict], list[RunSpec]]:
    """(summaries of runs already done, specs still to run); specs with equal ids are one run."""
    done: list[dict] = []
    pending: list[RunSpec] = []
    for spec in {s.run_id: s for s in specs}.values():
        summary = run_folder_of(spec, root).read_summary()
        if summary is None:
            pending.append(spec)
        else:
            done.append(summary)
    return done, pending


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
        """Add a line for a run that has begun."""
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
    return f"{head}: {status}{extra}, {val_text}, {summary['wall_time_s']:.1f}s"


INTERRUPT_GRACE_S = 5.0  # after Ctrl-C, how long workers may take to store their runs


@contextmanager
def sigint_deferred(reraise: bool = True) -> Iterator[None]:
    """Hold Ctrl-C off the enclosed code (spawning processes, stopping them): SIGINT is blocked
    in this thread, so processes started here begin with it blocked (their start-up is never
    cut by a ``KeyboardInterrupt``), and one that arrives is raised afterwards (``reraise``) or
    dropped. Off the main thread, where signals cannot be handled, it changes nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = signal.signal(signal.SIGINT, lambda signum, frame: caught.append(signum))
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)  # a pending SIGINT lands in ``caught``
        signal.signal(signal.SIGINT, previous)
    if caught and reraise and callable(previous):
        previous(signal.SIGINT, None)  # Python's default handler raises KeyboardInterrupt


@dataclass
class _WorkerState:
    """What a pool worker got from the ``ablate`` process that started it."""

    stop: Any = None  # a multiprocessing Event, set once Ctrl-C stops the experiment
    messages: Any = None  # a multiprocessing Queue the progress board reads, or None


_WORKER = _WorkerState()


def _init_worker(threads: int, stop: Any, messages: Any) -> None:
    """A pool worker's set-up. It started with SIGINT blocked (:func:`sigint_deferred`); now it
    ignores SIGINT (which drops one that came during start-up) except while it runs a job
    (:func:`_in_worker`), and dies with the ``ablate`` process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    torch.set_num_threads(threads)
    die_with_parent()
    if messages is not None:
        messages.cancel_join_thread()  # exiting never waits on progress nobody reads any more
    _WORKER.stop, _WORKER.messages = stop, messages


def _interrupt_once(signum: int, frame: object) -> None:
    """A worker's first Ctrl-C during a job: stop the experiment and interrupt the job; further
    ones are ignored while the job stores its interrupted run."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER.stop.set()
    raise KeyboardInterrupt


def _in_worker(job: Callable[..., T], *args: Any) -> T | None:
    """Run ``job(*args)`` in a pool worker, interruptible by Ctrl-C; None once the experiment
    was stopped (nothing new starts after Ctrl-C)."""
    signal.signal(signal.SIGINT, _interrupt_once)
    try:
        return None if _WORKER.stop.is_set() else job(*args)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Linux: have the kernel kill this worker when the ``ablate`` process that started it
    dies (SIGKILL, OOM), so no orphan keeps training; its run is redone on the next run."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


POLL_S = 1.0  # how often a process waiting for another's run looks again


def obtain(
    spec: RunSpec,
    root: Path,
    progress: ProgressFn | None = None,
    stoppers: Sequence[Any] = (),
    take_over: bool = False,
    wait: bool = False,
    say: Callable[[str], None] = print,
) -> dict[str, Any]:
    """The stored summary of ``spec`` if it is done, else train it here and store it: the one
    claim / train / reuse path of every run of every stage (main, sweep, tuned, search trial,
    max-LR probe, convert).

    A run that another live process is training, or has finished since the caller planned it,
    raises :class:`ablate.core.store.RunClaimed` (the executor reports it as skipped), or with
    ``wait`` is waited for and then reused; ``take_over`` claims it whoever holds it (a retried
    search trial whose worker died).
    """
    from ablate.training.run import (
        execute_run,  # Lightning's import costs seconds: only when training
    )

    announced = False
    while (summary := run_folder_of(spec, root).read_summary()) is None:
        try:
            return execute_run(spec, root, progress, stoppers, take_over)
        except store.RunClaimed as claimed:
            if not wait:
                raise
            if not announced:
                say(f"waiting: {claimed}")
                announced = True
            time.sleep(POLL_S)
    if not wait:
        raise store.RunClaimed(f"run {spec.run_id} was finished meanwhile by another process")
    return summary


def _worker_run(spec_json: dict[str, Any], root: str) -> dict[str, Any] | None:
    spec = RunSpec.from_json(spec_json)
    messages = _WORKER.messages
    messages.put(("start", spec.run_id, 0, 0.0))

    def report(step: int, loss: float) -> None:
        try:
            messages.put(("step", spec.run_id, step, loss))
        except (OSError, ValueError):  # the display is gone (Ctrl-C); training goes on
            pass

    return obtain(spec, Path(root), progress=report)


@contextmanager
def _torch_threads(threads: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _run_serial(specs: list[RunSpec], root: Path, threads: int, board: ProgressBoard) -> list[dict]:
    summaries = []
    with _torch_threads(threads):
        for spec in specs:
            board.start(spec)
            try:
                summary = obtain(
                    spec,
                    root,
                    progress=lambda step, loss, rid=spec.run_id: board.update(rid, step, loss),
                )
            except KeyboardInterrupt:
                board.finish(spec, None, "interrupted")
                raise
            except store.RunClaimed as exc:
                board.finish(spec, None, f"skipped: {exc}")
                continue
            except Exception as exc:  # as in the pool: report it, go on with the other runs
                board.finish(spec, None, f"failed: {exc!r}")
                continue
            board.finish(spec, summary)
            summaries.append(summary)
    return summaries


Message = tuple[str, str, int, float]  # (kind, run id or text, step, loss) from a worker


def _drain(messages: Any, handle: Callable[[Message], None], timeout: float) -> None:
    """Hand every message waiting in the queue (waiting ``timeout`` s for the first) to
    ``handle``."""
    try:
        message = messages.get(timeout=timeout)
    except queue_module.Empty:
        return
    while True:
        handle(message)
        try:
            message = messages.get_nowait()
        except queue_module.Empty:
            return


def worker_say(text: str) -> None:
    """Print a job's line: from a pool worker through the queue to the ``ablate`` process's
    console (so that its live display stays whole), else directly."""
    if _WORKER.messages is not None:
        _WORKER.messages.put(("say", text, 0, 0.0))
    else:
        print(text, flush=True)


@contextmanager
def worker_pool(res: Resources, messages: Any = None) -> Iterator[ProcessPoolExecutor]:
    """The executor's pool: ``res.workers`` ``spawn`` processes with ``res.threads`` torch
    threads each, killed by the kernel when the ``ablate`` process dies. Submit jobs as
    ``pool.submit(_in_worker, job, *args)`` inside :func:`sigint_deferred` (workers are spawned
    on submit). On Ctrl-C (or any error) the workers are stopped (:func:`stop_workers`) before
    the exception goes on."""
    ctx = mp.get_context("spawn")
    stop = ctx.Event()
    pool = ProcessPoolExecutor(
        res.workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(res.threads, stop, messages),
    )
    try:
        yield pool
    except BaseException:
        stop_workers(pool, stop)
        raise
    pool.shutdown(wait=True)


def stop_workers(pool: ProcessPoolExecutor, stop: Any, grace_s: float = INTERRUPT_GRACE_S) -> None:
    """Stop a pool promptly: nothing new starts, running jobs get SIGINT (a worker's run is
    stored as interrupted), and a worker still alive after ``grace_s`` is killed. A second
    Ctrl-C meanwhile is ignored: this takes at most ``grace_s`` and a little more."""
    with sigint_deferred(reraise=False):
        stop.set()
        workers = mp.active_children()  # this process's only children: the pool's workers
        for worker in workers:
            try:
                os.kill(worker.pid, signal.SIGINT)  # a terminal's Ctrl-C may not have reached it
            except (ProcessLookupError, TypeError):
                pass
        pool.shutdown(wait=False, cancel_futures=True)
        deadline = time.monotonic() + grace_s
        for worker in workers:
            worker.join(max(0.0, deadline - time.monotonic()))
        for worker in workers:
            if worker.is_alive():
                worker.kill()
                worker.join(1.0)
        pool.shutdown(wait=True)


def run_parallel(
    job: Callable[..., T],
    jobs: list[tuple[Any, ...]],
    res: Resources,
    say: Callable[[str], None] = print,
) -> list[T]:
    """``job(*args)`` for every args of ``jobs``, ``res.workers`` at a time in the executor's
    pool (in this process when there is one worker or one job); results in order; the lines
    the jobs print with :func:`worker_say` go to ``say``. The studies run this way, their
    trials' runs going through :func:`obtain`."""
    if res.workers <= 1 or len(jobs) <= 1:
        with _torch_threads(res.threads):
            return [job(*args) for args in jobs]
    messages = mp.get_context("spawn").Queue()
    with worker_pool(res, messages) as pool:
        with sigint_deferred():
            futures = [pool.submit(_in_worker, job, *args) for args in jobs]

        def print_line(message: Message) -> None:  # a job's line (:func:`worker_say`)
            say(message[1])

        pending = set(futures)
        while pending:
            _drain(messages, print_line, timeout=0.2)
            _, pending = wait(pending, timeout=0)
        _drain(messages, print_line, timeout=0)
        return [future.result() for future in futures]


def _run_pool(specs: list[RunSpec], root: Path, res: Resources, board: ProgressBoard) -> list[dict]:
    summaries: list[dict] = []
    messages = mp.get_context("spawn").Queue()
    with worker_pool(res, messages) as pool:
        with sigint_deferred():
            futures: dict[Future, RunSpec] = {
                pool.submit(_in_worker, _worker_run, s.to_json(), str(root)): s for s in specs
            }
        pending = set(futures)
        while pending:
            _drain(messages, board.handle, timeout=0.2)
            finished, pending = wait(pending, timeout=0, return_when=FIRST_COMPLETED)
            for future in finished:
                _drain(messages, board.handle, timeout=0)
                spec = futures[future]
                error = future.exception()
                if isinstance(error, store.RunClaimed):
                    board.finish(spec, None, f"skipped: {error}")
                elif isinstance(error, KeyboardInterrupt):  # Ctrl-C reached the worker first
                    board.finish(spec, None, "interrupted")
                    raise KeyboardInterrupt
                elif error is not None:
                    board.finish(spec, None, f"failed: {error!r}")
                elif future.result() is not None:
                    summaries.append(future.result())
                    board.finish(spec, future.result())
    return summaries


def ready_conversions(
    specs: list[RunSpec], exp_dir: Path
) -> tuple[list[RunSpec], list[tuple[RunSpec, str]]]:
    """Split convert runs into those whose source finished with stored weights, and the rest.

    The rest come with the reason, e.g. ``source run 1a2b... is diverged``.
    """
    ready, waiting = [], []
    for spec in specs:
        problem = store.weights_missing(exp_dir / str(spec.init_from))
        if problem is None:
            ready.append(spec)
        else:
            waiting.append((spec, f"source run {spec.init_from} {problem}"))
    return ready, waiting


def execute(
    specs: list[RunSpec],
    root: Path,
    workers: int | None = None,
    threads: int | None = None,
    console: Console | None = None,
) -> list[dict[str, Any]]:
    """Run every spec that is not already done; return all summaries (stored and new)."""
    console = console or Console(stderr=True)
    done, pending = split_done(specs, root)
    if done:
        console.print(
            f"{len(done)} of {len(done) + len(pending)} runs already done in {root}: skipped",
            markup=False,
            highlight=False,
        )
    summaries = done
    if not pending:
        return summaries
    gpus = gpu_count(pending[0].config.runtime.accelerator)
    res = choose_resources(len(pending), workers, threads, gpus=gpus)
    console.print(
        f"running {len(pending)} runs with {res.workers} worker(s) x {res.threads} thread(s)"
    )
    with ProgressBoard(console, pending) as board:
        if res.workers == 1:
            summaries += _run_serial(pending, root, res.threads, board)
        else:
            summaries += _run_pool(pending, root, res, board)
    return summaries
