"""The parallel-trials benchmark's comparison on the simulator."""

from __future__ import annotations

from pathlib import Path

from ablate.bench.parallel_trials import compare

SMOKE = Path(__file__).resolve().parents[2] / "experiments" / "smoke.yaml"


def test_each_k_is_held_to_the_sequential_search_on_the_same_seeds() -> None:
    one, four = compare(SMOKE, [4], seeds=2, trials=8)
    assert (one.parallel, one.reached, one.rounds, one.median_gap) == (1, 2, 8, 0.0)
    assert one.median_round is not None and one.median_round <= 8
    assert four.parallel == 4 and four.rounds == 2 and 0 <= four.reached <= 2
    assert four.median_round is None or four.median_round <= 2
