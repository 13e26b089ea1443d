"""The executor seam: every run of every stage is obtained through an :class:`Executor` the
stage is given, and this module's :class:`LocalExecutor` is the one that trains here.

A stage (:mod:`ablate.launch.pipeline`, the studies) only decides which RunSpecs it needs and
hands them to its executor: ``obtain`` one (a search trial, a max-LR probe) or ``run`` many (an
A/B). The local executor checks the store for finished runs, picks a worker count for the
machine (:func:`ablate.launch.resources.local_resources`), and trains each pending spec through
:func:`obtain`, the claim / train / reuse path, in this process when there is one worker and in
the worker pool otherwise (:mod:`ablate.launch.workers`); workers report steps through a
queue and the ``ablate`` process draws them (:mod:`ablate.launch.progress`). Other backends (the
simulator, :mod:`ablate.launch.simulator`) implement the same protocol, with no stage changed.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, wait
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol

from rich.console import Console

from ablate.core import store
from ablate.core.early_stop import result_of
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.launch.devices import run_gpus
from ablate.launch.preflight import check_fit
from ablate.launch.progress import ProgressBoard
from ablate.launch.resources import Resources, local_resources
from ablate.launch.workers import (
    TRAINING_IMPORTS,
    drain,
    in_worker,
    pool_context,
    sigint_deferred,
    torch_threads,
    worker_message,
    worker_pool,
)

ProgressFn = Callable[[int, float], None]
EvalWatch = Callable[[int, float], bool]  # (step, val loss) after an evaluation -> stop the run?
SayFn = Callable[[str], None]


class Executor(Protocol):
    """What every stage is given to get its runs: the results root, one run on demand, many
    at once. Implementations: :class:`LocalExecutor` (trains here or in a local pool) and
    :class:`ablate.launch.simulator.SimulatedExecutor` (the known-truth simulator). An executor
    is pickled into the studies' worker processes, so it holds settings, not live handles."""

    root: Path
    # what a process that obtains runs through it imports first: the trainer where it trains
    # here (the pool's server imports it once for all workers), nothing where runs are drawn
    # or train elsewhere
    imports: ClassVar[tuple[str, ...]]

    def prepare(self) -> None:
        """Load what obtaining a run will need (before a study trial's heartbeat starts)."""

    def obtain(
        self,
        request: Request,
        wait: bool = False,
        say: SayFn = print,
        progress: ProgressFn | None = None,
    ) -> RunRecord:
        """The stored record of the request's run, or run it now and store it (see
        :func:`obtain`): with ``wait``, a run another process holds is waited for; ``progress``
        sees (step, train loss) as it trains, where the executor reports steps."""

    def run(self, specs: list[RunSpec]) -> list[RunRecord]:
        """Every spec not yet done; the records of all of them (stored and new)."""

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        """Each request as :meth:`obtain` (waiting for a run another process holds), all at
        once: a search's parallel trials; what each gave, its exception where it raised."""


@dataclass(frozen=True)
class Request:
    """One run a study asks for: its spec, the watcher of its evaluations (a trial's pruner)
    and whether it takes over a dead worker's claim."""

    spec: RunSpec
    watch: EvalWatch | None = None
    take_over: bool = False


Obtained = RunRecord | Exception  # what obtaining one request gave


def obtain_each(executor: Executor, requests: list[Request], say: SayFn) -> list[Obtained]:
    """Each request through ``executor.obtain``, one after another: ``obtain_all`` of an
    executor whose runs take no time here (the simulator)."""
    found: list[Obtained] = []
    for request in requests:
        try:
            found.append(executor.obtain(request, True, say))
        except Exception as exc:
            found.append(exc)
    return found


def split_done(specs: list[RunSpec], root: Path) -> tuple[list[RunRecord], list[RunSpec]]:
    """(records of runs already done, specs still to run); specs with equal ids are one run.
    A done run's claim left by a process killed before it released it is removed."""
    done: list[RunRecord] = []
    pending: list[RunSpec] = []
    for spec in {s.run_id: s for s in specs}.values():
        folder = ExperimentFolder.of(root, spec.experiment)
        record = result_of(folder.run(spec.run_id), spec)
        if record is None:
            pending.append(spec)
        else:
            store.drop_stale_claim(folder, spec.run_id)
            done.append(record)
    return done, pending


def say_done(console: Console, done: int, pending: int, root: Path) -> None:
    """The executor's line on what the store already holds of a stage's runs."""
    if done:
        console.print(
            f"{done} of {done + pending} runs already done in {root}: skipped",
            markup=False,
            highlight=False,
        )


POLL_S = 1.0  # how often a process waiting for another's run looks again


def obtain_with(
    attempt: Callable[[], RunRecord],
    spec: RunSpec,
    root: Path,
    wait: bool = False,
    say: SayFn = print,
) -> RunRecord:
    """The stored record of ``spec``, else ``attempt()`` (claim it, run it, store it): the
    reuse and waiting rules every executor shares.

    A run that another live process is running, or has finished since the caller planned it,
    raises :class:`ablate.core.store.RunClaimed` (the executor reports it as skipped), or with
    ``wait`` is waited for and then reused.
    """
    announced = False
    folder = ExperimentFolder.of(root, spec.experiment).run(spec.run_id)
    while (record := result_of(folder, spec)) is None:
        try:
            return attempt()
        except store.RunClaimed as claimed:
            if not wait:
                raise
            if not announced:
                say(f"waiting: {claimed}")
                announced = True
            time.sleep(POLL_S)
    if not wait:
        raise store.RunClaimed(f"run {spec.run_id} was finished meanwhile by another process")
    return record


def obtain(
    spec: RunSpec,
    root: Path,
    progress: ProgressFn | None = None,
    watch: EvalWatch | None = None,
    take_over: bool = False,
    wait: bool = False,
    say: SayFn = print,
) -> RunRecord:
    """The stored record of ``spec`` if it is done, else train it here and store it: the one
    claim / train / reuse path of every locally trained run of every stage (main, sweep, tuned,
    search trial, max-LR probe, convert).

    ``watch`` sees every evaluation and may stop the run as pruned (a search trial);
    ``take_over`` claims the run whoever holds it (a retried search trial whose worker died);
    ``wait`` as in :func:`obtain_with`.
    """
    from ablate.training.callbacks import EvalStop
    from ablate.training.run import (
        execute_run,  # Lightning's import costs seconds: only when training
    )

    stoppers = [EvalStop(watch)] if watch is not None else []
    return obtain_with(
        lambda: execute_run(spec, root, progress, stoppers, take_over), spec, root, wait, say
    )


def _worker_run(spec: RunSpec, root: str) -> RunRecord | None:
    worker_message(("start", spec.run_id, 0, 0.0))

    def report(step: int, loss: float) -> None:  # the display may be gone; training goes on
        worker_message(("step", spec.run_id, step, loss))

    return obtain(spec, Path(root), progress=report)


def _run_serial(
    specs: list[RunSpec], root: Path, threads: int, board: ProgressBoard
) -> list[RunRecord]:
    summaries = []
    with torch_threads(threads):
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
                store.stop_on_store_fault(exc, root)
                continue
            board.finish(spec, summary)
            summaries.append(summary)
    return summaries


def _run_pool(
    specs: list[RunSpec], root: Path, res: Resources, board: ProgressBoard
) -> list[RunRecord]:
    summaries: list[RunRecord] = []
    messages = pool_context().Queue()
    with worker_pool(res, messages, TRAINING_IMPORTS) as pool:
        with sigint_deferred():
            futures: dict[Future, RunSpec] = {
                pool.submit(in_worker, _worker_run, s, str(root)): s for s in specs
            }
        pending = set(futures)
        while pending:
            drain(messages, board.handle, timeout=0.2)
            finished, pending = wait(pending, timeout=0, return_when=FIRST_COMPLETED)
            for future in finished:
                drain(messages, board.handle, timeout=0)
                spec = futures[future]
                error = future.exception()
                if isinstance(error, store.RunClaimed):
                    board.finish(spec, None, f"skipped: {error}")
                elif isinstance(error, KeyboardInterrupt):  # Ctrl-C reached the worker first
                    board.finish(spec, None, "interrupted")
                    raise KeyboardInterrupt
                elif error is not None:
                    board.finish(spec, None, f"failed: {error!r}")
                    store.stop_on_store_fault(error, root)  # the pool's workers are stopped
                elif future.result() is not None:
                    summaries.append(future.result())
                    board.finish(spec, future.result())
    return summaries


def ready_conversions(
    specs: list[RunSpec], folder: ExperimentFolder
) -> tuple[list[RunSpec], list[tuple[RunSpec, str]]]:
    """Split convert runs into those whose source finished with stored weights, and the rest.

    The rest come with the reason, e.g. ``source run 1a2b... is diverged``.
    """
    ready, waiting = [], []
    for spec in specs:
        problem = store.weights_missing(folder.run(str(spec.init_from)))
        if problem is None:
            ready.append(spec)
        else:
            waiting.append((spec, f"source run {spec.init_from} {problem}"))
    return ready, waiting


@dataclass
class LocalExecutor:
    """Trains on this machine: serially, or in a pool of ``workers`` processes."""

    imports: ClassVar[tuple[str, ...]] = TRAINING_IMPORTS
    root: Path
    workers: int | None = None
    threads: int | None = None
    console: Console | None = field(default=None, compare=False, repr=False)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "console": None}  # a terminal does not travel to a worker

    def prepare(self) -> None:
        """Import the trainer, :attr:`imports` (Lightning takes seconds)."""
        for name in self.imports:
            importlib.import_module(name)

    def obtain(
        self,
        request: Request,
        wait: bool = False,
        say: SayFn = print,
        progress: ProgressFn | None = None,
    ) -> RunRecord:
        """Reuse or train one run here (:func:`obtain`), with ``threads`` torch threads when
        they are set (a Slurm task's ``cpus_per_task``; a study worker has set its own)."""
        spec, watch, take_over = request.spec, request.watch, request.take_over
        with torch_threads(self.threads) if self.threads else nullcontext():
            return obtain(spec, self.root, progress, watch, take_over, wait, say)

    def run(self, specs: list[RunSpec]) -> list[RunRecord]:
        """Every pending spec through the pool (:func:`execute`)."""
        return execute(specs, self.root, self.workers, self.threads, self.console)

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        """One request, or every request where ``workers`` is 1, here, one after another;
        several in a pool of as many workers (forked from the server that imported the
        trainer), each with this process's torch threads: a study's parallel trials train
        side by side, and each run's bits are what they are alone."""
        if len(requests) == 1 or self.workers == 1:
            self.prepare()
            return obtain_each(self, requests, say)
        import torch

        threads = self.threads or torch.get_num_threads()
        runtime = requests[0].spec.config.runtime
        gpus = run_gpus(runtime)  # on GPUs, runs_per_device to each
        res = Resources(
            min(len(requests), len(gpus) * runtime.runs_per_device or len(requests)), threads, gpus
        )
        if gpus:
            check_fit([r.spec.config for r in requests], gpus, threads)
        found: list[Obtained] = []
        with worker_pool(res) as pool:
            with sigint_deferred():
                futures = [pool.submit(in_worker, _trial_run, r, str(self.root)) for r in requests]
            for future in futures:
                error = future.exception()
                if isinstance(error, KeyboardInterrupt):
                    raise KeyboardInterrupt
                found.append(future.result() if error is None else error)
        return found


def _trial_run(request: Request, root: str) -> RunRecord:
    """A pool worker's part of :meth:`LocalExecutor.obtain_all`."""
    return obtain(request.spec, Path(root), None, request.watch, request.take_over, wait=True)


def execute(
    specs: list[RunSpec],
    root: Path,
    workers: int | None = None,
    threads: int | None = None,
    console: Console | None = None,
) -> list[RunRecord]:
    """Run every spec that is not already done; return all records (stored and new)."""
    console = console or Console(stderr=True)
    done, pending = split_done(specs, root)
    say_done(console, len(done), len(pending), root)
    summaries = done
    if not pending:
        return summaries
    res = local_resources(pending[0].config.runtime, len(pending), workers, threads)
    if res.workers > 1 and res.gpus:
        check_fit([spec.config for spec in pending], res.gpus, res.threads)
    on_gpus = f" on {len(res.gpus)} GPU(s)" if res.gpus else ""
    console.print(
        f"running {len(pending)} runs with {res.workers} worker(s) x {res.threads} "
        f"thread(s){on_gpus}"
    )
    with ProgressBoard(console, pending) as board:
        if res.workers == 1:
            summaries += _run_serial(pending, root, res.threads, board)
        else:
            summaries += _run_pool(pending, root, res, board)
    return summaries
