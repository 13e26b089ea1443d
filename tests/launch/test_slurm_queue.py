"""The queue between the Slurm controller and its tasks, as files, and what a task's slots and
the controller make of it when a slot dies (no cluster needed: processes stand for the slots;
the tasks that serve it are tested on one in test_slurm.py)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_config

from ablate.core.cluster import SlurmConfig
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.launch import slurm_executor, slurm_task
from ablate.launch.execute import Request
from ablate.launch.slurm_jobs import Ending, Outcome, Submitted
from ablate.launch.slurm_queue import Queued, RunQueue, task_change, wait_for_run


def _queued(seed: int, attempt: int = 1) -> Queued:
    return Queued(Request(RunSpec("tiny", "layernorm", seed, tiny_config())), attempt)


def test_tasks_take_the_oldest_run_once_each(tmp_path: Path) -> None:
    queue = RunQueue(tmp_path / "queue")
    first, second = _queued(0), _queued(1, attempt=2)
    queue.put(first)
    time.sleep(0.01)  # the order is the files' times
    queue.put(second)
    assert queue.waiting() == [first.request.spec.run_id, second.request.spec.run_id]
    taken = queue.take("7_0")
    assert taken == first
    assert queue.taken_by(first.request.spec.run_id) == "7_0"  # until it records itself
    assert queue.take("7_1") == second and second.attempt == 2
    assert queue.take("7_0") is None and queue.waiting() == []


def test_a_runs_attempt_is_read_while_it_waits_or_is_being_taken(tmp_path: Path) -> None:
    queue = RunQueue(tmp_path / "queue")
    taken, recorded, waits = (_queued(seed, attempt=seed + 1) for seed in (0, 1, 2))
    for queued in (taken, recorded, waits):
        queue.put(queued)
        time.sleep(0.01)  # the order is the files' times
    assert queue.take("7_0") == taken and queue.take("7_1") == recorded
    queue.taken_file(recorded.request.spec.run_id, "7_1").unlink()  # its task recorded itself
    attempts = [queue.attempt(q.request.spec.run_id) for q in (taken, recorded, waits)]
    assert attempts == [1, None, 3]


def test_a_restarted_controller_queues_no_run_that_waits_or_is_being_taken(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A controller started again follows the runs an earlier one queued as they are: one a
    task took and has not yet recorded itself as the job of is not queued a second time."""
    folder = ExperimentFolder.of(tmp_path / "results", "tiny")
    queue = RunQueue(folder.slurm_queue)
    waits, taken, new = _queued(0, attempt=2), _queued(1), _queued(2)
    queue.put(taken)
    queue.put(waits)
    assert queue.take("7_0") == taken
    monkeypatch.setattr(slurm_executor, "job_states", lambda jobs: {})
    controller = slurm_executor.SlurmExecutor(tmp_path / "results", None, SlurmConfig())
    requests = [q.request for q in (waits, taken, new)]
    runs = controller._join(folder, queue, requests, print)
    ids = [request.spec.run_id for request in requests]
    assert runs.waiting == dict(zip(ids, [2, 1, 1], strict=True)) and runs.live == {}
    assert sorted(queue.waiting()) == sorted([ids[0], ids[2]])  # the taken one is not in it
    assert queue.taken_by(ids[1]) == "7_0"


def test_a_failure_is_read_until_the_run_is_queued_again(tmp_path: Path) -> None:
    queue = RunQueue(tmp_path / "queue")
    queued = _queued(0)
    run_id = queued.request.spec.run_id
    assert queue.failure(run_id) is None
    queue.fail(run_id, "job 7_0 raised: FileNotFoundError: corpus.txt")
    assert queue.failure(run_id) == "job 7_0 raised: FileNotFoundError: corpus.txt"
    queue.put(queued)
    assert queue.failure(run_id) is None


def test_a_slots_flag_holds_the_run_it_trains(tmp_path: Path) -> None:
    queue = RunQueue(tmp_path / "queue")
    run_id = _queued(0).request.spec.run_id
    queue.set_busy("7_0", True, slot=1, run_id=run_id)
    assert queue.slot_run("7_0", 1) == run_id and queue.slot_run("7_0", 0) is None
    queue.set_busy("7_0", True, slot=1)  # the slot ended: busy, training nothing
    assert queue.slot_run("7_0", 1) is None and queue.busy("7_0") == 1


def _slot(queue_path: str, slot: int, writer: Any, run_id: str, ends: str) -> None:
    """A task's slot process: trains ``run_id`` (marked busy), then dies under it (``ends``:
    killed, or on Slurm's SIGTERM) or sends its outcome (done)."""
    queue = RunQueue(Path(queue_path))
    queue.set_busy("7_0", True, slot, run_id)
    if ends == "killed":
        os.kill(os.getpid(), signal.SIGKILL)  # as the kernel's OOM killer does
    if ends == "terminated":
        os._exit(slurm_task.TERMINATED)  # its run is the task's to give back (queued again)
    queue.set_busy("7_0", False, slot)
    writer.send({run_id: Outcome(Ending.DONE)})


def test_a_slot_that_dies_fails_its_run_at_once_and_the_other_slots_go_on(
    tmp_path: Path,
) -> None:
    folder = ExperimentFolder.of(tmp_path / "results", "tiny")
    queue = RunQueue(folder.slurm_queue)
    requests = {q.request.spec.run_id: q.request for q in (_queued(seed) for seed in (0, 1, 2))}
    killed, terminated, kept = requests
    context = multiprocessing.get_context("fork")
    processes, readers = [], []
    for slot, (run_id, ends) in enumerate(
        [(killed, "killed"), (terminated, "terminated"), (kept, "done")]
    ):
        reader, writer = context.Pipe(duplex=False)
        args = (str(queue.path), slot, writer, run_id, ends)
        processes.append(context.Process(target=_slot, args=args))
        processes[-1].start()
        writer.close()
        readers.append(reader)
    sent = {kept: Outcome(Ending.DONE)}
    assert slurm_task.collect_slots(queue, "7_0", processes, readers) == sent
    line = "job 7_0: slot 0 died under it (killed by SIGKILL, as when out of memory)"
    assert queue.failure(killed) == line
    assert queue.failure(terminated) is None and queue.failure(kept) is None
    assert queue.busy("7_0") == 2 and queue.slot_run("7_0", 0) is None  # ended, not free
    # the controller, following the run while its task still runs, fails it at once
    controller = slurm_executor.SlurmExecutor(tmp_path / "results", None, SlurmConfig())
    job = Submitted(killed, "7_0", 1, str(tmp_path / "logs"))
    followed = slurm_executor.Followed(requests, {killed: job})
    assert controller._live_outcome(folder, queue, job, "RUNNING", followed) == Outcome.failed(line)


def test_tasks_say_whether_they_started_and_how_many_slots_train(tmp_path: Path) -> None:
    queue = RunQueue(tmp_path / "queue")
    assert not queue.started("7_0") and queue.busy("7_0") == 0
    assert queue.slots("7_0", expected=4) == 4  # pending: what the controller expects
    queue.hello("7_0", slots=3)
    assert queue.started("7_0") and queue.slots("7_0", expected=4) == 3  # what it said
    queue.set_busy("7_0", True, slot=0)
    queue.set_busy("7_0", True, slot=2)
    queue.set_busy("7_1", True)  # another task's slot 0
    assert queue.busy("7_0") == 2 and queue.busy("7_1") == 1
    queue.set_busy("7_0", False, slot=2)
    assert queue.busy("7_0") == 1
    queue.hello("7_0", slots=3)  # Slurm requeued the job under its id: it starts afresh
    assert queue.busy("7_0") == 0 and queue.busy("7_1") == 1
    queue.set_workers(["7_0", "7_1"])
    assert queue.workers() == ["7_0", "7_1"]


def test_a_tasks_refusal_reaches_the_controller(tmp_path: Path) -> None:
    queue = RunQueue(tmp_path / "queue")
    assert queue.refusal() is None
    queue.path.mkdir()
    queue.refuse("runtime.runs_per_device: 8 runs ... at most 3 fit")
    assert queue.refusal() == "runtime.runs_per_device: 8 runs ... at most 3 fit"


@pytest.mark.parametrize(
    ("wanted", "free", "per_task", "change"),
    [
        (5, 0, 1, 5),  # a task a run
        (5, 0, 4, 2),  # two tasks of four slots
        (5, 2, 4, 1),  # two slots free: one more task
        (4, 4, 4, 0),
        (1, 8, 4, -1),  # a pending task's four slots are not needed
        (0, 3, 4, 0),  # three free slots are less than a task
    ],
)
def test_tasks_are_counted_in_slots(wanted: int, free: int, per_task: int, change: int) -> None:
    assert task_change(wanted, free, per_task) == change


def test_a_free_task_waits_while_a_controller_does_and_leaves_when_it_is_gone(
    tmp_path: Path,
) -> None:
    queue = RunQueue(tmp_path / "queue")
    queue.open()
    started = time.monotonic()
    assert wait_for_run(queue, "7_0", idle_s=0.6) is None  # nothing came: idle for 0.6 s
    assert time.monotonic() - started >= 0.6
    queue.put(_queued(0))
    assert wait_for_run(queue, "7_0", idle_s=0.6) == _queued(0)  # a queued run: at once
    queue.close()
    started = time.monotonic()
    assert wait_for_run(queue, "7_0", idle_s=60.0) is None  # no controller: it leaves at once
    assert time.monotonic() - started < 1.0
