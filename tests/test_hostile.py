"""Hostile inputs: every malformed experiment or data file in ``tests/hostile/`` is refused.

Each file starts with ``# expect: FRAGMENT``, the part of the one-line error it must produce
(a file that is not text at all expects "not UTF-8 text"). ``ablate run`` and ``ablate
validate`` must exit 2 with one line on stderr that names the file, and must leave a results
and a report folder that already hold an experiment byte-for-byte as they were.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from conftest import REPO, write_experiment

from ablate.cli import main
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
    assert len(err.splitlines()) == 1 and words in err and "unchanged" in err, err
    after = snapshot(tmp_path)
    del before["tiny.yaml"], after["tiny.yaml"]
    assert after == before  # no temporary file left, nothing overwritten
