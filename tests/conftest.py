"""Shared fixtures: a tiny run configuration and experiment file that train in under a second,
and a PostgreSQL server on loopback started by the tests themselves."""

from __future__ import annotations

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
from typing import Any

import pytest
import yaml

from ablate.core.config import RunConfig
from ablate.core.load import build_run_config
from ablate.core.overrides import apply_overrides

REPO = Path(__file__).resolve().parent.parent

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
    return build_run_config(apply_overrides(TINY, overrides, "test"), "test")


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
