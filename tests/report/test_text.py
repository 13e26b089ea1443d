"""The report's tables in words: the unstable-runs table names how each run broke."""

from __future__ import annotations

import pandas as pd

from ablate.report.text import unstable_runs


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
