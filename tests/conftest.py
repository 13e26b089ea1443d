"""Shared fixtures: a tiny run configuration and experiment file that train in under a second,
and a PostgreSQL server on loopback started by the tests themselves (a Slurm cluster too:
``slurm_cluster.py``).

Tests that train are marked ``trains`` (or ``slow``); ``make test-fast`` leaves them out. An
unmarked test that starts a Lightning fit in this process fails, so the mark cannot go stale.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from ablate.core.numerics import pin_cpu_numerics

if TYPE_CHECKING:
    import optuna

    from ablate.core.config import RunConfig
    from ablate.core.experiment import Experiment
    from ablate.core.manifest import Manifest

# ablate's modules, pandas and Optuna are imported by the helpers that use them, not here: the
# process that only hands tests to the workers (make test's pytest-xdist) loads this file
# before any worker starts, and waited a second for imports it never used

# make test runs one test process per core: an idle OpenMP thread then sleeps instead of
# spinning, so one process's torch threads do not take another's core. Set before torch loads
# (nothing above imports it); the ablate processes the tests start inherit it. No result moves.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

REPO = Path(__file__).resolve().parent.parent
pytest_plugins = ("slurm_cluster",)  # the slurm_cluster fixture


def pytest_configure(config: pytest.Config) -> None:
    """Pin torch's CPU code paths as the ``ablate`` command does, before any test computes;
    in a pytest-xdist worker, end the process as soon as its exit handlers have run."""
    pin_cpu_numerics()
    if hasattr(config, "workerinput"):  # set on xdist's workers only
        atexit.register(_end_worker)


def _end_worker() -> None:
    """Skip the interpreter's teardown of a worker whose results are already sent: tearing
    torch and Lightning down took about 2 s, and the controller waits for every worker to
    exit. Registered at start-up, so every handler registered later (multiprocessing's,
    torch's, the tests') has run before it."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


TINY: dict[str, Any] = {
    "data": {"source": "builtin_text"},
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 16},
    "train": {
        "batch_size": 4,
        "tokens": 4 * 16 * 20,
        "lr": 3e-3,
        "warmup_steps": 3,
        "eval_interval": 10,
        "eval_batches": 2,
    },
}


def tiny_config(**overrides: Any) -> RunConfig:
    """The tiny config with dotted-key overrides, e.g. ``tiny_config(**{"train.lr": 1.0})``."""
    from ablate.core.load import build_run_config
    from ablate.core.overrides import apply_overrides

    return build_run_config(apply_overrides(TINY, overrides, "test"), "test")


def stored_manifest(**stored: Any) -> Manifest:
    """A plan's record as a test needs it, from the keys it gives: the name, variants (ln, rms)
    and seeds defaulted, and each run its variant, seed and id where not given."""
    from ablate.core.manifest import Manifest

    runs = [
        {"variant": "ln", "seed": 0, "run_id": f"r{i}", **run}
        for i, run in enumerate(stored.pop("runs", []))
    ]
    defaults = {"name": "tiny", "variants": ["ln", "rms"], "seeds": [0]}
    return Manifest.from_stored({**defaults, **stored, "runs": runs})


def write_experiment(path: Path, **extra: Any) -> Path:
    """Write a tiny two-variant experiment file (LayerNorm vs RMSNorm, 2 seeds) to ``path``."""
    doc: dict[str, Any] = {
        "name": "tiny",
        "seeds": [0, 1],
        **TINY,
        "variants": {
            "layernorm": {"model.norm.kind": "layernorm"},
            "rmsnorm": {"model.norm.kind": "rmsnorm"},
        },
    }
    doc.update(extra)
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


# The tiny model learns little in 20 steps: tests of the studies' mechanics judge its runs
# against ℓ0 (floor: initial), so that LRs near 0.01 count as stable as they did before the
# unigram floor; the floor itself is tested in test_stability and test_pipeline.
LENIENT = {"train": {**TINY["train"], "stability": {"floor": "initial"}}}


def study_experiment(tmp_path: Path, **sections: Any) -> Experiment:
    """The tiny experiment with the lenient floor and these sections (search:, max_lr:)."""
    from ablate.core.load import load_experiment

    return load_experiment(write_experiment(tmp_path / "e.yaml", **{**LENIENT, **sections}))


def simulated_experiment(tmp_path: Path, **sections: Any) -> Experiment:
    """The tiny experiment on the simulator (``runtime.backend: simulate``, the default truth:
    every run in milliseconds) with these sections: for tests of orchestration, reuse,
    resume, claims and studies, which do not need a model to train. Its studies are in a
    journal file unless ``storage`` is given: SQLite's transactions took two thirds of a
    simulated study's time (tests/launch/test_storage.py covers every storage)."""
    from ablate.core.load import load_experiment

    doc = {
        "runtime": {"backend": "simulate"},
        "storage": f"journal:{tmp_path / 'studies.log'}",
        **sections,
    }
    return load_experiment(write_experiment(tmp_path / "e.yaml", **doc))


def study_trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    """The trials of study ``name`` in the storage at ``url``."""
    import optuna

    from ablate.launch.storage import open_storage

    return optuna.load_study(study_name=name, storage=open_storage(url)).trials


def storage_of_kind(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """A fresh storage URL of ``kind``: sqlite, journal or postgres (the suite's own server)."""
    if kind == "postgres":
        return request.getfixturevalue("postgres").new_database()
    return (
        f"sqlite:///{tmp_path / 'study.db'}"
        if kind == "sqlite"
        else f"journal:{tmp_path / 'j.log'}"
    )


def search_workers(path: Path, url: str, workers: int) -> list[subprocess.Popen]:
    """``workers`` separate ``ablate search`` processes on one storage, started together."""
    return [
        subprocess.Popen(
            [sys.executable, "-m", "ablate.cli", "search", str(path), "--storage", url]
            + ["--workers", "1", "--threads", "1"],
            cwd=path.parent,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(workers)
    ]


def ablate_process(*args: str, cwd: Path, **kw: Any) -> subprocess.Popen:
    """``python -m ablate.cli *args`` started in ``cwd``, unbuffered, stderr into stdout."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "ablate.cli", *args],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kw,
    )


@pytest.fixture(scope="session", autouse=True)
def _scan_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Token-file scans cached in the session's temporary folder, not the user's ~/.cache
    (subprocesses inherit it)."""
    before = os.environ.get("ABLATE_CACHE")
    os.environ["ABLATE_CACHE"] = str(tmp_path_factory.mktemp("cache"))
    yield
    if before is None:
        os.environ.pop("ABLATE_CACHE", None)
    else:
        os.environ["ABLATE_CACHE"] = before


TRAINING_ALLOWED = {"now": True}  # whether the test being set up or run may train


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a test's fixtures are set up: may it train? Guard Lightning's fit if imported."""
    TRAINING_ALLOWED["now"] = any(item.get_closest_marker(m) for m in ("trains", "slow"))
    _guard_fit()


def _guard_fit() -> None:
    """Make ``Trainer.fit`` fail in a test marked neither ``trains`` nor ``slow`` (once
    Lightning is imported; a fixture that trains fails the test that set it up)."""
    module = sys.modules.get("lightning.pytorch.trainer.trainer")
    if module is None or getattr(module.Trainer.fit, "guarded", False):
        return
    fit = module.Trainer.fit

    def guarded_fit(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not TRAINING_ALLOWED["now"]:
            pytest.fail("this test trains: mark it @pytest.mark.trains (make test-fast skips it)")
        return fit(self, *args, **kwargs)

    guarded_fit.guarded = True  # type: ignore[attr-defined]
    module.Trainer.fit = guarded_fit


def unrendered_figure(draw: Any, path: Path) -> None:
    """Stands in for ``save_figure``: the figure is never drawn; an empty file takes its place."""
    path.write_bytes(b"")


@pytest.fixture
def unrendered_figures(monkeypatch: pytest.MonkeyPatch) -> None:
    """The report's figures are not drawn (an empty PNG in each one's place; which figures exist
    is still decided from the data): for tests of orchestration, which read the report's text
    and tables and would spend half their time in matplotlib. tests/report draws and checks
    every figure."""
    from ablate.report import builder

    monkeypatch.setattr(builder, "save_figure", unrendered_figure)


@pytest.fixture
def tiny_experiment(tmp_path: Path) -> Path:
    """Path of a tiny experiment file in a temporary folder."""
    return write_experiment(tmp_path / "tiny.yaml")


def postgres_bin() -> Path | None:
    """The folder of PostgreSQL's server programs (``initdb``, ``postgres``), if installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).resolve().parent
    installed = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    return installed[-1].parent if installed else None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@dataclass
class PostgresServer:
    """A throw-away PostgreSQL server on 127.0.0.1 (trust authentication, user ``ablate``)."""

    port: int

    def new_database(self) -> str:
        """Create an empty database and return its SQLAlchemy URL."""
        import psycopg

        name = f"t{uuid.uuid4().hex[:12]}"
        connection = psycopg.connect(
            host="127.0.0.1", port=self.port, user="ablate", dbname="postgres", autocommit=True
        )
        with connection.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
        connection.close()
        return f"postgresql://ablate@127.0.0.1:{self.port}/{name}"


def _wait_for_server(server: subprocess.Popen, port: int, log: Path) -> None:
    import psycopg

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"postgres exited with {server.returncode}: {log.read_text()[-2000:]}")
        try:
            psycopg.connect(host="127.0.0.1", port=port, user="ablate", dbname="postgres").close()
            return
        except psycopg.OperationalError:
            time.sleep(0.2)
    pytest.fail(f"postgres did not accept connections within 60 s: {log.read_text()[-2000:]}")


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server the suite starts itself (Debian's ``postgresql`` package).

    Skipped when PostgreSQL is not installed, unless ``ABLATE_REQUIRE_POSTGRES`` is set (as
    ``.ci/run`` does after installing it), where that is a failure.
    """
    bindir = postgres_bin()
    if bindir is None:
        message = "PostgreSQL is not installed (Debian: apt-get install postgresql)"
        if os.environ.get("ABLATE_REQUIRE_POSTGRES"):
            pytest.fail(message)
        pytest.skip(message)
    root = Path(tempfile.mkdtemp(prefix="ablate-pg-"))
    user = "postgres" if os.geteuid() == 0 else None  # the server refuses to run as root
    if user:
        shutil.chown(root, user)
    data, log = root / "data", root / "server.log"
    subprocess.run(
        [bindir / "initdb", "-D", data, "-A", "trust", "-U", "ablate", "-E", "UTF8", "--no-sync"],
        check=True,
        capture_output=True,
        user=user,
    )
    port = _free_port()
    with log.open("w") as out:
        server = subprocess.Popen(
            [bindir / "postgres", "-D", data, "-p", str(port), "-h", "127.0.0.1", "-k", root]
            + ["-F", "-c", "max_connections=300"],
            stdout=out,
            stderr=subprocess.STDOUT,
            user=user,
        )
    try:
        _wait_for_server(server, port, log)
        yield PostgresServer(port)
    finally:
        server.send_signal(signal.SIGINT)  # fast shutdown: disconnects this process's sessions
        server.wait(timeout=60)
        shutil.rmtree(root, ignore_errors=True)


def max_lr_result(variant: str, edges: dict[int, float], **checked: Any) -> Any:
    """A variant's max-LR result as the stage returns it (and the report reads it back), for
    seeds whose true edges are ``edges`` (stable at and below), bracketed on the default
    lattice; ``checked`` sets fields as the check against the store does (monotone,
    checked_runs, contradictions, margins) or the probes."""
    from dataclasses import replace

    from ablate.core.boundary import bracket_seed, variant_boundary
    from ablate.core.studies import BoundaryResult

    bounds = [
        bracket_seed(lambda lr, edge=edge: lr <= edge, seed, 1e-3, (1e-6, 100.0))
        for seed, edge in edges.items()
    ]
    result = BoundaryResult(
        variant=variant,
        study=f"{variant}-max_lr",
        seeds=list(edges),
        per_octave=8,
        seed_bounds=bounds,
        boundary=variant_boundary(bounds),
        divergence_bounds=[],
        divergence=None,
        probes=[],
        run_ids=[],
    )
    return replace(result, **checked)
