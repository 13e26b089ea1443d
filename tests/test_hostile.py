"""Hostile inputs: every malformed experiment or data file in ``tests/hostile/`` is refused.

Each file starts with ``# expect: FRAGMENT``, the part of the one-line error it must produce
(a file that is not text at all expects "not UTF-8 text"). ``ablate run`` and ``ablate
validate`` must exit 2 with one line on stderr that names the file, and must leave a results
and a report folder that already hold an experiment byte-for-byte as they were.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from conftest import REPO, write_experiment

from ablate.cli import main, os_error_line
from ablate.core import store

HOSTILE = sorted((REPO / "tests" / "hostile").glob("*.yaml"))


def expected_fragment(path: Path) -> str:
    """The ``# expect:`` header of a hostile file ("not UTF-8 text" for a binary file); a text
    file without one is a broken test case, not a pass."""
    data = path.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "not UTF-8 text"
    head = data.split(b"\n", 1)[0]
    if not head.startswith(b"# expect: "):
        pytest.fail(f"{path.name}: starts without '# expect: FRAGMENT'")
    return head.removeprefix(b"# expect: ").decode("utf-8").strip()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` with its bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """A results and a report folder that already hold an experiment named like the default."""
    for rel in ("results/hostile/run1/summary.json", "results/hostile/experiment.json"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text('{"status": "finished"}\n')
    (tmp_path / "reports" / "hostile").mkdir(parents=True)
    (tmp_path / "reports" / "hostile" / "report.md").write_text("# kept\n")
    return tmp_path


@pytest.mark.parametrize("path", HOSTILE, ids=[p.stem for p in HOSTILE])
def test_hostile_file_gets_one_line_exit_2_and_changes_nothing(
    path: Path, stored: Path, capsys: pytest.CaptureFixture
) -> None:
    before = snapshot(stored)
    results, reports = stored / "results", stored / "reports"
    for command in (
        ["run", str(path), "--results-dir", str(results), "--report-dir", str(reports)],
        ["validate", str(path)],
    ):
        assert main(command) == 2, command
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1, err
        assert err.startswith(f"ablate {command[0]}: error: {path}"), err
        assert expected_fragment(path) in err, err
    assert snapshot(stored) == before


@pytest.mark.parametrize(
    "error, words",
    [(errno.EROFS, "Read-only file system"), (errno.ENOSPC, "No space left on device")],
)
@pytest.mark.usefixtures("unrendered_figures")
def test_unwritable_results_folder_is_one_line_and_keeps_stored_results(
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
    error: int,
    words: str,
) -> None:
    """The file-system error is injected into the store's atomic write (the suite runs as root
    here, where chmod cannot make a folder read-only). The runs are simulated: they write
    through the same store a trained run does."""
    simulated = {"runtime": {"backend": "simulate"}}
    path = write_experiment(tmp_path / "tiny.yaml", seeds=[0], **simulated)
    results, reports = tmp_path / "results", tmp_path / "reports"
    argv = ["run", str(path), "--results-dir", str(results), "--report-dir", str(reports)]
    assert main([*argv, "--workers", "1"]) == 0
    before = snapshot(tmp_path)
    write_experiment(tmp_path / "tiny.yaml", seeds=[0, 1], **simulated)  # the plan must be written

    def fail(fd: int) -> None:
        raise OSError(error, os.strerror(error))

    monkeypatch.setattr(store.os, "fsync", fail)
    capsys.readouterr()
    assert main([*argv, "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert words == os.strerror(error)
    # one line: the file-system error, and that stored files are unchanged (cli.os_error_line)
    assert err.splitlines() == [f"ablate run: error: {os_error_line(OSError(error, words))}"], err
    after = snapshot(tmp_path)
    del before["tiny.yaml"], after["tiny.yaml"]
    assert after == before  # no temporary file left, nothing overwritten


@contextmanager
def small_file_system(folder: Path, size: str) -> Iterator[Callable[[str], None]]:
    """A tmpfs of ``size`` mounted at ``folder`` (root only); yields a function that grows it
    in place (``mount -o remount``, contents kept). Skips where mounting is not permitted."""
    folder.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"a real full disk needs mount (root): {mounted.stderr.decode().strip()}")

    def grow(to: str) -> None:
        remount = ["mount", "-o", f"remount,size={to}", str(folder)]
        subprocess.run(remount, check=True, capture_output=True)

    try:
        yield grow
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


def _ablate_run(path: Path, results: Path, reports: Path) -> int:
    folders = ["--results-dir", str(results), "--report-dir", str(reports)]
    return main(["run", str(path), "--workers", "1", *folders])


def _losses(results: Path) -> dict[str, float]:
    summaries = [json.loads(p.read_text()) for p in results.glob("tiny/*/summary.json")]
    return {s["run_id"]: s["final_val_loss"] for s in summaries}


@pytest.mark.slow
@pytest.mark.usefixtures("unrendered_figures")  # the results are the point, not the report
def test_a_results_folder_that_fills_up_stops_the_command_and_loses_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_experiment(tmp_path / "tiny.yaml")  # 4 runs of about 80 KiB each
    assert _ablate_run(path, tmp_path / "roomy", tmp_path / "reports") == 0
    with small_file_system(tmp_path / "small", "200k") as grow:  # two runs fit, not three
        results = tmp_path / "small" / "results"
        capsys.readouterr()
        assert _ablate_run(path, results, tmp_path / "reports") == 1
        out, err = capsys.readouterr()
        error = [line for line in err.splitlines() if "ablate run: error:" in line]
        assert len(error) == 1 and str(results) in error[0], err
        assert "could not be stored" in error[0] and "no further run starts" in error[0]
        assert "MiB free there now" in error[0]  # torch names a short write, not the disk
        assert out.count("started ") == 3  # the fourth never started
        kept = _losses(results)
        assert 0 < len(kept) < 4  # finished runs kept; the one that hit the fault is no result
        assert all(
            kept[run_id] == loss
            for run_id, loss in _losses(tmp_path / "roomy").items()
            if run_id in kept
        )
        grow("4m")  # room made: the rerun trains what is missing, with the undisturbed bits
        assert _ablate_run(path, results, tmp_path / "reports") == 0
        assert _losses(results) == _losses(tmp_path / "roomy")
