"""Where the Optuna studies live: the storage URL, opening it once per process, study names.

One storage per experiment (by default ``results/<experiment>/optuna.db``, SQLite; any Optuna
RDB URL such as ``postgresql://``, or ``journal:PATH`` for a journal file) holds one study per
variant and purpose: ``<experiment>.<variant>.search`` and ``<experiment>.<variant>.max_lr``.
On an RDB storage every search trial sends a heartbeat (``runtime.heartbeat_s``); one silent for
:data:`GRACE_HEARTBEATS` heartbeats belongs to a dead worker: Optuna fails it and one process
(:class:`RetryOnce`) enqueues a retry with the same parameters, which takes over the run.
"""

from __future__ import annotations

import os
import time
import warnings
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy.exc
from optuna.storages import RetryHeartbeatStaleTrialCallback
from optuna.trial import FrozenTrial
from sqlalchemy.engine import make_url

from ablate.core.errors import ConfigError
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder, retry_claims
from ablate.core.runtime import RuntimeConfig

GRACE_HEARTBEATS = 3  # a trial silent for this many heartbeats belongs to a dead worker


def storage_url(experiment: Experiment, root: Path, override: str | None = None) -> str:
    """The storage to use: ``--storage``, else the file's ``storage:``, else SQLite in results."""
    chosen = override or experiment.storage
    if chosen:
        return chosen
    path = ExperimentFolder.of(root, experiment.name).optuna_db.resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    return f"sqlite:///{path}"


_OPENED: dict[tuple[Any, ...], optuna.storages.BaseStorage] = {}


def check_storage_opens(experiment: Experiment, root: Path, override: str | None) -> None:
    """Open the studies' storage before anything trains; one that cannot be opened (no
    server, wrong database, bad URL) is bad input: a :class:`ConfigError` line naming it
    (key ``storage``, code ``storage_unopened``)."""
    url = storage_url(experiment, root, override)
    try:
        open_storage(url, experiment.base.runtime)
    except Exception as exc:  # sqlalchemy, psycopg, optuna: whatever stops it opening
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        where = "--storage" if override else "storage"
        raise ConfigError(
            f"{experiment.path}: {where}: cannot open {storage_label(url)} ({reason})",
            key="storage",
            code="storage_unopened",
        ) from None


def open_storage(
    url: str, runtime: RuntimeConfig | None = None, heartbeat: bool = True
) -> optuna.storages.BaseStorage:
    """An Optuna storage for ``url``, opened once per process (opening an RDB storage checks
    its schema: ~0.1 s) and again only when a storage file was replaced.

    ``journal:PATH`` opens a journal file (no heartbeat: a dead worker's trial stays RUNNING and
    is never counted). Any other URL is an RDB storage; with ``heartbeat`` its trials send one
    every ``runtime.heartbeat_s``, and a stale trial is failed and retried up to
    ``trial_retries`` times.
    """
    runtime = runtime or RuntimeConfig()
    key = (url, heartbeat, runtime.heartbeat_s, runtime.trial_retries, _file_identity(url))
    if key not in _OPENED:
        _OPENED[key] = _open_storage(url, runtime, heartbeat)
    return _OPENED[key]


def _file_identity(url: str) -> tuple[int, int] | None:
    """(device, inode) of a SQLite or journal storage's file; None for a server or no file."""
    path = url.removeprefix("journal:") if url.startswith("journal:") else None
    if url.startswith("sqlite"):
        path = make_url(url).database
    try:
        stat = os.stat(path) if path else None
    except OSError:
        return None
    return (stat.st_dev, stat.st_ino) if stat else None


def _open_storage(url: str, runtime: RuntimeConfig, heartbeat: bool) -> optuna.storages.BaseStorage:
    if url.startswith("journal:"):
        from optuna.storages.journal import JournalFileBackend

        return optuna.storages.JournalStorage(JournalFileBackend(url.removeprefix("journal:")))
    # SQLite: wait for a lock held by another worker instead of failing after 5 s
    engine = {"connect_args": {"timeout": 120}} if url.startswith("sqlite") else {}
    if not heartbeat:
        return _rdb_storage(url, engine_kwargs=engine)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return _rdb_storage(
            url,
            engine_kwargs=engine,
            heartbeat_interval=runtime.heartbeat_s,
            grace_period=GRACE_HEARTBEATS * runtime.heartbeat_s,
            heartbeat_stale_trial_callback=RetryOnce(runtime.trial_retries, url),
        )


class RetryOnce:
    """Optuna's retry of a trial whose worker died, made by one process only. SQLite has no
    row locks, so two processes can both fail the same stale trial and both retry it; for a
    SQLite storage the retry is claimed first with a file created ``O_EXCL`` beside the
    database. Server databases lock the row and need no claim."""

    def __init__(self, max_retry: int, url: str) -> None:
        self.retry = RetryHeartbeatStaleTrialCallback(max_retry)
        database = make_url(url).database if url.startswith("sqlite") else None
        self.claims = retry_claims(Path(database)) if database else None

    def __call__(self, study: optuna.Study, trial: FrozenTrial) -> None:
        if self.claims is not None:
            self.claims.mkdir(exist_ok=True)
            try:
                os.close(
                    os.open(
                        self.claims / f"{study.study_name}.{trial.number}", os.O_CREAT | os.O_EXCL
                    )
                )
            except FileExistsError:
                return  # another process retries it
        self.retry(study, trial)


def _rdb_storage(url: str, attempts: int = 5, **options: Any) -> optuna.storages.RDBStorage:
    """An RDB storage (``postgresql://`` through psycopg 3, installed with ablate); retried
    while workers started together race to create its tables."""
    parsed = make_url(url)
    if parsed.drivername == "postgresql":
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    for attempt in range(1, attempts):
        try:
            return optuna.storages.RDBStorage(url, **options)
        except (
            sqlalchemy.exc.IntegrityError,
            sqlalchemy.exc.OperationalError,
            sqlalchemy.exc.ProgrammingError,  # PostgreSQL: a type another worker just created
        ) as exc:
            if "connection" in str(exc).lower():  # no server there: waiting will not help
                raise
            time.sleep(0.5 * attempt)  # another worker is creating the schema
    return optuna.storages.RDBStorage(url, **options)  # the last attempt raises what it meets


def storage_label(url: str) -> str:
    """``url`` fit to print or store: an RDB URL's password hidden."""
    if url.startswith("journal:"):
        return url
    return make_url(url).render_as_string(hide_password=True)


def study_name(experiment: Experiment, variant: str, purpose: str) -> str:
    """``<experiment>.<variant>.<purpose>``."""
    return f"{experiment.name}.{variant}.{purpose}"


def open_study(
    experiment: Experiment, variant: str, purpose: str, url: str, **options: Any
) -> optuna.Study:
    """Create or load the variant's study for ``purpose`` (minimizing), quietly.

    Only search trials send heartbeats: a max-LR probe is asked for at a fixed LR and is never
    retried (an unfinished probe is simply asked for again).
    """
    optuna.logging.set_verbosity(optuna.logging.ERROR)  # ablate prints every trial itself
    return optuna.create_study(
        study_name=study_name(experiment, variant, purpose),
        storage=open_storage(url, experiment.base.runtime, heartbeat=purpose == "search"),
        direction="minimize",
        load_if_exists=True,
        **options,
    )
