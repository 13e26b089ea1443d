"""Running RunSpecs: skip finished ones, run the rest in a process pool, show live progress.

The executor knows nothing about norms or models: it checks the store for finished runs, picks a
worker count for the machine (dividing torch threads among workers), and hands each pending
spec to :func:`obtain` — the one claim / train / reuse path of every run of every stage,
search trials and max-LR probes included — in this process when there is one worker and in a
``spawn`` process pool otherwise (:func:`process_pool`, also the studies' pool). Workers
report steps through a queue; the main process draws them with rich (one line per active run
and an overall bar with an ETA).
"""

from __future__ import annotations

import ctypes
import multiprocessing as mp
import os
import queue as queue_module
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing.managers import SyncManager
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

from ablate import store
from ablate.plan import RunSpec

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


def run_dir_of(spec: RunSpec, root: Path) -> Path:
    """The folder a spec's results live in."""
    return store.experiment_dir(root, spec.experiment) / spec.run_id


def split_done(specs: list[RunSpec], root: Path) -> tuple[list[dict], list[RunSpec]]:
    """(summaries of runs already done, specs still to run); specs with equal ids are one run."""
    done: list[dict] = []
    pending: list[RunSpec] = []
    for spec in {s.run_id: s for s in specs}.values():
        summary = store.read_summary(run_dir_of(spec, root))
        if summary is None:
            pending.append(spec)
        else:
            done.append(summary)
    return done, pending


class ProgressBoard:
    """Rich progress: an overall bar over all steps, and one line per active run."""

    def __init__(self, console: Console, total_steps: int, n_runs: int) -> None:
        self.console = console
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[loss]}"),
            TimeElapsedColumn(),
            TextColumn("eta"),
            TimeRemainingColumn(),
            console=console,
            transient=False,
        )
        self.overall = self.progress.add_task(f"{n_runs} runs", total=total_steps, loss="")
        self.tasks: dict[str, Any] = {}
        self.steps: dict[str, int] = {}

    def __enter__(self) -> ProgressBoard:
        self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.stop()

    def start(self, spec: RunSpec) -> None:
        """Add a line for a run that has begun."""
        label = f"  {spec.variant} seed={spec.seed}"
        self.tasks[spec.run_id] = self.progress.add_task(label, total=spec.config.steps(), loss="")
        self.steps[spec.run_id] = 0
        if not self.console.is_terminal:  # no live display in a log file: say what started
            self.console.print(f"started {label.strip()} [{spec.run_id}]", markup=False)

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


def outcome_line(spec: RunSpec, summary: dict[str, Any] | None, error: str | None) -> str:
    """One line saying how a run ended."""
    head = f"{spec.variant} seed={spec.seed} [{spec.run_id}]"
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


def _init_manager() -> None:
    """The queue's server process: deaf to Ctrl-C (the workers report through it while they
    store their interrupted runs), but gone with the ``ablate`` process."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent()


def _init_worker(threads: int) -> None:
    torch.set_num_threads(threads)
    die_with_parent()


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
    raises :class:`ablate.store.RunClaimed` (the executor reports it as skipped), or with
    ``wait`` is waited for and then reused; ``take_over`` claims it whoever holds it (a retried
    search trial whose worker died).
    """
    from ablate.run import execute_run  # Lightning's import costs seconds: only when training

    announced = False
    while (summary := store.read_summary(run_dir_of(spec, root))) is None:
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


def _worker_run(
    spec_json: dict[str, Any], root: str, messages: Any, stop: Any
) -> dict[str, Any] | None:
    if stop.is_set():  # Ctrl-C already stopped the experiment: start nothing new
        return None
    spec = RunSpec.from_json(spec_json)
    messages.put(("start", spec.run_id, 0, 0.0))

    def report(step: int, loss: float) -> None:
        try:
            messages.put(("step", spec.run_id, step, loss))
        except (OSError, EOFError):  # the display is gone (Ctrl-C); training goes on
            pass

    try:
        return obtain(spec, Path(root), progress=report)
    except KeyboardInterrupt:
        stop.set()
        raise


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


def _drain(messages: Any, board: ProgressBoard, by_id: dict[str, RunSpec], timeout: float) -> None:
    try:
        kind, run_id, step, loss = messages.get(timeout=timeout)
    except queue_module.Empty:
        return
    while True:
        if kind == "start":
            board.start(by_id[run_id])
        else:
            board.update(run_id, step, loss)
        try:
            kind, run_id, step, loss = messages.get_nowait()
        except queue_module.Empty:
            return


def process_pool(res: Resources) -> ProcessPoolExecutor:
    """The executor's pool: ``spawn`` processes with ``res.threads`` torch threads each, killed
    by the kernel when the ``ablate`` process dies."""
    return ProcessPoolExecutor(
        res.workers,
        mp_context=mp.get_context("spawn"),
        initializer=_init_worker,
        initargs=(res.threads,),
    )


def run_parallel(job: Callable[..., T], jobs: list[tuple[Any, ...]], res: Resources) -> list[T]:
    """``job(*args)`` for every args of ``jobs``, ``res.workers`` at a time in the executor's
    pool (in this process when there is one worker or one job); results in order. The studies
    run this way, their trials' runs going through :func:`obtain`."""
    if res.workers <= 1 or len(jobs) <= 1:
        with _torch_threads(res.threads):
            return [job(*args) for args in jobs]
    with process_pool(res) as pool:
        futures = [pool.submit(job, *args) for args in jobs]
        return [future.result() for future in futures]


def _run_pool(specs: list[RunSpec], root: Path, res: Resources, board: ProgressBoard) -> list[dict]:
    ctx = mp.get_context("spawn")
    summaries: list[dict] = []
    by_id = {s.run_id: s for s in specs}
    manager = SyncManager(ctx=ctx)
    manager.start(_init_manager)  # Ctrl-C must not kill the queue the workers report through
    with manager:
        messages, stop = manager.Queue(), manager.Event()
        with process_pool(res) as pool:
            futures: dict[Future, RunSpec] = {
                pool.submit(_worker_run, s.to_json(), str(root), messages, stop): s for s in specs
            }
            try:
                pending = set(futures)
                while pending:
                    _drain(messages, board, by_id, timeout=0.2)
                    finished, pending = wait(pending, timeout=0, return_when=FIRST_COMPLETED)
                    for future in finished:
                        _drain(messages, board, by_id, timeout=0)
                        spec = futures[future]
                        error = future.exception()
                        if isinstance(error, store.RunClaimed):
                            board.finish(spec, None, f"skipped: {error}")
                        elif error is not None:
                            board.finish(spec, None, f"failed: {error!r}")
                        elif future.result() is not None:
                            summaries.append(future.result())
                            board.finish(spec, future.result())
            except KeyboardInterrupt:
                # The workers got Ctrl-C too: each stores its run as interrupted and sets
                # ``stop`` so that no queued run starts. (This process's proxies may be
                # mid-call, hence unusable, so it leaves ``stop`` to them.)
                pool.shutdown(wait=True, cancel_futures=True)
                raise
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
    total = sum(s.config.steps() for s in pending)
    with ProgressBoard(console, total, len(pending)) as board:
        if res.workers == 1:
            summaries += _run_serial(pending, root, res.threads, board)
        else:
            summaries += _run_pool(pending, root, res, board)
    return summaries
