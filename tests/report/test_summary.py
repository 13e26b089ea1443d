"""The evidence's comparison lines: a comparison whose runs did not learn says so instead of a
Δ; one that learned gives its Δ, 95% interval and p, and its verdict only as a plan's
estimand."""

from __future__ import annotations

import pandas as pd

from ablate.report.summary import _difference_lines, unlearned_text


def _table(collapsed: int, diverged: int = 0) -> pd.DataFrame:
    rows = [
        {"variant": "layernorm", "runs": 2, "diverged": 0, "collapsed": 0},
        {"variant": "dyt", "runs": 2, "diverged": diverged, "collapsed": collapsed},
    ]
    frame = pd.DataFrame(rows)
    return frame.assign(
        diff_vs_baseline=[float("nan"), 0.5951],
        diff_ci_low=[float("nan"), 0.41],
        diff_ci_high=[float("nan"), 0.78],
        paired_t_p=[float("nan"), 0.02],
        n_pairs=[0, 2],
    )


RUNS = pd.DataFrame(
    [
        {"variant": v, "seed": seed, "status": "finished", "final_val_loss": loss}
        for seed, (ln, dyt) in enumerate([(2.5, 3.05), (2.4, 3.04)])
        for v, loss in (("layernorm", ln), ("dyt", dyt))
    ]
)


def test_collapsed_runs_replace_the_verdict() -> None:
    (line,) = _difference_lines(_table(collapsed=2), RUNS, 0.02, where="at the shared LR")
    assert "dyt − layernorm: not a quality comparison: dyt: 2 of 2 runs collapsed**" in line
    assert "+0.5951" in line and "no verdict is drawn" in line
    assert "excludes zero" not in line and "do not show a difference" not in line


def test_a_run_that_learned_on_both_sides_gives_its_interval_and_no_verdict() -> None:
    (line,) = _difference_lines(_table(collapsed=0), RUNS, 0.02, where="")
    assert "dyt − layernorm: +0.5951** (95% CI [+0.4100, +0.7800], paired t-test p = 0.020" in line
    assert "different" not in line and "plan's estimand" not in line


def test_unlearned_text_counts_both_kinds() -> None:
    row = _table(collapsed=1, diverged=1).iloc[1]
    assert unlearned_text(row) == "dyt: 1 of 2 runs diverged and 1 of 2 runs collapsed"
    assert unlearned_text(_table(0).iloc[0]) is None
    still = _table(collapsed=2).iloc[1].copy()
    still["not_learned_yet"] = 1  # one of the two was still improving at its end
    assert unlearned_text(still) == (
        "dyt: 2 of 2 runs collapsed (1 still improving: not learned yet)"
    )


def test_an_lr_chosen_at_another_warmup_than_trained_is_said() -> None:
    from ablate.core.manifest import Manifest, PlannedRun
    from ablate.report.summary import warmup_moved

    def manifest(tuned_warmup: int) -> Manifest:
        runs = [PlannedRun("ln", s, f"c{s}", "curve", 0.003, 20) for s in (3, 4)]
        runs += [PlannedRun("ln", s, f"t{s}", "tuned", 0.003, tuned_warmup) for s in (0, 1)]
        return Manifest("x", ["ln"], [0, 1], runs)

    assert warmup_moved(manifest(20)) == ""  # chosen at the warmup it trains at
    moved = warmup_moved(manifest(64))
    assert moved.startswith(" at warmup 20, trained at warmup 64:")
