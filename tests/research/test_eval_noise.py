"""The evaluation-noise measurement: paired SDs of the same runs on the whole split and on the
fixed windows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, write_experiment

from ablate.cli import main
from ablate.core.folders import ExperimentFolder
from research.eval_noise import eval_noise_table, paired_sds, windows_final
from research.eval_noise import main as eval_noise_main


def test_windows_final_is_each_runs_last_evaluated_step() -> None:
    metrics = pd.DataFrame(
        {
            "run_id": ["a", "a", "a", "b", "b"],
            "step": [20, 10, 15, 10, 20],
            "val_loss": [2.0, 3.0, np.nan, 3.5, 2.5],
        }
    )
    assert windows_final(metrics).to_dict() == {"a": 2.0, "b": 2.5}


def test_paired_sds_compare_the_same_pairs_on_both_evaluations() -> None:
    split = {0: (2.00, 1.99), 1: (2.10, 2.08), 2: (2.05, 2.05)}  # (ln, rms) per seed
    windows = {0: (2.00, 1.95), 1: (2.10, 2.12), 2: (2.05, 2.01)}
    rows, last = [], {}
    for seed, (ln, rms) in split.items():
        for variant, loss, on_windows in [
            ("ln", ln, windows[seed][0]),
            ("rms", rms, windows[seed][1]),
        ]:
            run_id = f"{variant}{seed}"
            rows.append(
                {
                    "run_id": run_id,
                    "group": "main",
                    "variant": variant,
                    "seed": seed,
                    "stable": True,
                    "final_val_loss": loss,
                }
            )
            last[run_id] = on_windows
    table = paired_sds(pd.DataFrame(rows), pd.Series(last), "ln", "rms")
    row = table.iloc[0]
    assert row["group"] == "main" and row["pairs"] == 3
    assert row["paired_sd_split"] == pytest.approx(np.std([-0.01, -0.02, 0.0], ddof=1))
    assert row["paired_sd_windows"] == pytest.approx(np.std([-0.05, 0.02, -0.04], ddof=1))
    assert row["ratio"] == pytest.approx(row["paired_sd_split"] / row["paired_sd_windows"])


@pytest.mark.usefixtures("unrendered_figures")
def test_a_results_folder_without_split_runs_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # its report goes to tmp_path/reports
    path = write_experiment(tmp_path / "e.yaml", runtime={"backend": "simulate"})
    assert main(["run", str(path)]) == 0
    assert eval_noise_table(ExperimentFolder(tmp_path / "results" / "tiny")).empty
    with pytest.raises(SystemExit) as exit_:
        eval_noise_main([str(tmp_path / "results" / "tiny")])
    assert exit_.value.code == 1


def test_the_docs_quote_the_committed_measurement() -> None:
    table = pd.read_csv(REPO / "reports" / "bench" / "eval_noise.csv")
    doc = (REPO / "docs" / "results.md").read_text(encoding="utf-8")
    assert table.to_markdown(index=False, floatfmt=".4f") in doc
    assert set(table["group"]) == {"main", "tuned"}
