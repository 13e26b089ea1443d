"""The report rebuilt from a store: numbers recomputed from the summaries, files present."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from ablate import store
from ablate.report import build_report


def _store(exp_dir: Path, complete: bool = True) -> None:
    runs = []
    for seed in (0, 1, 2):
        for variant, offset in (("layernorm", 0.0), ("rmsnorm", 0.05)):
            run_id = f"{variant[:2]}{seed}"
            runs.append({"variant": variant, "seed": seed, "run_id": run_id})
            if not complete and (variant, seed) == ("rmsnorm", 2):
                continue
            final = 2.0 + 0.1 * seed + offset
            run_dir = exp_dir / run_id
            store.write_json_atomic(run_dir / "config.json", {"variant": variant, "seed": seed})
            store.write_frame_atomic(
                run_dir / "metrics.csv",
                pd.DataFrame(
                    {
                        "step": [1, 2, 3, 4],
                        "train_loss": [5.0, 4.0, 3.0, 2.5],
                        "val_loss": [None, 3.5, None, final],
                    }
                ),
            )
            store.write_json_atomic(
                run_dir / "summary.json",
                {
                    "run_id": run_id,
                    "variant": variant,
                    "seed": seed,
                    "status": "finished",
                    "final_val_loss": final,
                    "best_val_loss": final,
                    "n_params": 1000 + 10 * (variant == "layernorm"),
                    "tokens_per_s": 500.0,
                },
            )
    store.write_manifest(
        exp_dir,
        {
            "name": "exp",
            "description": "d",
            "variants": ["layernorm", "rmsnorm"],
            "seeds": [0, 1, 2],
            "runs": runs,
        },
    )


def test_report_files_and_numbers(tmp_path: Path) -> None:
    _store(tmp_path / "exp")
    report = build_report(tmp_path / "exp", tmp_path / "rep")
    for name in ("report.md", "variants.md", "variants.csv", "runs.csv", "loss_curves.png"):
        assert (tmp_path / "rep" / name).stat().st_size > 0, name
    table = pd.read_csv(tmp_path / "rep" / "variants.csv").set_index("variant")
    assert table.loc["layernorm", "final_val_loss_mean"] == pytest.approx(2.1)
    assert table.loc["rmsnorm", "final_val_loss_mean"] == pytest.approx(2.15)
    assert table.loc["rmsnorm", "diff_vs_baseline"] == pytest.approx(0.05)
    assert table.loc["rmsnorm", "n_pairs"] == 3
    text = report.markdown.read_text()
    assert "2.1000 ± 0.1000" in text and "0.0500" in text and "ttest_rel" in text
    assert "Incomplete" not in text and report.missing == []


def test_partial_experiment_says_what_is_missing(tmp_path: Path) -> None:
    _store(tmp_path / "exp", complete=False)
    report = build_report(tmp_path / "exp", tmp_path / "rep")
    assert report.missing == ["rmsnorm seed=2"]
    assert "Incomplete" in report.markdown.read_text()
    assert (tmp_path / "rep" / "loss_curves.png").stat().st_size > 0
    assert report.table.set_index("variant").loc["rmsnorm", "n_pairs"] == 2
