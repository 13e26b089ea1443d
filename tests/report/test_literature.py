"""reports/literature/: the suite's summary is what gathering the committed reports' claims
gives, the evidence judged again as one family (Holm over it alone), mechanism checks and tuned
claims tested at one LR apart, no "no verdict" without a side; the README quotes each evidence
claim's verdict."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO

from ablate.report.claims import NO_VERDICT, decision_text
from ablate.report.literature import gather, main, summary_markdown

LITERATURE = REPO / "reports" / "literature"


def test_the_committed_summary_is_what_gathering_the_committed_claims_gives() -> None:
    gathered = gather(LITERATURE)
    committed = pd.read_csv(LITERATURE / "summary.csv").assign(note=lambda f: f["note"].fillna(""))
    pd.testing.assert_frame_equal(gathered, committed, check_dtype=False)
    assert (LITERATURE / "summary.md").read_text(encoding="utf-8") == summary_markdown(gathered)
    assert len(gathered) >= 5 and gathered["report"].nunique() >= 5
    evidence = gathered[gathered["role"] == "evidence"].dropna(subset=["p_value"])
    assert (evidence["p_holm"] >= evidence["p_value"]).all()  # an adjustment only raises p
    assert gathered.loc[gathered["role"] != "evidence", "p_holm"].isna().all()  # outside it


def test_the_summary_keeps_mechanism_checks_apart_and_no_verdict_has_a_side() -> None:
    text = (LITERATURE / "summary.md").read_text(encoding="utf-8")
    evidence, rest = text.split("## Mechanism checks")
    gathered = gather(LITERATURE)
    for row in gathered.itertuples():
        part = rest if row.role == "mechanism check" else evidence
        assert re.search(rf"\| {re.escape(row.statement)} +\|", part), row.statement
    unjudged = gathered[gathered["verdict"] == NO_VERDICT].to_dict("records")
    assert unjudged  # the suite has such claims: each says its side and what it would take
    for row in unjudged:
        assert 0 <= row["on_side"] <= row["pairs"]  # the trained pairs on the claim's side
        assert decision_text(row) in text


def test_the_readme_gives_each_evidence_claims_verdict_on_a_line_of_its_own() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    gathered = gather(LITERATURE)
    for row in gathered[gathered["role"] == "evidence"].itertuples():
        lines = [line for line in readme if f": {row.statement} |" in line]
        assert len(lines) == 1, row.statement
        link = LITERATURE.relative_to(REPO) / row.report / "report.md"
        assert f"**{row.verdict}**" in lines[0] and f"]({link})" in lines[0]


def test_a_folder_without_claims_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(tmp_path)]) == 2
    err = capsys.readouterr().err
    # the one line names what is missing: the message is the point of this exit
    assert err.count("\n") == 1 and "no */claims.csv" in err
