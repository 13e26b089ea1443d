"""The Answer's sentences: a verdict with its number, interval and level, the digits that keep
an interval end on its side of an edge, no number where it is not estimable, a close call said
in place, and the setting a 2×2 moves between."""

from __future__ import annotations

import math

import pandas as pd

from ablate.report.answer import move_text, ranks_text, said, value_text
from ablate.report.crossover import TwoByTwo
from ablate.report.estimands import Finding
from ablate.report.plan import MATCHED, Estimand
from ablate.report.verdict import Estimate, Word, judge

ESTIMAND = Estimand(MATCHED, "rms", "ln", "quality", "difference", 0.02, True, 4, 0.5, 0.05)


def _said(estimate: Estimate, margin: float = 0.02, values: tuple = ()) -> str:
    return said(Finding(ESTIMAND, judge(estimate, margin), values))


def test_a_verdict_comes_with_its_number_interval_and_level() -> None:
    text = _said(Estimate(-0.0005, -0.0194, +0.0185, 0.99375, 7, "difference", 0.0122))
    assert text == (
        "-0.0005 nats [-0.0194, +0.0185] (99.38% interval, 7 seeds): **equivalent within "
        "±0.02**, a close call"
    )


def test_an_interval_end_keeps_the_digits_that_put_it_on_its_side() -> None:
    ratio = Estimate(1.49, 1.0027570736999392, 2.213, 0.99375, 5, "ratio", 0.2)
    assert value_text(ratio, 1.5) == "×1.49 [1.003, 2.21]"  # 1.00 would read as no effect
    edge = Estimate(0.0, -0.01996, 0.019, 0.99, 7, "difference", 0.01)
    assert value_text(edge, 0.02) == "+0.0000 nats [-0.01996, +0.0190]"  # not -0.0200


def test_an_estimate_that_is_not_estimable_prints_no_number() -> None:
    wide = Estimate(4.21, 0.023, 772.0, 0.99, 5, "ratio", 1.0)
    text = _said(wide, 1.5)
    assert text.startswith("**not estimable with 5 seed(s)") and "772" not in text
    assert "0.023" not in text


def test_an_estimate_by_ranks_says_how_many_seeds_a_divergence_decided() -> None:
    ranked = Estimate(-0.019, -math.inf, 0.065, 0.975, 8, "difference", ranked=True)
    found = Finding(ESTIMAND, judge(ranked, 0.02), ((0, -0.02), (4, -math.inf), (5, 0.01)))
    assert found.diverged == 1 and found.verdict.word is Word.INCONCLUSIVE
    assert value_text(ranked, 0.02) == "-0.0190 nats [-inf, +0.0650]"  # its infinite end too
    text = said(found)
    assert ranks_text(found) in text and found.verdict.text() in text


def test_the_2x2_names_what_moving_between_the_settings_changes() -> None:
    cells = pd.DataFrame({"bb": [1.0], "bv": [1.0], "vb": [1.0], "vv": [1.0]})
    lr_only = TwoByTwo("rms", "ln", (0.00276, 72), (0.00328, 72), cells)
    warmup_only = TwoByTwo("rms", "ln", (0.00195, 108), (0.00195, 103), cells)
    both = TwoByTwo("rms", "ln", (0.00276, 72), (0.00328, 69), cells)
    assert move_text(lr_only) == "from LR 0.00276 to 0.00328 at warmup 72"
    assert move_text(warmup_only) == "from warmup 108 to 103 at LR 0.00195"
    assert move_text(both) == "from LR 0.00276, warmup 72 to LR 0.00328, warmup 69"
