"""The walks' hold replayed: a walk's edge whole and held, a decision the final loss overturns,
the run-steps spared, and the reference's slices read with their evaluations."""

from __future__ import annotations

import pandas as pd

from research.early_stop import Curve
from research.walk_hold import every_curve, pairs_table, table, walk_of

LRS = [2.0 ** (k / 4) for k in range(-32, -27)]


def _curve(at192: list[float], final: list[float]) -> Curve:
    at = {192: pd.DataFrame({0: at192}, index=LRS), 256: pd.DataFrame({0: final}, index=LRS)}
    return Curve("made", "v", at, at[256], 64)


def test_a_held_walk_spares_the_points_it_decides_and_ends_at_the_whole_walks_edge() -> None:
    # gaps at 192 over the start: 0.01 (within), 0.08 (undecided), 0.3 (above)
    curve = _curve([2.5, 2.51, 2.58, 2.8, 2.9], [2.0, 2.02, 2.09, 2.3, 2.4])
    found = walk_of(curve, 0, 0, 192, (0.05, 0.05))
    assert (found.edge_whole, found.edge_held) == (2, 2)  # the third point is the edge
    assert (found.decided, found.misjudged) == (2, 0)
    assert (found.steps_whole, found.steps_held) == (3 * 256, 192 + 256 + 192)


def test_a_decision_the_final_loss_overturns_is_misjudged_and_moves_the_edge() -> None:
    curve = _curve([2.5, 2.51, 2.52, 2.8, 2.9], [2.0, 2.02, 2.2, 2.3, 2.4])
    # the third point: within at 192, above at the end
    found = walk_of(curve, 0, 0, 192, (0.05, 0.05))
    assert (found.edge_whole, found.edge_held, found.misjudged) == (1, 2, 1)


def test_the_reference_slices_replay_at_both_warmups() -> None:
    curves = every_curve()
    assert {c.warmup for c in curves} == {20, 64} and len(curves) == 6  # 3 slices x 2 norms
    rows = table(curves, [192], [(0.05, 0.1)]).set_index("warmup")
    assert rows.loc[64, "seed_curves"] == 16 and rows.loc[64, "walks"] == 48
    assert 0 < rows.loc[64, "run_steps_spared"] < 1


def test_every_pair_counts_the_decisions_the_end_overturns_and_the_gaps_drift() -> None:
    # start 2.5 at 192 and 2.0 at the end; gaps at 192: 0.16 (above), 0.3 (above), 0.01, 0.0
    curve = _curve([2.5, 2.66, 2.8, 2.51, 2.5], [2.0, 2.09, 2.3, 2.0, 2.0])
    rows = pairs_table([curve], 192, [(0.05, 0.05), (0.05, 0.1)]).set_index("over")
    assert rows.loc[0.05, "pairs"] == 10  # every (start, higher point) pair of 5 points
    assert rows.loc[0.05, "above_ended_within"] >= 1  # 2.66 over 2.5: 0.16 then 0.09
    assert rows.loc[0.1, "above_ended_within"] < rows.loc[0.05, "above_ended_within"]
    assert rows.loc[0.1, "decided"] < rows.loc[0.05, "decided"]
    assert rows.loc[0.05, "lowest"] < 0  # the gaps near the edge shrank by the end
