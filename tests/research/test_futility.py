"""decide:'s futility stop replayed: on constructed 2×2 effects the stop is where the seeds
left cannot decide, and on the dense reference it keeps the verdicts' error rates."""

from __future__ import annotations

import numpy as np

from ablate.core.load import load_experiment
from research import REPO
from research.futility import futility_rows, reference_effects, stopped_at

COUNTS = [3, 5, 7, 9]
LEVEL = 0.99


def test_a_draw_stops_for_futility_only_from_its_look_and_only_while_undecided() -> None:
    rng = np.random.default_rng(0)
    far = 0.001 + rng.normal(0, 0.05, size=9)  # a noisy null: 9 seeds cannot decide it
    clear = np.full(9, 0.1) + rng.normal(0, 0.001, size=9)  # decided at once
    effects = np.stack([far, clear])
    words, used = stopped_at(effects, COUNTS, 0.02, LEVEL, None)
    assert list(words) == ["inconclusive", "exceeds"] and list(used) == [9, 3]
    words, used = stopped_at(effects, COUNTS, 0.02, LEVEL, 2)
    assert list(words) == ["inconclusive", "exceeds"] and list(used) == [5, 3]
    assert list(stopped_at(effects, COUNTS, 0.02, LEVEL, 1)[1]) == [3, 3]


def test_on_the_reference_a_stop_from_the_second_look_keeps_the_error_rates() -> None:
    design = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    effects, truth, counts = reference_effects(design, limit=300)  # of the docs' 1,000: CI's time
    rows = futility_rows(effects, truth, counts, 0.02, [2]).set_index("futility stop")
    none, second = rows.loc["none"], rows.loc["from look 2 (5 seeds)"]
    assert none["draws"] == second["draws"] == 300
    assert second["differs from 0"] <= none["differs from 0"]
    assert abs(second["95% CI covers"] - none["95% CI covers"]) <= 0.02
    assert none["decided"] - second["decided"] <= 0.01  # half a point on these draws
    assert second["A/B seeds, mean"] < 0.65 * none["A/B seeds, mean"]
