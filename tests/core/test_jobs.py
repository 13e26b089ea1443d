"""The job record: the machine's state by the declared rule, the other processes' share of the
cores, this process tree's CPU time, and the jobs file written a line at a time."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ablate.core import jobs
from ablate.core.jobs import IDLE_SHARE, JobClock, append_job, machine_state, read_jobs


def test_the_machine_is_idle_below_the_declared_share_of_other_work() -> None:
    assert machine_state(0.0) == "idle"
    assert machine_state(IDLE_SHARE - 0.001) == "idle"
    assert machine_state(IDLE_SHARE) == "busy"
    assert machine_state(None) == machine_state(float("nan")) == "unknown"


def test_other_work_is_the_cores_busy_time_less_our_own(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = JobClock(time.monotonic(), jobs.datetime.now(jobs.UTC), 0, 1000.0, 10.0)
    monkeypatch.setattr(jobs, "busy_cpu_s", lambda: 1000.0 + 150.0)  # the cores busy 150 s
    monkeypatch.setattr(jobs, "own_cpu_s", lambda: 10.0 + 110.0)  # 110 s of them ours
    assert clock.others_share(wall_s=100.0, cores=2) == pytest.approx(0.2)  # 40 of 200 s
    monkeypatch.setattr(jobs, "own_cpu_s", lambda: 10.0 + 170.0)  # ours over the count: 0
    assert clock.others_share(wall_s=100.0, cores=2) == 0.0
    monkeypatch.setattr(jobs, "busy_cpu_s", lambda: None)
    assert clock.others_share(wall_s=100.0, cores=2) is None


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="reads /proc")
def test_our_cpu_time_counts_a_live_child_that_works() -> None:
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.6: pass\n"
    child = subprocess.Popen(
        [sys.executable, "-c", burn + "print('done', flush=True)\ninput()"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        before = jobs.own_cpu_s()
        assert child.stdout is not None and child.stdout.readline().strip() == "done"
        assert jobs.own_cpu_s() - before >= 0.5  # the child is alive, not yet reaped
    finally:
        child.communicate("\n")


def test_records_are_read_back_in_order_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "jobs.jsonl"
    clock = JobClock.start(runs_stored=2)
    first = clock.record(5, "interrupted", ("train", "local", 2, 1))
    append_job(path, first)
    with path.open("a") as handle:
        handle.write('{"started": "2026-')  # a kill in the middle of a line
    second = JobClock.start(runs_stored=5).record(9, "finished", ("train", "local", 2, 1))
    append_job(path, second)
    table = read_jobs(path)
    assert list(table["runs_trained"]) == [3, 4]
    assert list(table["outcome"]) == ["interrupted", "finished"]
    assert set(table["machine"]) <= {"idle", "busy", "unknown"}
    assert json.loads(path.read_text().splitlines()[0])["runs_stored"] == 5
    assert read_jobs(tmp_path / "none.jsonl").empty
