"""Running RunSpecs: skip finished ones, run the rest here or in the worker pool, with progress.

The executor knows nothing about norms or models: it checks the store for finished runs, picks a
worker count for the machine (:func:`ablate.launch.workers.choose_resources`), and hands each
pending spec to :func:`obtain`, the one claim / train / reuse path of every run of every stage,
search trials and max-LR probes included, in this process when there is one worker and in the
``spawn`` pool otherwise (:mod:`ablate.launch.workers`). Workers report steps through a queue;
the ``ablate`` process draws them (:mod:`ablate.launch.progress`).
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from pathlib import Path
from typing import Any

from rich.console import Console

from ablate.core import store
from ablate.core.folders import RunFolder
from ablate.core.plan import RunSpec
from ablate.launch.progress import ProgressBoard
from ablate.launch.workers import (
    Resources,
    choose_resources,
    drain,
    gpu_count,
    in_worker,
    sigint_deferred,
    torch_threads,
    worker_message,
    worker_pool,
)

ProgressFn = Callable[[int, float], None]


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
    worker_message(("start", spec.run_id, 0, 0.0))

    def report(step: int, loss: float) -> None:  # the display may be gone; training goes on
        worker_message(("step", spec.run_id, step, loss))

    return obtain(spec, Path(root), progress=report)


def _run_serial(specs: list[RunSpec], root: Path, threads: int, board: ProgressBoard) -> list[dict]:
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
                continue
            board.finish(spec, summary)
            summaries.append(summary)
    return summaries


def _run_pool(specs: list[RunSpec], root: Path, res: Resources, board: ProgressBoard) -> list[dict]:
    summaries: list[dict] = []
    messages = mp.get_context("spawn").Queue()
    with worker_pool(res, messages) as pool:
        with sigint_deferred():
            futures: dict[Future, RunSpec] = {
                pool.submit(in_worker, _worker_run, s.to_json(), str(root)): s for s in specs
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
