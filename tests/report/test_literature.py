"""reports/literature/: the suite's summary is what gathering the committed reports' claims
gives, Holm-adjusted over all of them, and the README quotes each claim's verdict."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO

from ablate.report.literature import gather, main, summary_markdown

LITERATURE = REPO / "reports" / "literature"


def test_the_committed_summary_is_what_gathering_the_committed_claims_gives() -> None:
    gathered = gather(LITERATURE)
    committed = pd.read_csv(LITERATURE / "summary.csv")
    pd.testing.assert_frame_equal(gathered, committed, check_dtype=False)
    assert (LITERATURE / "summary.md").read_text(encoding="utf-8") == summary_markdown(gathered)
    assert len(gathered) >= 5 and gathered["report"].nunique() >= 5
    tested = gathered.dropna(subset=["p_value"])  # a claim of fewer than 2 pairs has none
    assert (tested["holm_p"] >= tested["p_value"]).all()  # an adjustment only raises p


def test_the_readme_gives_each_claims_verdict_on_a_line_of_its_own() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    for row in gather(LITERATURE).itertuples():
        lines = [line for line in readme if f": {row.statement} |" in line]
        assert len(lines) == 1, row.statement
        assert f"**{row.verdict}**" in lines[0] and f"literature/{row.report}/" in lines[0]


def test_a_folder_without_claims_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no */claims.csv" in err
