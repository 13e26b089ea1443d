"""A stored run is reused only while the data it trained on is the data the file names."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, write_experiment

from ablate.cli import main


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")
def test_an_edited_text_file_is_refused_and_nothing_is_deleted(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    text = tmp_path / "corpus.txt"
    text.write_text((REPO / "README.md").read_text(encoding="utf-8") * 2, encoding="utf-8")
    data = {"source": "text_file", "path": str(text)}
    path = write_experiment(tmp_path / "tiny.yaml", data=data, seeds=[0])
    args = ["--results-dir", str(tmp_path / "results"), "--report-dir", str(tmp_path / "rep")]
    assert main(["run", str(path), *args]) == 0
    stored = sorted((tmp_path / "results" / "tiny").glob("*/summary.json"))
    assert len(stored) == 2
    assert main(["run", str(path), *args]) == 0  # the same text: reused
    assert "2 of 2 runs already done" in capsys.readouterr().out
    text.write_text(text.read_text(encoding="utf-8").replace("the", "teh"), encoding="utf-8")
    assert main(["run", str(path), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "2 stored run(s)" in err[0] and "trained on other data" in err[0]
    assert sorted((tmp_path / "results" / "tiny").glob("*/summary.json")) == stored
