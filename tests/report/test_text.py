"""The report's tables in words: the unstable-runs table names how each run broke; ratios
keep their digits."""

from __future__ import annotations

import pandas as pd

from ablate.report.text import ratio_text, unstable_runs


def test_unstable_runs_tell_a_run_still_improving_from_a_collapse_and_a_divergence() -> None:
    main = pd.DataFrame(
        {
            "variant": ["ln", "ln", "ln", "ln"],
            "seed": [0, 1, 2, 3],
            "status": ["finished", "finished", "diverged", "finished"],
            "stable": [False, False, False, True],
            "unstable_reason": [
                "not learned yet: final val loss 3.3 not below ..., still improving (0.4 ...)",
                "collapsed: final val loss 3.3 not below ...",
                "diverged: non-finite loss (nan)",
                None,
            ],
            "unstable_step": [100, 100, 7, None],
            "diverged_step": [None, None, 7, None],
            "diverged_reason": [None, None, "non-finite loss (nan)", None],
            "nonfinite_activations": [0, 0, 3, 0],
            "nonfinite_grads": [0, 0, 5, 0],
        }
    )
    table = unstable_runs(main, ["ln"])
    assert list(table["status"]) == ["not learned yet", "collapsed", "diverged"]


def test_a_ratio_keeps_its_digits_below_a_tenth() -> None:
    assert ratio_text(2.375, 1.13, 4.2) == "2.38 [1.13, 4.20]"
    assert ratio_text(0.0123, 0.00412, 0.0371) == "0.0123 [0.00412, 0.0371]"  # not 0.01 [0, 0.04]
    assert ratio_text(5575.432) == "5575.43"


def test_a_budget_is_said_once_per_distinct_budget() -> None:
    import pandas as pd

    from ablate.report.text import budget_text

    runs = pd.DataFrame(
        {"planned_tokens": [102400, 102400, 409600], "steps": [100, 37, 400]}  # one diverged
    )
    assert budget_text(runs) == (
        "100 steps, 102,400 tokens per run; 400 steps, 409,600 tokens per run"
    )
    assert budget_text(pd.DataFrame()) == "budget not recorded"
