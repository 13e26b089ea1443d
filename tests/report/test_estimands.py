"""The plan's estimands measured on stored runs: a run that diverged counts as the worst and the
loss estimand goes to ranks; the per-seed values each verdict rests on are the ones written to
answer_seeds.csv."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablate.report.estimands import loss_finding, outcome_differences
from ablate.report.plan import MATCHED, Estimand
from ablate.report.verdict import Word


def _runs(rms: list[float | None], diverged: set[int] = frozenset()) -> pd.DataFrame:
    rows = []
    for seed, loss in enumerate(rms):
        rows.append(("ln", seed, "finished", True, 2.0 + 0.01 * seed))
        failed = seed in diverged
        status, value = ("diverged", None) if failed else ("finished", loss)
        rows.append(("rms", seed, status, not failed, value))
    return pd.DataFrame(rows, columns=["variant", "seed", "status", "stable", "final_val_loss"])


ESTIMAND = Estimand(MATCHED, "rms", "ln", "quality", "difference", 0.02, True, 1, 1.0, 0.05)


def test_a_run_that_diverged_is_the_worst_outcome_and_two_a_tie() -> None:
    runs = _runs([1.99, 2.0, None, 2.05], diverged={2})
    both = pd.concat(
        [
            runs,
            pd.DataFrame(
                [("ln", 4, "diverged", False, None), ("rms", 4, "diverged", False, None)],
                columns=runs.columns,
            ),
        ]
    )
    diffs = outcome_differences(both, "rms", "ln", "final_val_loss")
    assert diffs[2] == math.inf and diffs[4] == 0.0  # both diverged: a tie
    assert diffs[0] == pytest.approx(-0.01) and diffs[3] == pytest.approx(0.02)


def test_the_loss_estimand_goes_to_ranks_where_a_run_did_not_learn() -> None:
    clean = loss_finding(_runs([1.95, 1.96, 1.97, 1.98, 1.99]), ESTIMAND, 100.0)
    diffs = np.array([1.95 - 2.0, 1.96 - 2.01, 1.97 - 2.02, 1.98 - 2.03, 1.99 - 2.04])
    low, high = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)
    assert not clean.estimate.ranked
    assert (clean.estimate.low, clean.estimate.high) == (pytest.approx(low), pytest.approx(high))
    lost = loss_finding(_runs([1.95, 1.96, None, 1.98, 1.99, 1.94, 1.93], {2}), ESTIMAND, 100.0)
    assert lost.estimate.ranked and lost.estimate.seeds == 7
    assert dict(lost.values)[2] == math.inf  # the seed it rests on, the worst
    assert lost.verdict.word is Word.INCONCLUSIVE  # a diverged run counts against rms
    assert lost.diverged == 1 and clean.diverged == 0  # on ranks for the one that diverged
