"""The executor's process pool, and Ctrl-C at any moment.

:func:`worker_pool` starts processes with a torch-thread budget each
(:func:`ablate.launch.resources.choose_resources`),
forked from a server that imported what their jobs need once (:func:`pool_context`: torch and
Lightning for a pool that trains, nothing for the simulator or Slurm; a command whose runs
train here in a pool starts it as it begins, its import beside the command's own:
:func:`ablate.launch.backends.start_trainer_early`); :func:`run_parallel`
runs jobs there (the studies) and the executor runs its runs there. Ctrl-C ends ``ablate``
within seconds and leaves no process behind: workers start with SIGINT blocked and ignore it
except while they run a job (:func:`in_worker`); the ``ablate`` process then stops them
(:func:`stop_workers`: nothing new starts, running runs are stored as interrupted, a worker that
does not finish within :data:`INTERRUPT_GRACE_S` is killed). Workers send their lines and
progress through a queue (:func:`worker_message`), so the ``ablate`` process's live display
stays whole.
"""

from __future__ import annotations

import atexit
import ctypes
import multiprocessing as mp
import os
import queue as queue_module
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from pathlib import Path
from types import FrameType
from typing import Any, TypeVar

from ablate.launch.devices import take_device
from ablate.launch.resources import Resources

T = TypeVar("T")
Message = tuple[str, str, int, float]  # (kind, run id or text, step, loss) from a worker


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
    interrupted: bool = False  # this worker's job got its Ctrl-C: it is storing its run


_WORKER = _WorkerState()


def _init_worker(
    threads: int, trains: bool, stop: Any, messages: Any, gpus: tuple[str, ...], slots: Any
) -> None:
    """A pool worker's set-up. It started with SIGINT blocked (:func:`sigint_deferred`); now it
    ignores SIGINT (which drops one that came during start-up) except while it runs a job
    (:func:`in_worker`), and dies with the ``ablate`` process. With ``gpus`` it takes the next
    of the pool's ``slots`` and sees only that GPU (:func:`ablate.launch.devices.take_device`).
    A worker that ``trains`` sets its torch threads; one that does not never loads torch."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    if gpus:
        take_device(gpus, slots)
    if trains:
        import torch  # here, not at the top: a simulated run's process never loads torch

        torch.set_num_threads(threads)
    let_the_server_go()
    die_with_parent()
    if messages is not None:
        messages.cancel_join_thread()  # exiting never waits on progress nobody reads any more
    _WORKER.stop, _WORKER.messages = stop, messages


def _interrupt_once(signum: int, frame: FrameType | None) -> None:
    """A worker's first Ctrl-C during a job: stop the experiment and interrupt the job; further
    ones are ignored while the job stores its interrupted run. Ignoring them takes more than
    setting SIGINT's handler to ``SIG_IGN``: Lightning's teardown puts back the handler it
    found, this one, and the ``ablate`` process's stop sends every worker a second Ctrl-C,
    which landing before the run's store holds Ctrl-C off would cut it and lose the run. One
    that lands in a finalizer (a ``__del__`` the garbage collector runs) is sent again
    :data:`FINALIZER_RETRY_S` later: raised there, Python would print it as a traceback and
    drop it, and the job train on."""
    if _WORKER.interrupted:
        return
    if in_finalizer(frame):
        threading.Timer(FINALIZER_RETRY_S, os.kill, (os.getpid(), signal.SIGINT)).start()
        return
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _WORKER.interrupted = True
    _WORKER.stop.set()
    raise KeyboardInterrupt


FINALIZER_RETRY_S = 0.05  # after a Ctrl-C that landed in a finalizer, when to send it again


def in_finalizer(frame: FrameType | None) -> bool:
    """Whether ``frame`` or a frame it was called from is an object's ``__del__``."""
    while frame is not None:
        if frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False


def in_worker(job: Callable[..., T], *args: Any) -> T | None:
    """Run ``job(*args)`` in a pool worker, interruptible by Ctrl-C; None once the experiment
    was stopped (nothing new starts after Ctrl-C)."""
    _WORKER.interrupted = False
    signal.signal(signal.SIGINT, _interrupt_once)
    try:
        return None if _WORKER.stop.is_set() else job(*args)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def let_the_server_go() -> None:
    """A worker forked by the forkserver inherits the write end of the pipe whose closing tells
    the server that the ``ablate`` process is gone (so that a worker could start processes of
    its own, which ours never do). Close it: while a worker held it, a killed ``ablate``
    process left the server waiting, and the worker, which dies with the server, trained on."""
    from multiprocessing import forkserver

    server = forkserver._forkserver  # CPython's one server (3.8 to 3.14)
    fd = getattr(server, "_forkserver_alive_fd", None)
    if fd is not None:
        os.close(fd)
        server._forkserver_alive_fd = None


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def die_with_parent() -> None:
    """Linux: have the kernel kill this worker when its parent dies: the ``ablate`` process
    that started it, or the forkserver, which ends with that process (SIGKILL, OOM), so no
    orphan keeps training; its run is redone on the next run."""
    if sys.platform != "linux":
        return
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@contextmanager
def torch_threads(threads: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def drain(messages: Any, handle: Callable[[Message], None], timeout: float) -> None:
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


def worker_message(message: Message) -> bool:
    """Send ``message`` to the ``ablate`` process from a pool worker; False where there is no
    queue (not a worker) or it is gone (Ctrl-C closed the display)."""
    if _WORKER.messages is None:
        return False
    try:
        _WORKER.messages.put(message)
    except (OSError, ValueError):
        return False
    return True


def worker_say(text: str) -> None:
    """Print a job's line: from a pool worker through the queue to the ``ablate`` process's
    console (so that its live display stays whole), else directly."""
    if not worker_message(("say", text, 0, 0.0)):
        print(text, flush=True)


# what a pool worker imports to train: torch and Lightning, about 5 s of CPU per process, and
# the search's trial watcher (Optuna, SQLAlchemy), which a search trial's run unpickles
TRAINING_IMPORTS = ("ablate.training.run", "ablate.launch.search")
PRELOADED = ["ablate.launch.preload"]  # imports the modules IMPORTS_ENV names, then READY_ENV
IMPORTS_ENV = "ABLATE_FORKSERVER_IMPORTS"  # the modules the server imports, space-separated
READY_ENV = "ABLATE_FORKSERVER_READY"  # the file the server touches once it has imported them
SERVER_START_LIMIT_S = 300.0  # the most start_server waits for the import (then submit waits)


def pool_context() -> BaseContext:
    """How the pool's processes start: ``forkserver`` where the platform has it, the server
    preloading :data:`PRELOADED`, so that each worker of each stage's pool forks in
    milliseconds from one process that paid the import once (with ``spawn`` every worker of
    every pool imported Lightning itself); ``spawn`` elsewhere. The server starts at the first
    pool, or earlier where a command starts it (:func:`start_server`), with this process's
    environment then (the CPU pin is set before), and ends with it, or when a pool needs
    imports it lacks."""
    if "forkserver" not in mp.get_all_start_methods():
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload(PRELOADED)
    return ctx


_server_imports: set[str] = set()  # what the running server imported (:func:`start_server`)
_importing: list[tuple[int, tempfile.TemporaryDirectory]] = []  # a server not yet waited for


def start_server(
    ctx: BaseContext, imports: tuple[str, ...] = TRAINING_IMPORTS, wait: bool = True
) -> None:
    """Start the forkserver of ``ctx`` and wait until it has imported ``imports`` (seconds on
    2 cores for :data:`TRAINING_IMPORTS`), where Ctrl-C reaches this process: the first worker
    waits for that import inside ``pool.submit``, with SIGINT deferred, and Ctrl-C then took
    as long. A server that an earlier pool started without them is stopped first (no pool
    is open then). The server is spawned with SIGINT blocked, so that every worker it forks
    starts so; on Ctrl-C while it imports, it is killed (it has forked nothing yet).
    Without ``wait`` it returns once the server is spawned, its import going on beside this
    process's own work; the next call waits for it, and a process that ends first kills it."""
    if ctx.get_start_method() != "forkserver":
        return
    from multiprocessing import forkserver

    server = forkserver._forkserver  # CPython's one server (3.8 to 3.14)
    if server._forkserver_pid is not None and not _server_imports.issuperset(imports):
        _kill_importing()
        server._stop()
    if not _importing:  # one spawned without waiting is waited for first
        _ensure_server(forkserver, imports)
    if wait and _importing and not _server_ready():  # it died importing: another, once
        _ensure_server(forkserver, imports)
        _server_ready()


def _server_ready() -> bool:
    """Wait for the server being spawned (:data:`_importing`) to finish its import, where
    Ctrl-C reaches this process (and kills it); whether it runs (not: it died importing)."""
    pid, folder = _importing[0]
    try:
        _wait_for(Path(folder.name) / "ready", SERVER_START_LIMIT_S, pid)
    except KeyboardInterrupt:
        _kill_importing()
        raise
    _importing.clear()
    folder.cleanup()
    return _running(pid)


def _ensure_server(forkserver: Any, imports: tuple[str, ...]) -> None:
    """Start the server where none runs (or it died), importing ``imports``; it touches
    ``ready`` in a folder of its own once done (:mod:`ablate.launch.preload`)."""
    running = forkserver._forkserver._forkserver_pid
    folder = tempfile.TemporaryDirectory(prefix="ablate-server-")
    os.environ[READY_ENV] = str(Path(folder.name) / "ready")
    os.environ[IMPORTS_ENV] = " ".join(imports)
    try:
        with sigint_deferred():  # a Ctrl-C meanwhile is raised once the server is recorded
            forkserver.ensure_running()
            pid = forkserver._forkserver._forkserver_pid
            if pid == running:  # started before, by an earlier pool: it imported then
                folder.cleanup()
                return
            _server_imports.clear()
            _server_imports.update(imports)
            _importing.append((pid, folder))
    finally:
        del os.environ[READY_ENV], os.environ[IMPORTS_ENV]


@atexit.register
def _kill_importing() -> None:
    """Kill a server still importing (not yet waited for): Ctrl-C or an error came before a
    pool needed it, and it would go on importing seconds after this process has ended."""
    for pid, folder in _importing:
        if not (Path(folder.name) / "ready").exists():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        folder.cleanup()
    _importing.clear()


def _wait_for(mark: Path, limit_s: float, pid: int) -> None:
    """Until ``mark`` exists, process ``pid`` (the server) has ended, or ``limit_s`` passed."""
    deadline = time.monotonic() + limit_s
    while not mark.exists() and _running(pid) and time.monotonic() < deadline:
        time.sleep(0.05)


def _running(pid: int) -> bool:
    """Whether child ``pid`` still runs (it is not reaped here: multiprocessing does that;
    where the platform cannot tell, it is taken to run)."""
    if not hasattr(os, "waitid"):
        return True
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None
    except ChildProcessError:
        return False


@contextmanager
def worker_pool(
    res: Resources, messages: Any = None, imports: tuple[str, ...] = TRAINING_IMPORTS
) -> Iterator[ProcessPoolExecutor]:
    """The executor's pool: ``res.workers`` processes (:func:`pool_context`) that have
    ``imports`` (its jobs train when they include the trainer: :data:`TRAINING_IMPORTS`) and
    ``res.threads`` torch threads each, spread over ``res.gpus`` in turn, killed by the kernel
    when the ``ablate`` process dies.
    Submit jobs as ``pool.submit(in_worker, job, *args)`` inside :func:`sigint_deferred`
    (workers start on submit). On Ctrl-C (or any error) the workers are stopped
    (:func:`stop_workers`) before the exception goes on."""
    ctx = pool_context()
    start_server(ctx, imports)
    stop = ctx.Event()
    pool = ProcessPoolExecutor(
        res.workers,
        mp_context=ctx,
        initializer=_init_worker,
        initargs=(res.threads, bool(imports), stop, messages, res.gpus, ctx.Value("i", 0)),
    )
    try:
        yield pool
    except BaseException:
        stop_workers(pool, stop, INTERRUPT_GRACE_S)
        raise
    pool.shutdown(wait=True)


def stop_workers(pool: ProcessPoolExecutor, stop: Any, grace_s: float) -> None:
    """Stop a pool promptly: nothing new starts, running jobs get SIGINT (a worker's run is
    stored as interrupted), and a worker still alive after ``grace_s`` is killed, saying so:
    what it trained has no record and is redone on the next run. A second Ctrl-C meanwhile is
    ignored: this takes at most ``grace_s`` and a little more."""
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
                print(
                    f"ablate: worker {worker.pid} was still busy {grace_s:g} s after the stop "
                    "and was killed; what it trained is not stored and is redone (from its "
                    "checkpoint, where it has one) on the next run",
                    file=sys.stderr,
                )
        pool.shutdown(wait=True)


def run_parallel(
    job: Callable[..., T],
    jobs: list[tuple[Any, ...]],
    res: Resources,
    say: Callable[[str], None] = print,
    imports: tuple[str, ...] = TRAINING_IMPORTS,
) -> list[T]:
    """``job(*args)`` for every args of ``jobs``, ``res.workers`` at a time in the executor's
    pool of workers that have ``imports`` (in this process when there is one worker or one
    job); results in order; the lines the jobs print with :func:`worker_say` go to ``say``.
    The studies run this way, their trials' runs going through the executor."""
    if res.workers <= 1 or len(jobs) <= 1:
        with torch_threads(res.threads) if imports else nullcontext():
            return [job(*args) for args in jobs]
    messages = pool_context().Queue()
    with worker_pool(res, messages, imports) as pool:
        with sigint_deferred():
            futures = [pool.submit(in_worker, job, *args) for args in jobs]

        def print_line(message: Message) -> None:  # a job's line (:func:`worker_say`)
            say(message[1])

        pending = set(futures)
        while pending:
            drain(messages, print_line, timeout=0.2)
            _, pending = wait(pending, timeout=0)
        drain(messages, print_line, timeout=0)
        return [future.result() for future in futures]
