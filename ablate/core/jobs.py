"""The wall time of ``ablate run`` itself: one record per invocation that trained something,
appended to the experiment's ``jobs.jsonl`` (:attr:`ablate.core.folders.ExperimentFolder.jobs`).

A run's summary holds its own time; only this record holds the job's: how long the
invocation took from start to report, how many runs it stored, with how many workers on which
CPU, and how busy the machine was with *other* work meanwhile (the cores' busy time, from
``/proc/stat``, less this process tree's own CPU time, as a share of the cores). The report
copies the records to ``jobs.csv`` and sums them; ``python -m ablate.report.times`` collects
every committed report's into ``reports/times.csv``, the one place the README, the docs and
``ablate validate`` take an experiment's time from.
"""

from __future__ import annotations

import json
import os
import platform
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd

IDLE_SHARE = 0.10  # other processes' share of the cores below which the machine counts as idle
PROC_STAT = Path("/proc/stat")


@dataclass(frozen=True)
class JobRecord:
    """One invocation of ``ablate run`` on one experiment."""

    started: str  # UTC, ISO 8601, to the second
    wall_s: float
    runs_trained: int  # runs stored by the end that were not at the start
    runs_stored: int  # finished runs in the folder at the end
    outcome: str  # "finished", "interrupted" or "failed"
    backend: str
    launcher: str
    workers: int
    threads: int
    cores: int
    cpu: str
    others_share: float | None  # other processes' share of the cores meanwhile; None: unknown

    @property
    def machine(self) -> str:
        """``idle`` or ``busy`` by :data:`IDLE_SHARE`, ``unknown`` where it was not measured."""
        return machine_state(self.others_share)


def machine_state(others_share: float | None) -> str:
    """The machine's state during a job, by the declared rule: idle below :data:`IDLE_SHARE`."""
    if others_share is None or others_share != others_share:
        return "unknown"
    return "idle" if others_share < IDLE_SHARE else "busy"


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else what ``platform`` says."""
    info = Path("/proc/cpuinfo")
    if info.is_file():
        for line in info.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name"):
                return " ".join(line.split(":", 1)[1].split())
    return platform.processor() or platform.machine() or "unknown"


def busy_cpu_s() -> float | None:
    """Seconds of CPU time every core of the machine spent busy since boot (``/proc/stat``:
    all but idle and iowait), None where it cannot be read."""
    try:
        fields = PROC_STAT.read_text(encoding="utf-8").splitlines()[0].split()[1:]
    except (OSError, IndexError):
        return None
    ticks = [int(v) for v in fields]
    idle = ticks[3] + (ticks[4] if len(ticks) > 4 else 0)
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def _stat_fields(pid: str) -> list[str] | None:
    """A process's ``/proc/<pid>/stat`` fields after its name, None where it is gone."""
    try:
        text = (Path("/proc") / pid / "stat").read_text(encoding="utf-8")
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def own_cpu_s() -> float:
    """CPU seconds of this process tree: this process and every live descendant (the pool's
    server and its workers), each with the children it has reaped. Without ``/proc``: this
    process and its reaped children (``os.times``)."""
    if not Path("/proc/self/stat").is_file():
        t = os.times()
        return t.user + t.system + t.children_user + t.children_system
    parents = {}
    for entry in os.scandir("/proc"):
        fields = _stat_fields(entry.name) if entry.name.isdigit() else None
        if fields:
            parents[entry.name] = (fields[1], fields)
    tree, todo = set(), [str(os.getpid())]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [child for child, (ppid, _) in parents.items() if ppid == pid]
    ticks = sum(sum(int(v) for v in parents[pid][1][11:15]) for pid in tree if pid in parents)
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass
class JobClock:
    """Started with the job: its start, the runs stored then and the machine's CPU counters,
    so :meth:`record` can say what the invocation took."""

    started: float
    started_wall: datetime
    runs_before: int
    busy_before: float | None
    own_before: float

    @classmethod
    def start(cls, runs_stored: int) -> JobClock:
        return cls(time.monotonic(), datetime.now(UTC), runs_stored, busy_cpu_s(), own_cpu_s())

    def others_share(self, wall_s: float, cores: int) -> float | None:
        """Other processes' share of the cores since the start, clipped at 0."""
        busy = busy_cpu_s()
        if busy is None or self.busy_before is None or wall_s <= 0:
            return None
        others = (busy - self.busy_before) - (own_cpu_s() - self.own_before)
        return round(max(0.0, others / (wall_s * cores)), 3)

    def record(self, runs_stored: int, outcome: str, how: tuple[str, str, int, int]) -> JobRecord:
        """The record at the end: ``how`` is (backend, launcher, workers, threads)."""
        wall = time.monotonic() - self.started
        cores = os.cpu_count() or 1
        backend, launcher, workers, threads = how
        return JobRecord(
            started=self.started_wall.isoformat(timespec="seconds"),
            wall_s=round(wall, 1),
            runs_trained=max(0, runs_stored - self.runs_before),
            runs_stored=runs_stored,
            outcome=outcome,
            backend=backend,
            launcher=launcher,
            workers=workers,
            threads=threads,
            cores=cores,
            cpu=cpu_model(),
            others_share=self.others_share(wall, cores),
        )


def append_job(path: Path, record: JobRecord) -> None:
    """Add one line to ``jobs.jsonl`` in one write (O_APPEND: two jobs never interleave),
    on a line of its own where a kill cut the last one short."""
    line = (json.dumps(asdict(record), sort_keys=True) + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        os.write(fd, line)
    finally:
        os.close(fd)


def _lines(path: Path) -> Iterator[dict]:
    """The file's records; a line cut short by a kill is skipped."""
    if not path.is_file():
        return
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            yield json.loads(line)
        except json.JSONDecodeError:
            continue


JOB_COLUMNS = [*JobRecord.__dataclass_fields__, "machine"]


def read_jobs(path: Path) -> pd.DataFrame:
    """Every stored invocation, oldest first, with its machine state; empty where none."""
    rows = [
        JobRecord(**{k: r.get(k) for k in JobRecord.__dataclass_fields__}) for r in _lines(path)
    ]
    frame = pd.DataFrame([{**asdict(r), "machine": r.machine} for r in rows], columns=JOB_COLUMNS)
    return frame.sort_values("started", kind="stable").reset_index(drop=True)
