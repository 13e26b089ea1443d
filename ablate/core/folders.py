"""The results folder's layout: every file name and path, and the one way to write a file.

Layout (``root`` defaults to ``results/``)::

    root/<experiment>/experiment.json  the current plan: variants in order, seeds, run ids
    root/<experiment>/stability.json   the search and max-LR studies' results, per variant
    root/<experiment>/optuna.db        the Optuna storage (SQLite; PostgreSQL when configured)
    root/<experiment>/optuna.db.retries/  one file per stale trial being retried (its claim)
    root/<experiment>/report.json      {"report_dir"}: where ``ablate run`` last wrote the report
    root/<experiment>/jobs.jsonl       a line per ``ablate run`` that trained: its wall time,
                                       runs, workers, CPU, machine load (ablate.core.jobs)
    root/<experiment>/mlruns/          MLflow's file store, when that logger is on
    root/<experiment>/scale.json       a ``scale:`` experiment: its sizes, each an experiment
                                       of its own in root/<experiment>/<experiment>.<size>/
    root/<experiment>/.claims/<run-id> {"pid", "hostname"} of the process training the run
    root/<experiment>/.claims.lock     locked while a process replaces a stale claim
    root/<experiment>/.slurm/by-run/<run-id>.json  the Slurm job of the run: job id, attempt
    root/<experiment>/.slurm/submitit/<job-id>/  submitit's job scripts, pickles and logs
    root/<experiment>/.slurm/queue/    the runs queued for the Slurm tasks, and what the tasks
                                       say of themselves (ablate.launch.slurm_queue)
    root/<experiment>/<run-id>/
        config.json       the resolved run: experiment, variant, seed, run_id, config
        env.json          python, torch, lightning, device, precision, threads, git commit
        init_params.json  sha256 prefix of every initial parameter, by name
        metrics.csv       one row per optimizer step; val_loss filled at evaluation steps
        probes.csv        long rows (step, quantity, site, layer, value) at each probe step
        logs/             Lightning loggers' files (csv/, tensorboard/, wandb/)
        model.pt          final weights of a finished main or convert run (runtime.save_weights)
        checkpoint.ckpt   a run in progress or cut: its last resumable state (weights, optimizer,
                          schedule, step, RNG, what the callbacks recorded); deleted just
                          before the summary of any status but interrupted
        summary.json      written last: its presence with a final status marks the run done
                          (paused: held at the curve's early-stop step, its checkpoint kept,
                          until the curve stops it or trains it on)
        status.json       {"status": "running", ...} while the run is in progress (deleted
                          just before the summary)
        progress.json     {"step", "loss"}: a Slurm task's last reported step (the controller
                          draws it)
    <report dir>/.built.json  written last by a report build: the files it wrote

Every file is written to a temporary name in its folder and renamed into place
(:func:`write_atomic`), so a reader, or a writer killed half-way, never sees half a file.
No other module spells one of these names: it asks a :class:`RunFolder` or an
:class:`ExperimentFolder` for the path.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.core.record import RunRecord

DONE_STATUSES = ("finished", "diverged", "pruned", "paused")  # paused: for a held request
REPORT_BUILT = ".built.json"  # in a report folder, written last: the files that build wrote
# the columns of a run's metrics.csv (before val_loss joins them) and probes.csv
METRIC_COLUMNS = ["step", "tokens", "train_loss", "lr", "grad_norm", "step_time_s", "elapsed_s"]
PROBE_COLUMNS = ["step", "quantity", "site", "layer", "value"]


def current_umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path, write: Callable[[Path], None]) -> None:
    """Have ``write`` fill a temporary file beside ``path``, then rename it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~current_umask())  # mkstemp's 0600 would hide results from others
        write(Path(tmp))
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Atomically write ``text`` (UTF-8) to ``path``."""
    write_atomic(path, lambda tmp: tmp.write_text(text, encoding="utf-8"))


def finite(value: Any) -> Any:
    """``value`` with every non-finite float (also nested) replaced by None, as JSON has none."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite(v) for v in value]
    return value


def write_json_atomic(path: Path, data: Any) -> None:
    """Atomically write ``data`` as indented JSON (non-finite floats become null)."""
    write_text_atomic(path, json.dumps(finite(data), indent=2, sort_keys=True) + "\n")


def write_json_if_changed(path: Path, data: Any) -> None:
    """:func:`write_json_atomic`, except that equal content leaves the file (and its time
    stamp, which says whether a report is up to date) alone."""
    if read_json(path) != json.loads(json.dumps(finite(data))):
        write_json_atomic(path, data)


def write_frame_atomic(path: Path, frame: pd.DataFrame) -> None:
    """Atomically write a DataFrame as CSV."""
    write_text_atomic(path, frame.to_csv(index=False))


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@dataclass(frozen=True)
class RunFolder:
    """One run's folder: its files' paths, and reading and writing them."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))  # a str path works too

    @property
    def experiment(self) -> ExperimentFolder:
        """The experiment's folder this run is in."""
        return ExperimentFolder(self.path.parent)

    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def config(self) -> Path:
        return self.path / "config.json"

    @property
    def env(self) -> Path:
        return self.path / "env.json"

    @property
    def init_params(self) -> Path:
        return self.path / "init_params.json"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def probes(self) -> Path:
        return self.path / "probes.csv"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def weights(self) -> Path:
        return self.path / "model.pt"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def status(self) -> Path:
        return self.path / "status.json"

    @property
    def progress(self) -> Path:
        """A Slurm task's last step and train loss, for the controller's display."""
        return self.path / "progress.json"

    @property
    def handback(self) -> Path:
        """Observers' state handed back by spawned DDP processes (transient)."""
        return self.path / ".rank0_state.pt"

    def is_run(self) -> bool:
        """Whether the folder holds a run (its config was written)."""
        return self.config.exists()

    def read_config(self) -> dict[str, Any] | None:
        return read_json(self.config)

    def read_any_record(self) -> RunRecord | None:
        """The run's record whatever its status (failed and interrupted runs store one too)."""
        summary = read_json(self.summary)
        return RunRecord.from_json(summary) if summary is not None else None

    def read_record(self) -> RunRecord | None:
        """The run's record if it is complete (finished, diverged, pruned or paused), else None."""
        record = self.read_any_record()
        return record if record is not None and record.status in DONE_STATUSES else None

    def write_record(self, record: RunRecord) -> RunRecord:
        """Store the run's record as ``summary.json`` (whole, and last of the run's files: a
        run with one is stored); the record as stored, which every later read returns (a
        non-finite float reads back as None)."""
        write_json_atomic(self.summary, record.to_json())
        stored = self.read_any_record()
        assert stored is not None, f"{self.summary}: written and not there"
        return stored

    def is_done(self) -> bool:
        """True when the run finished, diverged, was pruned or paused; anything else is redone."""
        return self.read_record() is not None

    def stop_paused(self, record: RunRecord) -> RunRecord:
        """A paused run stored as stopped for good (``record``, status pruned): its checkpoint
        goes first, so that a cut between the two leaves a paused run, stopped again."""
        self.checkpoint.unlink(missing_ok=True)
        return self.write_record(record)

    @property
    def checkpoint(self) -> Path:
        """The last resumable checkpoint of a run in progress or cut (deleted as it is stored)."""
        return self.path / "checkpoint.ckpt"

    def reset(self) -> None:
        """Empty an incomplete run's folder (left by a crash, interruption or failure), all but
        a cut run's checkpoint, which the run resumes from."""
        if self.checkpoint.is_file():
            for entry in self.path.iterdir():
                if entry != self.checkpoint:
                    shutil.rmtree(entry) if entry.is_dir() else entry.unlink()
        elif self.path.exists():
            shutil.rmtree(self.path)
        self.path.mkdir(parents=True, exist_ok=True)

    def read_frame(self, which: Path) -> pd.DataFrame | None:
        """The CSV at ``which`` (:attr:`metrics` or :attr:`probes`), None when absent or empty."""
        if not which.exists() or which.stat().st_size == 0:
            return None
        return pd.read_csv(which)


INFERENCE_TABLE = "inference.csv"  # ablate bench --inference's table, in results and reports


@dataclass(frozen=True)
class ExperimentFolder:
    """One experiment's folder in the results root: its runs and its experiment-wide files."""

    path: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))  # a str path works too

    @classmethod
    def of(cls, root: Path | str, experiment: str) -> ExperimentFolder:
        """The folder of ``experiment``'s runs under the results root."""
        return cls(Path(root) / experiment)

    @property
    def manifest(self) -> Path:
        return self.path / "experiment.json"

    @property
    def stability(self) -> Path:
        return self.path / "stability.json"

    @property
    def optuna_db(self) -> Path:
        return self.path / "optuna.db"

    @property
    def report_where(self) -> Path:
        return self.path / "report.json"

    @property
    def jobs(self) -> Path:
        """The record of each ``ablate run`` that trained here (:mod:`ablate.core.jobs`)."""
        return self.path / "jobs.jsonl"

    @property
    def inference(self) -> Path:
        """``ablate bench --inference --results-dir``'s table, which the report shows."""
        return self.path / INFERENCE_TABLE

    def read_inference(self) -> pd.DataFrame:
        """The stored inference table, empty when there is none."""
        path = self.inference
        return pd.read_csv(path) if path.is_file() and path.stat().st_size else pd.DataFrame()

    @property
    def scale(self) -> Path:
        """A ``scale:`` experiment's list of sizes (its sizes are folders inside this one)."""
        return self.path / "scale.json"

    def is_scaled(self) -> bool:
        """Whether this folder holds a ``scale:`` experiment's sizes (not runs of its own)."""
        return self.scale.is_file()

    @property
    def mlruns(self) -> Path:
        return self.path / "mlruns"

    def claim(self, run_id: str) -> Path:
        """Where the claim of a run lives (outside the run folder, which a run resets)."""
        return self.path / ".claims" / run_id

    def claim_draft(self, run_id: str) -> Path:
        """This process's claim of a run, written whole before it is linked into place."""
        return self.path / f".claim-{os.getpid()}-{run_id}.tmp"

    @property
    def claims_lock(self) -> Path:
        """The file locked while a stale claim is judged and replaced (one process at a time)."""
        return self.path / ".claims.lock"

    @property
    def slurm_jobs(self) -> Path:
        """The Slurm launcher's records: a file per run (the studies' processes submit at
        once), the job it last submitted for that run."""
        return self.path / ".slurm" / "by-run"

    def slurm_job(self, run_id: str) -> Path:
        """The record of the job last submitted for a run."""
        return self.slurm_jobs / f"{run_id}.json"

    @property
    def slurm_logs(self) -> Path:
        """Where submitit writes each Slurm job's script, pickles and log by default."""
        return self.path / ".slurm" / "submitit"

    @property
    def slurm_queue(self) -> Path:
        """The queue of runs between the Slurm controller and its tasks."""
        return self.path / ".slurm" / "queue"

    def run(self, run_id: str) -> RunFolder:
        return RunFolder(self.path / run_id)

    def runs(self) -> list[RunFolder]:
        """Every run folder of the experiment, sorted by name."""
        if not self.path.is_dir():
            return []
        return [
            RunFolder(p)
            for p in sorted(self.path.iterdir())
            if p.is_dir() and RunFolder(p).is_run()
        ]

    def summarized(self) -> set[RunFolder]:
        """The runs whose summary is present now (finished or not), to count runs as they land."""
        return {RunFolder(path.parent) for path in self.path.glob("*/summary.json")}


def retry_claims(database: Path) -> Path:
    """The folder of claims on stale trials of the SQLite storage at ``database``."""
    return Path(f"{database}.retries")
