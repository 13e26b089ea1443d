"""What the stored runs say each planned comparison can detect, before more are spent."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import simulated_experiment
from statsmodels.stats.power import TTestPower

from ablate.core import store
from ablate.launch.pipeline import run_experiment
from ablate.launch.reach import reach_lines


@pytest.mark.usefixtures("unrendered_figures")
def test_the_stored_pairs_size_what_min_effect_needs(tmp_path: Path) -> None:
    exp = simulated_experiment(tmp_path, seeds=[0, 1, 2, 3], analysis={"min_effect": 0.01})
    root = tmp_path / "results"
    (empty,) = reach_lines(exp, root)[1:]
    assert empty == "  rmsnorm − layernorm: 0 stored pair(s), nothing to size it from yet"
    run_experiment(exp, results_dir=root, report_dir=tmp_path / "reports")
    runs = store.load_summaries(root / "tiny")
    table = runs.pivot_table(index="seed", columns="variant", values="final_val_loss")
    diffs = table["rmsnorm"] - table["layernorm"]
    sd = float(diffs.std(ddof=1))
    head, line = reach_lines(exp, root)
    assert head == "what the stored shared LR pairs detect (analysis.min_effect 0.01 nats):"
    assert f"paired SD {sd:.4f} over 4 stored pairs" in line and "(the file plans 4)" in line
    needed = int(line.split("±0.01 needs ")[1].split(" pairs")[0])
    power = TTestPower()
    assert power.power(0.01 / sd, needed, 0.05) >= 0.8 > power.power(0.01 / sd, needed - 1, 0.05)
