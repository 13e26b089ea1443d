"""A stored run is reused only while the data it trained on is the data the file names."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import REPO, write_experiment

from ablate.cli import main
from ablate.core.load import load_experiment
from ablate.launch.freshness import StaleDataError
from ablate.launch.preflight import preflight


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
    summaries = {p: p.read_bytes() for p in stored}
    assert main(["run", str(path), *args]) == 0  # the same text: reused, not trained again
    assert {p: p.read_bytes() for p in stored} == summaries
    text.write_text(text.read_text(encoding="utf-8").replace("the", "teh"), encoding="utf-8")
    capsys.readouterr()
    assert main(["run", str(path), *args]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1
    with pytest.raises(StaleDataError) as refused:
        preflight(load_experiment(path), tmp_path / "results", None)
    assert sorted(run.run_id for run in refused.value.stale) == [p.parent.name for p in stored]
    assert all(run.stored != run.now for run in refused.value.stale)
    assert {p: p.read_bytes() for p in stored} == summaries  # nothing deleted or rewritten
