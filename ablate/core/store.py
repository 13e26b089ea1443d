"""The on-disk results layout, atomic writes, and loading everything into pandas.

Layout (``root`` defaults to ``results/``)::

    root/<experiment>/experiment.json  the current plan: variants in order, seeds, run ids
    root/<experiment>/<run-id>/
        config.json       the resolved run: experiment, variant, seed, run_id, config
        env.json          python, torch, lightning, device, precision, threads, git commit
        init_params.json  sha256 prefix of every initial parameter, by name
        metrics.csv       one row per optimizer step; val_loss filled at evaluation steps
        probes.csv        long rows (step, quantity, site, layer, value) at each probe step
        logs/             Lightning loggers' files (csv/, tensorboard/, wandb/)
        model.pt          final weights of a finished main or convert run (runtime.save_weights)
        summary.json      written last: its presence with a final status marks the run done
        status.json       {"status": "running", ...} while the run is in progress
    root/<experiment>/.claims/<run-id>  {"pid", "hostname"} of the process training the run
    root/<experiment>/report.json  {"report_dir"}: where ``ablate run`` last wrote the report
    <report dir>/.built.json       written last by a report build: the files it wrote

Every file is written to a temporary name and renamed into place, so a reader (or a killed
writer) never sees half a file. A run is trained by the process that holds its claim
(:func:`claim_run`), so two ``ablate run`` on one results folder share the work instead of
training a run twice. A run directory without a complete ``summary.json`` is
incomplete and is redone from scratch, never half-counted.

For notebooks, :func:`load_results` (also ``ablate.load_results``) returns every run of an
experiment as one row of a DataFrame, with the per-step metrics and the probes as long frames.
"""

from __future__ import annotations

import json
import math
import os
import platform
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd

DONE_STATUSES = ("finished", "diverged", "pruned")
WEIGHTS_FILE = "model.pt"  # a finished main or convert run's final state_dict
CLAIMS = ".claims"  # one file per run being trained: which process trains it
SUMMARY_KEYS = (
    "variant",
    "seed",
    "status",
    "final_val_loss",
    "best_val_loss",
    "final_train_loss",
    "diverged_step",
    "diverged_reason",
    "tokens",
    "n_params",
    "wall_time_s",
    "tokens_per_s",
    "init_digest",
    "data_digest",
    "run_id",
)


def write_text_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and a rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~current_umask())  # mkstemp's 0600 would hide results from others
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def current_umask() -> int:
    """The process's file-creation mask (read by setting it and putting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_json_atomic(path: Path, data: Any) -> None:
    """Atomically write ``data`` as indented JSON (non-finite floats become null)."""
    write_text_atomic(path, json.dumps(_finite(data), indent=2, sort_keys=True) + "\n")


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def write_frame_atomic(path: Path, frame: pd.DataFrame) -> None:
    """Atomically write a DataFrame as CSV."""
    write_text_atomic(path, frame.to_csv(index=False))


def experiment_dir(root: Path, experiment: str) -> Path:
    """Folder of one experiment's runs."""
    return Path(root) / experiment


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path``, or None when it is missing or unreadable."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """The run's summary if it is complete (status finished or diverged), else None."""
    summary = read_json(run_dir / "summary.json")
    if summary is None or summary.get("status") not in DONE_STATUSES:
        return None
    return summary


def is_done(run_dir: Path) -> bool:
    """True when the run finished or diverged; anything else is redone."""
    return read_summary(run_dir) is not None


def reset_run_dir(run_dir: Path) -> None:
    """Empty an incomplete run's folder (left by a crash, interruption or failure)."""
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)


def run_dirs(exp_dir: Path) -> list[Path]:
    """Every run folder of an experiment, sorted by name."""
    if not exp_dir.is_dir():
        return []
    return sorted(p for p in exp_dir.iterdir() if p.is_dir() and (p / "config.json").exists())


def load_summaries(exp_dir: Path, include_incomplete: bool = False) -> pd.DataFrame:
    """One row per run with a summary; by default only finished and diverged runs."""
    rows = []
    for run_dir in run_dirs(exp_dir):
        summary = read_json(run_dir / "summary.json")
        if summary is None:
            if not include_incomplete:
                continue
            config = read_json(run_dir / "config.json") or {}
            summary = {
                "run_id": run_dir.name,
                "variant": config.get("variant"),
                "seed": config.get("seed"),
                "status": "incomplete",
            }
        elif summary.get("status") not in DONE_STATUSES and not include_incomplete:
            continue
        rows.append(summary)
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(SUMMARY_KEYS))


# summary keys repeated on every metrics and probe row, under these names (metrics.csv has a
# per-step ``lr`` of its own, so the run's peak LR is ``peak_lr`` there)
RUN_KEYS = {"group": "group", "lr": "peak_lr", "warmup_steps": "warmup_steps"}


def load_metrics(
    exp_dir: Path, runs: pd.DataFrame | None = None, name: str = "metrics.csv"
) -> pd.DataFrame:
    """Per-step metrics of ``runs`` (default: every done run) as one long frame, with run keys
    (run id, variant, seed) and :data:`RUN_KEYS` (group, peak_lr, warmup_steps).

    Pass the summaries already loaded to read only those runs' files; ``name="probes.csv"``
    reads the probes instead.
    """
    runs = load_summaries(exp_dir) if runs is None else runs
    frames = []
    for run in runs.itertuples():
        path = exp_dir / run.run_id / name
        if not path.exists() or path.stat().st_size == 0:
            continue
        frame = pd.read_csv(path)
        keys = {"run_id": run.run_id, "variant": run.variant, "seed": run.seed}
        for key, column in RUN_KEYS.items():  # the stage and settings, to select like runs
            keys[column] = getattr(run, key, None)
        for i, (key, value) in enumerate(keys.items()):
            frame.insert(i, key, value)
        frames.append(frame)
    frames = [f for f in frames if len(f)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def load_probes(exp_dir: Path, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The probes of ``runs`` (default: every done run) as one long frame, with run keys."""
    return load_metrics(exp_dir, runs, "probes.csv")


@dataclass(frozen=True)
class Results:
    """An experiment's stored runs: one row per run, and long frames of metrics and probes."""

    runs: pd.DataFrame
    metrics: pd.DataFrame
    probes: pd.DataFrame


def load_results(exp_dir: str | Path, include_incomplete: bool = False) -> Results:
    """Every run of the experiment in ``exp_dir`` for a notebook.

    Example::

        >>> import ablate
        >>> results = ablate.load_results("results/ln_vs_rms")  # doctest: +SKIP
        >>> main = results.runs.query("group == 'main'")  # doctest: +SKIP
        >>> main.groupby("variant")["final_val_loss"].mean()  # doctest: +SKIP

    ``group`` says which stage trained a run (main, sweep, search, tuned, max_lr, convert); the
    report's Final quality table uses the ``main`` runs, its tuned comparison the ``tuned`` ones.
    """
    exp_dir = Path(exp_dir)
    runs = load_summaries(exp_dir, include_incomplete)
    return Results(runs, load_metrics(exp_dir, runs), load_probes(exp_dir, runs))


def pending_state(run_dir: Path) -> str:
    """Why a planned run has no result: running, failed, interrupted or not started."""
    summary = read_json(run_dir / "summary.json")
    if summary is not None and summary.get("status") not in DONE_STATUSES:
        return str(summary.get("status"))
    status = read_json(run_dir / "status.json")
    if status is not None and status.get("status") == "running":
        host = status.get("hostname")
        if host and host != platform.node():
            return f"running on {host}"
        return "running" if process_alive(status.get("pid")) else "stopped (its process is gone)"
    return "not started"


def process_alive(pid: object) -> bool:
    """Whether a process with this id exists on this machine."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def weights_missing(run_dir: Path) -> str | None:
    """Why a run cannot be continued from (``is diverged``, ``has no model.pt ...``), or None
    when it finished with its final weights stored."""
    summary = read_summary(run_dir)
    if summary is None or summary["status"] != "finished":
        return f"is {summary['status'] if summary else 'not done'}"
    if not (run_dir / WEIGHTS_FILE).is_file():
        return f"has no {WEIGHTS_FILE} (runtime.save_weights was off when it ran)"
    return None


class RunClaimed(RuntimeError):
    """The run is being trained by another live process (another ``ablate run``)."""


def claim_path(exp_dir: Path, run_id: str) -> Path:
    """Where the claim of a run lives (outside the run folder, which a run resets)."""
    return exp_dir / CLAIMS / run_id


def claim_run(exp_dir: Path, run_id: str, take_over: bool = False) -> None:
    """Claim a run for this process, or raise :class:`RunClaimed` naming its holder.

    The claim is a file created with ``O_EXCL`` (atomic on local and NFSv3+ file systems)
    holding the owner's pid and host. A claim left by a dead process of this host (SIGKILL, a
    crash) is stale and taken over; one from another host is honoured until removed, or taken
    over with ``take_over`` (a retried Optuna trial: its storage's heartbeat found the holder
    dead).
    """
    path = claim_path(exp_dir, run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "hostname": platform.node()}
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            holder = read_json(path) or {}
            same_host = holder.get("hostname") == me["hostname"]
            if same_host and holder.get("pid") == me["pid"]:
                return
            if take_over or (same_host and not process_alive(holder.get("pid"))):
                path.unlink(missing_ok=True)  # stale: its process is gone (or declared dead)
                continue
            where = holder.get("hostname") or "an unknown host"
            raise RunClaimed(
                f"run {run_id} is being trained by pid {holder.get('pid')} on {where}"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(me, handle)
        return
    raise RunClaimed(f"run {run_id}: its claim could not be taken over")


def release_run(exp_dir: Path, run_id: str) -> None:
    """Drop this process's claim of a run (no-op when it holds none)."""
    path = claim_path(exp_dir, run_id)
    holder = read_json(path) or {}
    if holder.get("pid") == os.getpid() and holder.get("hostname") == platform.node():
        path.unlink(missing_ok=True)


def write_json_if_changed(path: Path, data: Any) -> None:
    """:func:`write_json_atomic`, except that equal content leaves the file (and its time
    stamp, which says whether a report is up to date) alone."""
    if read_json(path) != json.loads(json.dumps(_finite(data))):
        write_json_atomic(path, data)


def write_manifest(exp_dir: Path, manifest: dict[str, Any]) -> None:
    """Record the current plan (name, variants in order, seeds, run ids) as experiment.json;
    an unchanged plan leaves the file (and its time stamp) alone."""
    write_json_if_changed(exp_dir / "experiment.json", manifest)


def newest_result_time(exp_dir: Path) -> float:
    """Modification time of the newest file a report is built from (0 when there is none)."""
    paths = [exp_dir / "experiment.json", exp_dir / "stability.json"]
    paths += [run_dir / "summary.json" for run_dir in run_dirs(exp_dir)]
    return max((p.stat().st_mtime for p in paths if p.exists()), default=0.0)


REPORT_BUILT = ".built.json"  # written last by a report build: the files that build wrote
REPORT_WHERE = "report.json"  # in the results folder: where the report was last written


def report_is_current(exp_dir: Path, report_dir: Path) -> bool:
    """True when the last build finished (its list of files was written), every file it wrote
    is still there, and none is older than the results it is built from. A build interrupted
    half-way (``report.md`` without ``report.html``) is therefore never current."""
    built = read_json(report_dir / REPORT_BUILT)
    if not built or not built.get("files"):
        return False
    newest = newest_result_time(exp_dir)
    paths = [report_dir / name for name in built["files"]]
    return all(p.is_file() and p.stat().st_mtime >= newest for p in paths)


def remember_report_dir(exp_dir: Path, report_dir: Path) -> None:
    """Record where the experiment's report was written, for ``ablate report`` to write there."""
    write_json_if_changed(exp_dir / REPORT_WHERE, {"report_dir": str(report_dir.resolve())})


def remembered_report_dir(exp_dir: Path) -> Path | None:
    """Where ``ablate run`` last wrote this experiment's report, if it did."""
    where = read_json(exp_dir / REPORT_WHERE)
    return Path(where["report_dir"]) if where and where.get("report_dir") else None


def read_manifest(exp_dir: Path) -> dict[str, Any]:
    """The plan stored with an experiment; without one, what the run folders themselves say."""
    manifest = read_json(exp_dir / "experiment.json")
    if manifest is not None:
        return manifest
    runs = load_summaries(exp_dir)
    return {
        "name": exp_dir.name,
        "description": "",
        "variants": sorted(runs["variant"].unique()) if len(runs) else [],
        "seeds": sorted(int(s) for s in runs["seed"].unique()) if len(runs) else [],
        "runs": [],
    }
