"""The cost bench: run-steps per decided verdict of a committed report, from its CSVs."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO

from ablate.bench.cost import answer_cost, cost_text, main


def test_the_default_reports_cost_per_decided_verdict() -> None:
    folder = REPO / "reports" / "ln_vs_rms"
    found = answer_cost(folder)
    table = pd.read_csv(folder / "cost.csv").set_index("stage")
    answer = pd.read_csv(folder / "answer.csv")
    decided = answer[~answer["verdict"].isin(["inconclusive", "not estimable"])]
    assert (found.decided, found.verdicts) == (len(decided), len(answer))
    assert found.run_steps == table.loc["all", "run_steps"]
    assert found.per_decided == pytest.approx(found.run_steps / len(decided))
    assert found.by_verdict["divergence edge"] == table.loc["max_lr", "run_steps"]
    fed_by_none = table.drop("all")["feeds"].isna()
    assert found.unused_steps == table.drop("all").loc[fed_by_none, "run_steps"].sum()
    assert cost_text(found).startswith(f"ln_vs_rms: {found.run_steps:,} run-steps")


def test_a_report_without_cost_csv_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([str(REPO / "reports" / "smoke")]) == 0
    assert main([str(tmp_path)]) == 2
    assert len(capsys.readouterr().out.splitlines()) == 2
