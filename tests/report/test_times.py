"""reports/times.csv: each report's runs and run time from runs.csv, its wall time from the
job records copied into jobs.csv, and what ``ablate validate`` prints of it."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from conftest import REPO

from ablate.report.times import TYPES, committed_time, time_row, times_table


def _report(folder: Path, walls: list[float], jobs: list[dict] | None) -> None:
    folder.mkdir(parents=True)
    (folder / "report.md").write_text("# x\n")
    runs = {"run_id": [f"r{i}" for i in range(len(walls))], "experiment": "x", "wall_time_s": walls}
    pd.DataFrame(runs).to_csv(folder / "runs.csv", index=False)
    if jobs is not None:
        pd.DataFrame(jobs).to_csv(folder / "jobs.csv", index=False)


JOB = {"workers": 2, "cores": 2, "cpu": "X", "machine": "idle"}


def test_a_row_sums_the_runs_and_the_invocations(tmp_path: Path) -> None:
    _report(tmp_path / "x", [30.0, 90.0, 60.0], [{**JOB, "wall_s": 60.0}, {**JOB, "wall_s": 54.0}])
    row = time_row(tmp_path / "x", tmp_path)
    assert row == {
        "report": "x", "experiment": "x", "runs": 3, "run_minutes": 3.0, "wall_min": 1.9,
        "invocations": 2, "workers": "2", "cores": "2", "cpu": "X", "machine": "idle",
    }  # fmt: skip
    _report(tmp_path / "old", [30.0], None)
    old = time_row(tmp_path / "old", tmp_path)  # no wall time recorded: none given
    assert old == {"report": "old", "experiment": "x", "runs": 1, "run_minutes": 0.5}


def test_validate_quotes_the_report_named_after_the_experiment(tmp_path: Path) -> None:
    _report(tmp_path / "reports/x_elsewhere", [30.0], [{**JOB, "wall_s": 600.0}])
    _report(tmp_path / "reports/x", [30.0, 30.0], None)
    times_table(tmp_path / "reports").to_csv(tmp_path / "reports/times.csv", index=False)
    (tmp_path / "experiments").mkdir()
    row = committed_time(tmp_path / "experiments/x.yaml", "x")
    assert row is not None and row.name == "x" and row["runs"] == 2
    assert pd.isna(row["wall_min"])  # the other report's wall time is not this one's
    assert committed_time(tmp_path / "experiments/x.yaml", "y") is None
    assert committed_time(Path("/x.yaml"), "x") is None  # a file outside any checkout


def test_measured_data_with_a_card_is_timed_like_a_report(tmp_path: Path) -> None:
    _report(tmp_path / "built", [60.0], None)
    _report(tmp_path / "data", [60.0, 60.0], None)
    (tmp_path / "data" / "report.md").rename(tmp_path / "data" / "README.md")  # a data card
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "README.md").write_text("# no runs here\n")
    table = times_table(tmp_path)
    assert table["report"].tolist() == ["built", "data"] and table["runs"].tolist() == [1, 2]


def test_the_committed_table_is_what_the_committed_reports_record() -> None:
    committed = pd.read_csv(REPO / "reports" / "times.csv", dtype=TYPES)
    built = times_table(REPO / "reports")
    pd.testing.assert_frame_equal(built, committed, check_dtype=False)
