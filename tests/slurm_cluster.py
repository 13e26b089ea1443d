"""A single-node Slurm cluster the Slurm tests start themselves, bound to loopback.

munged, slurmctld and slurmd (Debian's ``munge``, ``slurmctld``, ``slurmd`` and
``slurm-client`` packages) run as this test process's children from a slurm.conf in a
temporary folder: ``proctrack/linuxproc``, ``task/none``, ``select/cons_tres``, no accounting
(so nothing may read job state through ``sacct``), one node named ``localhost``. It comes up
in about 2 s. The tests skip when Slurm is not installed, unless ``ABLATE_REQUIRE_SLURM`` is
set (as ``.ci/run`` does after installing it), where that is a failure.

``python tests/slurm_cluster.py COMMAND...`` runs a command on such a cluster (as root), e.g.
``ablate run experiments/smoke.yaml --launcher slurm`` to try the launcher on one machine.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

DAEMONS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "mungekey")


def _sbin(name: str) -> str | None:
    return shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/bin")


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _node_line() -> str:
    """The node's CPUs and a memory below the real one, as ``slurmd -C`` reports them."""
    found = subprocess.run([_sbin("slurmd"), "-C"], capture_output=True, text=True, check=True)
    fields = dict(part.split("=", 1) for part in found.stdout.split()[:-1] if "=" in part)
    memory = int(int(fields.get("RealMemory", "2048")) * 0.8)
    return (
        f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={fields['CPUs']} "
        f"RealMemory={memory} State=UNKNOWN"
    )


def slurm_conf(root: Path, socket_path: Path) -> str:
    """The cluster's slurm.conf: state, spool, logs and pids under ``root``."""
    return "\n".join(
        [
            "ClusterName=ablate-test",
            "SlurmctldHost=localhost(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "CommunicationParameters=NoCtldInAddrAny,NoInAddrAny",
            f"AuthInfo=socket={socket_path}",
            "SlurmUser=root",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "AccountingStorageType=accounting_storage/none",
            "JobAcctGatherType=jobacct_gather/none",
            "MpiDefault=none",
            "ReturnToService=2",
            "JobRequeue=1",
            "MinJobAge=600",
            "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",  # start at once
            "KillWait=1",  # scancel: SIGTERM, then SIGKILL 1 s later (clusters: 30 s)
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            _node_line(),
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


@dataclass
class SlurmCluster:
    """The running cluster: its configuration file (``SLURM_CONF`` points at it)."""

    conf: Path
    root: Path

    def log_tail(self) -> str:
        """The last lines of the controller's and the node's logs (for a failing test)."""
        return "\n".join(
            (self.root / name).read_text(errors="replace")[-1500:]
            for name in ("slurmctld.log", "slurmd.log")
            if (self.root / name).exists()
        )


def _start_munge(root: Path) -> tuple[subprocess.Popen, Path]:
    sockets = root / "munge"
    sockets.mkdir(mode=0o755)
    key = root / "munge.key"
    subprocess.run([_sbin("mungekey"), "--create", f"--keyfile={key}"], check=True)
    shutil.chown(key, "munge", "munge")
    key.chmod(0o400)
    shutil.chown(sockets, "munge", "munge")
    socket_path = sockets / "munge.socket"
    daemon = subprocess.Popen(
        [_sbin("munged"), "--foreground", f"--key-file={key}", f"--socket={socket_path}"]
        + [f"--pid-file={sockets / 'munged.pid'}", f"--log-file={sockets / 'munged.log'}"]
        + [f"--seed-file={sockets / 'munged.seed'}", "--force"],
        user="munge",
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not socket_path.exists():
        if daemon.poll() is not None or time.monotonic() > deadline:
            raise ClusterError(f"munged did not start ({daemon.poll()})")
        time.sleep(0.05)
    return daemon, socket_path


def _wait_idle(cluster: SlurmCluster, daemons: list[subprocess.Popen]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if any(d.poll() is not None for d in daemons):
            raise ClusterError(f"a Slurm daemon exited:\n{cluster.log_tail()}")
        state = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
        if state.stdout.strip() == "idle":
            return
        time.sleep(0.1)
    raise ClusterError(f"the Slurm node did not become idle within 30 s:\n{cluster.log_tail()}")


def _stop(daemons: list[subprocess.Popen]) -> None:
    subprocess.run(["scancel", "--full", "--user=root"], capture_output=True)
    for daemon in reversed(daemons):  # slurmd, slurmctld, then munged
        daemon.terminate()
        try:
            daemon.wait(timeout=20)
        except subprocess.TimeoutExpired:
            daemon.kill()
            daemon.wait()


class ClusterError(RuntimeError):
    """The cluster did not come up (its logs' last lines say why)."""


def missing_programs() -> str | None:
    """Why a cluster cannot start here, or None."""
    missing = [name for name in DAEMONS if _sbin(name) is None]
    if missing:
        return f"missing {', '.join(missing)}; Debian: apt-get install slurmctld slurmd munge"
    if os.geteuid() != 0:
        return "the test cluster's daemons run as root"
    return None


@contextmanager
def running_cluster() -> Iterator[SlurmCluster]:
    """Start munged, slurmctld and slurmd; ``SLURM_CONF`` names the cluster meanwhile; all
    of them (and their jobs) are stopped on the way out."""
    root = Path(tempfile.mkdtemp(prefix="ablate-slurm-"))
    root.chmod(0o755)
    for folder in ("state", "spool"):
        (root / folder).mkdir()
    daemons: list[subprocess.Popen] = []
    saved = os.environ.get("SLURM_CONF")
    try:
        munged, socket_path = _start_munge(root)
        daemons.append(munged)
        conf = root / "slurm.conf"
        conf.write_text(slurm_conf(root, socket_path))
        os.environ["SLURM_CONF"] = str(conf)
        cluster = SlurmCluster(conf, root)
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        daemons.append(subprocess.Popen([_sbin("slurmctld"), "-D", "-f", conf], **quiet))
        daemons.append(
            subprocess.Popen([_sbin("slurmd"), "-D", "-N", "localhost", "-f", conf], **quiet)
        )
        _wait_idle(cluster, daemons)
        yield cluster
    finally:
        _stop(daemons)
        if saved is None:
            os.environ.pop("SLURM_CONF", None)
        else:
            os.environ["SLURM_CONF"] = saved
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def slurm_cluster() -> Iterator[SlurmCluster]:
    """A single-node Slurm cluster on loopback, stopped (with its jobs) afterwards."""
    why = missing_programs()
    if why:
        message = f"Slurm cannot start here ({why})"
        if os.environ.get("ABLATE_REQUIRE_SLURM"):
            pytest.fail(message)
        pytest.skip(message)
    try:
        with running_cluster() as cluster:
            yield cluster
    except ClusterError as exc:
        pytest.fail(str(exc))


if __name__ == "__main__":  # python tests/slurm_cluster.py COMMAND...: run it on the cluster
    if len(sys.argv) < 2 or missing_programs():
        sys.exit(f"usage: python {sys.argv[0]} COMMAND... ({missing_programs() or 'as root'})")
    with running_cluster():
        sys.exit(subprocess.run(sys.argv[1:]).returncode)
