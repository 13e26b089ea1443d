"""What the stored runs say each planned comparison can detect, before more are spent."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import simulated_experiment, write_experiment
from statsmodels.stats.power import TTestPower

from ablate.cli import main
from ablate.core import store
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.launch.expect import simulate_design, simulated_lines
from ablate.launch.pipeline import run_experiment
from ablate.launch.reach import reach_lines, render_reach, stored_reach


@pytest.mark.usefixtures("unrendered_figures")
def test_the_stored_pairs_size_what_min_effect_needs(tmp_path: Path) -> None:
    exp = simulated_experiment(tmp_path, seeds=[0, 1, 2, 3], analysis={"min_effect": 0.01})
    root = tmp_path / "results"
    (empty,) = reach_lines(exp, root)[1:]
    assert empty == "  rmsnorm − layernorm: 0 stored pair(s), nothing to size it from yet"
    run_experiment(exp, results_dir=root, report_dir=tmp_path / "reports")
    runs = store.load_summaries(ExperimentFolder(root / "tiny"))
    table = runs.pivot_table(index="seed", columns="variant", values="final_val_loss")
    diffs = table["rmsnorm"] - table["layernorm"]
    sd = float(diffs.std(ddof=1))
    stored = stored_reach(exp, root)
    assert (stored.where, stored.min_effect, stored.planned_seeds) == ("shared LR", 0.01, 4)
    assert stored.max_seeds is None
    (found,) = stored.comparisons
    assert (found.variant, found.baseline, found.reach.pairs) == ("rmsnorm", "layernorm", 4)
    assert found.reach.sd == pytest.approx(sd)
    head, _ = reach_lines(exp, root)  # the wording: one pin of the printed heading
    assert head == "what the stored shared LR pairs detect (analysis.min_effect 0.01 nats):"
    needed = found.reach.pairs_needed
    assert needed is not None

    def power(pairs: int) -> float:  # two-sided at 0.05: its upper tail (ablate.report.verdict)
        return TTestPower().power(0.01 / sd, pairs, 0.025, alternative="larger")

    assert power(needed) >= 0.8 and (needed == 2 or power(needed - 1) < 0.8)


@pytest.mark.usefixtures("unrendered_figures")
def test_validate_simulate_prints_the_verdicts_and_seeds_and_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    truth = {"run_sd": 0.01, "variants": {"rmsnorm": {"best_loss": 1.69}}}
    path = write_experiment(
        tmp_path / "e.yaml",
        seeds=[0, 1, 2],
        runtime={"simulate": truth},
        decide={"max_seeds": 9},
        storage="postgresql://nobody@127.0.0.1:1/never",  # the preview must not touch it
    )
    monkeypatch.chdir(tmp_path)
    assert main(["validate", str(path), "--simulate"]) == 0
    out = capsys.readouterr().out
    assert "on the simulator (the file's runtime.simulate), this design would report:" in out
    answer = out.split("this design would report:\n", 1)[1]
    assert answer.startswith("- **Quality at matched settings** (both at the file's shared LR")
    assert "rmsnorm − layernorm -0.0" in answer and "**differs from 0" in answer
    assert "The quality answer rests on" in answer
    assert "max_lr" not in out and "running" not in out  # the stages' own lines stay quiet
    assert sorted(p.name for p in tmp_path.iterdir()) == ["e.yaml"]  # nothing stored here
    default = write_experiment(tmp_path / "default.yaml", runtime={"backend": "simulate"})
    head = simulated_lines(simulate_design(load_experiment(default)))[0]
    assert "defaults: every variant the same truth (Δ = 0), iid run noise 0.004, far" in head


@pytest.mark.usefixtures("unrendered_figures")
def test_with_decide_the_plan_says_how_far_seeds_may_go(tmp_path: Path) -> None:
    noisy = {"backend": "simulate", "simulate": {"run_sd": 0.012}}  # 3 seeds do not decide it
    exp = simulated_experiment(tmp_path, seeds=[0, 1, 2], decide={"max_seeds": 7}, runtime=noisy)
    (before,) = stored_reach(exp, tmp_path / "results").comparisons
    assert before.reach.pairs == 0
    run_experiment(exp, results_dir=tmp_path / "results", report_dir=tmp_path / "reports")
    stored = stored_reach(exp, tmp_path / "results")
    used = len(store.read_manifest(ExperimentFolder(tmp_path / "results" / "tiny")).decide["seeds"])
    assert used > 3 and stored.comparisons[0].reach.pairs == used  # the added seeds' pairs
    assert (stored.planned_seeds, stored.max_seeds) == (3, 7)
    (line,) = render_reach(stored)[1:]  # the wording of decide:'s ceiling, pinned once
    assert line.endswith("(the file plans 3, up to 7 with decide:)")
