"""The results store: which runs are done, reading them into pandas, claims, the plan, reports.

The folder layout and every write belong to :mod:`ablate.core.folders`; this module reads
what is stored. A run is trained by the process that holds its claim (:func:`claim_run`), so
two ``ablate run`` on one results folder share the work instead of training a run twice. A run
folder without a complete ``summary.json`` is incomplete and is redone from scratch, never
half-counted. :data:`SUMMARY_KEYS` is the summary contract: keys every run's summary has.

For notebooks, :func:`load_results` (also ``ablate.load_results``) returns every run of an
experiment as one row of a DataFrame, with the per-step metrics and the probes as long frames.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import json
import os
import platform
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from ablate.core.early_stop import result_of
from ablate.core.folders import (
    DONE_STATUSES,
    REPORT_BUILT,
    ExperimentFolder,
    RunFolder,
    read_json,
    write_json_atomic,
    write_json_if_changed,
)
from ablate.core.manifest import Manifest
from ablate.core.plan import RunSpec
from ablate.core.record import RECORD_KEYS
from ablate.core.studies import StoredStudies

FINAL_TRAIN_WINDOW = 10  # a summary's final_train_loss is the mean over this many last steps
SUMMARY_KEYS = RECORD_KEYS  # every run's summary.json has these keys (a convert run has a few more)


def is_experiment(folder: ExperimentFolder) -> bool:
    """Whether ``folder`` holds an experiment's results (its plan or at least one run)."""
    return folder.manifest.is_file() or bool(folder.runs())


def load_summaries(folder: ExperimentFolder, include_incomplete: bool = False) -> pd.DataFrame:
    """One row per run with a summary; by default only finished and diverged runs."""
    rows = []
    for run in folder.runs():
        record = run.read_any_record()
        if record is None:
            if not include_incomplete:
                continue
            config = run.read_config() or {}  # no record yet: what its plan says
            rows.append(
                {
                    "run_id": run.run_id,
                    "variant": config.get("variant"),
                    "seed": config.get("seed"),
                    "status": "incomplete",
                }
            )
        elif record.status in DONE_STATUSES or include_incomplete:
            rows.append(record.to_row())  # the keys its file held: older runs' stay out
    return pd.DataFrame(rows) if rows else pd.DataFrame(columns=list(SUMMARY_KEYS))


# summary keys repeated on every metrics and probe row, under these names (metrics.csv has a
# per-step ``lr`` of its own, so the run's peak LR is ``peak_lr`` there)
RUN_KEYS = {"group": "group", "lr": "peak_lr", "warmup_steps": "warmup_steps"}


def load_metrics(
    folder: ExperimentFolder,
    runs: pd.DataFrame | None = None,
    which: Literal["metrics", "probes"] = "metrics",
) -> pd.DataFrame:
    """Per-step metrics of ``runs`` (default: every done run) as one long frame, with run keys
    (run id, variant, seed) and :data:`RUN_KEYS` (group, peak_lr, warmup_steps).

    Pass the summaries already loaded to read only those runs' files; ``which="probes"``
    reads the probes instead.
    """
    runs = load_summaries(folder) if runs is None else runs
    frames = []
    for run in runs.itertuples():
        stored = folder.run(run.run_id)
        frame = stored.read_frame(getattr(stored, which))
        if frame is None:
            continue
        keys = {"run_id": run.run_id, "variant": run.variant, "seed": run.seed}
        for key, column in RUN_KEYS.items():  # the stage and settings, to select like runs
            keys[column] = getattr(run, key, None)
        for i, (key, value) in enumerate(keys.items()):
            frame.insert(i, key, value)
        frames.append(frame)
    filled = [f for f in frames if len(f)]
    if filled:
        return pd.concat(filled, ignore_index=True)
    return frames[0] if frames else pd.DataFrame()  # no rows, the columns kept (queryable)


def load_probes(folder: ExperimentFolder, runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """The probes of ``runs`` (default: every done run) as one long frame, with run keys."""
    return load_metrics(folder, runs, "probes")


@dataclass(frozen=True)
class Results:
    """An experiment's stored runs: one row per run, and long frames of metrics and probes."""

    runs: pd.DataFrame
    metrics: pd.DataFrame
    probes: pd.DataFrame


def load_results(
    exp_dir: str | Path, include_incomplete: bool = False, all_runs: bool = False
) -> Results:
    """The experiment's runs in ``exp_dir`` for a notebook: by default the runs its plan holds
    now (the manifest and studies the last ``ablate run`` wrote: :func:`planned_run_ids`);
    ``all_runs``
    adds every other stored run (of an earlier version of the file, say). The ``planned``
    column says which is which; without a stored plan every run counts as planned.

    Example::

        >>> import ablate
        >>> results = ablate.load_results("results/ln_vs_rms")  # doctest: +SKIP
        >>> main = results.runs.query("group == 'main'")  # doctest: +SKIP
        >>> main.groupby("variant")["final_val_loss"].mean()  # doctest: +SKIP

    ``group`` says which stage trained a run (main, sweep, search, tuned, max_lr, convert); the
    report's shared-LR tables use the ``main`` runs, its tuned comparison the ``tuned`` ones.
    """
    folder = ExperimentFolder(exp_dir)  # a str path works too
    runs = load_summaries(folder, include_incomplete)
    planned = planned_run_ids(folder)  # none: no plan stored
    runs = runs.assign(planned=runs["run_id"].isin(planned) if planned else True)
    if not all_runs:
        runs = runs[runs["planned"]].reset_index(drop=True)
    return Results(runs, load_metrics(folder, runs), load_probes(folder, runs))


def planned_run_ids(folder: ExperimentFolder) -> set[str]:
    """The runs the experiment's plan holds: the manifest's (main, sweep, tuned, convert) and
    the studies' (the search trials, the max-LR probes' runs)."""
    planned = {r.run_id for r in read_manifest(folder).runs}
    for ids in read_studies(folder).run_ids().values():
        planned |= set(ids)
    return planned


def pending_state(run: RunFolder) -> str:
    """Why a planned run has no result: running, failed, interrupted or not started."""
    record = run.read_any_record()
    if record is not None and record.status not in DONE_STATUSES:
        return str(record.status)
    status = read_json(run.status)
    if status is not None and status.get("status") == "running":
        host = status.get("hostname")
        if host and host != platform.node():
            return f"running on {host}"
        return "running" if process_alive(status.get("pid")) else "stopped (its process is gone)"
    return "not started"


def process_alive(pid: object) -> bool:
    """Whether a process with this id runs on this machine (one that exited and waits to be
    reaped, a zombie, does not: a killed child of a test or a pool holds nothing)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _zombie(pid: int) -> bool:
    """Whether the process has exited and is not yet reaped (Linux's /proc; elsewhere False)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="utf-8")
    except OSError:
        return False
    return stat.rsplit(")", 1)[-1].split()[:1] == ["Z"]  # the state follows the name's ")"


def weights_missing(run: RunFolder) -> str | None:
    """Why a run cannot be continued from (``is diverged``, ``has no model.pt ...``), or None
    when it finished with its final weights stored."""
    record = run.read_record()
    if record is None or record.status != "finished":
        return f"is {record.status if record else 'not done'}"
    if not run.weights.is_file():
        return f"has no {run.weights.name} (runtime.save_weights was off when it ran)"
    return None


class RunClaimed(RuntimeError):
    """The run is being trained by another live process (another ``ablate run``)."""


STORE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)
TORCH_WRITE_FAILED = "inline_container"  # torch.save's zip writer on a short write


class StoreFault(RuntimeError):
    """A write to the results store failed for want of space, quota or permission: the
    command stops (no further run starts), finished runs are kept, and the run that hit it is
    not stored as a result."""


def store_fault_cause(exc: BaseException) -> str | None:
    """The cause in words when ``exc`` (or what it was raised from) is a failed write to the
    store (:data:`STORE_ERRNOS`, or torch's serialiser cut short); None otherwise."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in STORE_ERRNOS:
            return f"{os.strerror(seen.errno)} ({seen.filename or 'a file of the store'})"
        if isinstance(seen, RuntimeError) and TORCH_WRITE_FAILED in str(seen):
            return f"torch could not finish writing a file, a short write: {seen}".strip()
        seen = seen.__cause__ or seen.__context__
    return None


def free_space(root: Path) -> str:
    """What is left on ``root``'s file system, in words (empty where it cannot be read)."""
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        return ""
    return f"; {free / 2**20:,.1f} MiB free there now"


def stop_on_store_fault(exc: BaseException, root: Path) -> None:
    """Raise :class:`StoreFault` naming ``root`` (and the room left on it) when ``exc`` is a
    failed write to it."""
    cause = store_fault_cause(exc)
    if cause is not None:
        raise StoreFault(
            f"{root}: a run could not be stored: {cause}{free_space(root)}; stopped, no "
            "further run starts (finished runs are kept: make room and run the command again)"
        ) from exc


def claim_run(folder: ExperimentFolder, run_id: str, take_over: bool = False) -> None:
    """Claim a run for this process, or raise :class:`RunClaimed` naming its holder.

    The claim is a file holding the owner's pid and host, written whole to a file of this
    process's own first and then hard-linked into place (``link`` fails when the claim exists,
    atomically on local and NFS file systems), so no process ever sees a claim without its
    owner: one created empty and then written could be left empty by a SIGKILL between the two,
    and was then honoured forever. A claim left by a dead process of this host (SIGKILL, a
    crash), or one without an owner (an older ablate's, killed mid-write), is stale and taken
    over; one from another host is honoured until removed, or taken over with ``take_over`` (a
    retried Optuna trial: its storage's heartbeat found the holder dead). A live holder of this
    host is never displaced. Judging a claim stale and replacing it happen under the
    experiment's claims lock: two processes that both found the same dead holder each removed
    "its" claim, the second removing the first's fresh one, and both trained the run.
    """
    path = folder.claim(run_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    me = {"pid": os.getpid(), "hostname": platform.node()}
    mine = folder.claim_draft(run_id)
    mine.write_text(json.dumps(me), encoding="utf-8")
    try:
        if _linked(mine, path):
            return
        with _locked(folder.claims_lock):
            for _ in range(2):
                if _linked(mine, path):
                    return
                holder = read_json(path) or {}
                if holder.get("hostname") == me["hostname"] and holder.get("pid") == me["pid"]:
                    return
                if not _stale(holder, take_over):
                    where = holder.get("hostname") or "an unknown host"
                    raise RunClaimed(
                        f"run {run_id} is being trained by pid {holder.get('pid')} on {where}"
                    )
                path.unlink(missing_ok=True)  # stale: its process is gone (or unknown)
    finally:
        mine.unlink(missing_ok=True)
    raise RunClaimed(f"run {run_id}: its claim could not be taken over")


def _linked(mine: Path, path: Path) -> bool:
    """Link this process's claim into place; False when a claim is there already."""
    try:
        os.link(mine, path)
    except FileExistsError:
        return False
    return True


def _stale(holder: dict[str, Any], take_over: bool) -> bool:
    """Whether a claim may be replaced: no owner, a dead owner of this host, or (``take_over``)
    an owner of another host, whose life this host cannot check."""
    if "pid" not in holder or _holder_dead(holder):
        return True
    return take_over and holder.get("hostname") != platform.node()


@contextmanager
def _locked(lock: Path) -> Iterator[None]:
    """An exclusive ``flock`` of ``lock`` (created when missing) while the block runs."""
    with open(lock, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _holder_dead(holder: dict[str, Any]) -> bool:
    """Whether a claim's holder is a process of this host that no longer runs."""
    return holder.get("hostname") == platform.node() and not process_alive(holder.get("pid"))


def drop_stale_claim(folder: ExperimentFolder, run_id: str) -> None:
    """Remove a finished run's claim whose holder died after storing the summary and before
    releasing the claim (a SIGKILL between the two); a live holder's claim stays."""
    path = folder.claim(run_id)
    holder = read_json(path)
    if holder is not None and _holder_dead(holder):
        path.unlink(missing_ok=True)


def release_run(folder: ExperimentFolder, run_id: str) -> None:
    """Drop this process's claim of a run (no-op when it holds none)."""
    path = folder.claim(run_id)
    holder = read_json(path) or {}
    if holder.get("pid") == os.getpid() and holder.get("hostname") == platform.node():
        path.unlink(missing_ok=True)


@contextmanager
def claimed_run(root: Path, spec: RunSpec, take_over: bool = False) -> Iterator[RunFolder]:
    """The one claim / reset / release sequence of every executor that stores a run: claim it
    (:class:`RunClaimed` where another live process holds it, ``take_over`` passed on), refuse
    one that another process finished after this one planned it, empty its folder and write
    its config; the folder to write the rest into; the claim released however that ends."""
    folder = ExperimentFolder.of(root, spec.experiment)
    claim_run(folder, spec.run_id, take_over)
    try:
        run = folder.run(spec.run_id)
        if result_of(run, spec) is not None:
            raise RunClaimed(f"run {spec.run_id} was finished meanwhile by another process")
        run.reset()
        write_json_atomic(run.config, spec.to_json())
        yield run
    finally:
        release_run(folder, spec.run_id)


def write_manifest(folder: ExperimentFolder, manifest: Manifest) -> None:
    """Record the current plan (name, variants in order, seeds, run ids) as experiment.json;
    an unchanged plan leaves the file (and its time stamp) alone."""
    write_json_if_changed(folder.manifest, manifest.stored())


def results_digest(folder: ExperimentFolder) -> str:
    """16 hex digits of sha256 over every file a report is built from, by content: the plan,
    the studies, the inference table, the jobs' times where there are any, and each run's
    summary (in run-id order; a summary is written last, after the run's metrics and probes)."""
    paths = [folder.manifest, folder.stability, folder.inference]
    paths += [folder.jobs] if folder.jobs.is_file() else []  # a store from before job records
    paths += sorted(run.summary for run in folder.runs())
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(folder.path)).encode() + b"\0")
        digest.update(path.read_bytes() if path.is_file() else b"(none)")
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def report_is_current(folder: ExperimentFolder, report_dir: Path) -> bool:
    """True when the last build finished (it wrote its list of files last), every file it
    wrote is still there, and it was built from the results as they are now
    (:func:`results_digest`): content, not clocks, so copying or touching files changes
    nothing, and a build interrupted half-way is never current."""
    built = read_json(report_dir / REPORT_BUILT)
    if not built or not built.get("files"):
        return False
    if built.get("built_from") != results_digest(folder):
        return False
    return all((report_dir / name).is_file() for name in built["files"])


def remember_report_dir(folder: ExperimentFolder, report_dir: Path) -> None:
    """Record where the experiment's report was written, for ``ablate report`` to write there."""
    write_json_if_changed(folder.report_where, {"report_dir": str(report_dir.resolve())})


def remembered_report_dir(folder: ExperimentFolder) -> Path | None:
    """Where ``ablate run`` last wrote this experiment's report, if it did."""
    where = read_json(folder.report_where)
    return Path(where["report_dir"]) if where and where.get("report_dir") else None


def read_manifest(folder: ExperimentFolder) -> Manifest:
    """The plan stored with an experiment; without one, what the run folders themselves say."""
    manifest = read_json(folder.manifest)
    if manifest is not None:
        return Manifest.from_stored(manifest)
    runs = load_summaries(folder)
    return Manifest(
        name=folder.path.name,
        variants=sorted(runs["variant"].unique()) if len(runs) else [],
        seeds=sorted(int(s) for s in runs["seed"].unique()) if len(runs) else [],
    )


def read_studies(folder: ExperimentFolder) -> StoredStudies:
    """The search and max-LR studies' results (``stability.json``; none where no study ran)."""
    return StoredStudies.from_stored(read_json(folder.stability))


def write_studies(folder: ExperimentFolder, studies: StoredStudies) -> None:
    """Store the studies' results; unchanged results leave the file (and its time stamp)."""
    write_json_if_changed(folder.stability, studies.stored())
