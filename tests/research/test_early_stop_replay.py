"""The early stop's replay on the committed curves: a draw's miss, flip and regret from known
values, and the committed curves read back as the curve stage's lattices."""

from __future__ import annotations

import pandas as pd
import pytest

from research.early_stop import (
    Curve,
    draws,
    every_curve,
    lattices,
    replay,
    replay_twice,
    second_hold,
    table,
)


def _curve() -> Curve:
    lrs = [0.001, 0.002, 0.004]
    at = pd.DataFrame({0: [3.0, 2.5, 2.6], 1: [3.1, 2.6, 2.5]}, index=lrs)  # at step 64
    final = pd.DataFrame({0: [2.01, 2.0, 2.1], 1: [2.01, 2.0, 2.1]}, index=lrs)
    return Curve("made", "v", {64: at, 256: final}, final)


def test_a_point_stopped_within_min_effect_of_the_best_is_a_miss() -> None:
    found = replay(_curve(), (0, 1), 64, 0.2)
    assert (found.points, found.stopped) == (3, 1)  # 0.001: 0.5 above the best at step 64
    assert found.miss  # it ended 0.01 above the best, within min_effect (0.02)
    assert found.regret == 0.0 and not found.flip


def test_a_far_point_is_no_miss_and_a_flip_is_counted() -> None:
    curve = _curve()
    curve.final.loc[0.001] = [2.5, 2.5]  # ends far above: stopping it is right
    curve.final.loc[0.004] = [1.9, 1.9]  # the best at the end, not at step 64
    found = replay(curve, (0, 1), 64, 0.2)
    assert not found.miss and found.flip and found.regret == 0.0
    assert len(draws([curve], 64, 0.2)) == 1  # one subset of two seeds or more


def test_a_second_hold_stops_among_the_points_the_first_kept() -> None:
    lrs = [0.001, 0.002, 0.004, 0.008]
    at64 = pd.DataFrame({0: [3.0, 2.5, 2.6, 2.6], 1: [3.1, 2.6, 2.5, 2.6]}, index=lrs)
    at128 = pd.DataFrame({0: [2.9, 2.2, 2.3, 2.5], 1: [2.9, 2.3, 2.2, 2.5]}, index=lrs)
    final = pd.DataFrame({0: [2.6, 2.0, 2.0, 2.3], 1: [2.6, 2.0, 2.0, 2.3]}, index=lrs)
    curve = Curve("made", "v", {64: at64, 128: at128, 256: final}, final, 64)
    found = replay_twice(curve, (0, 1), (64, 0.2), 128, 0.2)
    assert (found.points, found.stopped) == (4, 1)  # 0.008 (0.25 above at 128); 0.001 at 64
    assert not found.miss and found.regret == 0.0
    assert replay_twice(curve, (0, 1), (64, 0.2), 128, 0.4).stopped == 0
    final.loc[0.008] = [2.01, 2.01]  # now it ends within min_effect of the best: a miss
    assert replay_twice(curve, (0, 1), (64, 0.2), 128, 0.2).miss
    rows = second_hold([curve], (64, 0.2), 128, [0.2]).iloc[0]
    assert (rows["warmup"], rows["draws"], rows["miss_rate"]) == (64, 1, 1.0)
    assert rows["points_stopped"] == 0.25 and rows["run_steps_spared"] == 0.125  # half of 256


def test_a_quarter_octave_curve_is_also_read_as_its_two_half_octave_lattices() -> None:
    lrs = [2.0 ** (k / 4) for k in range(-36, -23)] + [2.0**-5.5]  # 2^(1/4), then one 2^(1/2)
    final = pd.DataFrame({0: range(len(lrs)), 1: range(len(lrs))}, index=lrs, dtype=float)
    whole, even, odd = lattices(Curve("ref", "v", {256: final}, final))
    assert len(whole.final) == 14
    assert list(even.final.index) == [2.0 ** (k / 4) for k in range(-36, -23, 2)] + [2.0**-5.5]
    assert list(odd.final.index) == [2.0 ** (k / 4) for k in range(-35, -23, 2)]
    half = Curve("half", "v", {256: even.final}, even.final)
    assert len(list(lattices(half))) == 1  # a 2^(1/2) lattice is read as it is


def test_the_committed_curves_are_read_with_every_seed_and_lattice() -> None:
    curves = every_curve()
    ln = [c for c in curves if c.source == "ln_vs_rms"]
    assert {c.variant for c in ln} == {"layernorm", "rmsnorm"}
    assert list(ln[0].final.columns) == [3, 4, 5, 6]  # the curve seeds
    assert sorted(ln[0].at) == [64, 128, 192, 256]
    reference = [c for c in curves if c.source.startswith("reference 0-3")]
    assert len(reference) == 12  # both norms at two warmups, each whole and as two halves
    assert {c.warmup for c in reference} == {20, 64} and {c.warmup for c in ln} == {20}
    assert list(reference[0].final.columns) == [0, 1, 2, 3]
    assert len(reference[0].final) == 22 and sorted(reference[0].at) == [64, 128, 192, 256]
    rows = table(curves, [64], [0.15, 0.2]).set_index(["warmup", "margin"])
    assert (rows["miss_rate"] == 0).all()  # the default's 0.15 and the field's 0.2, either warmup
    assert rows.loc[(20, 0.15), "points_stopped"] == pytest.approx(0.61, abs=0.01)
    assert rows.loc[(64, 0.15), "points_stopped"] == pytest.approx(0.57, abs=0.01)
    assert (
        rows.xs(0.15, level="margin")["run_steps_spared"]
        > rows.xs(0.2, level="margin")["run_steps_spared"]
    ).all()
    second = second_hold(curves, (64, 0.15), 128, [0.2]).set_index("warmup")
    assert (second["miss_rate"] == 0).all()  # safe at either warmup, and hardly worth a rung:
    assert second.loc[64, "run_steps_spared"] < 0.01  # docs/early-stop.md, "A second hold"
