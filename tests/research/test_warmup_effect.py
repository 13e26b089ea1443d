"""How far the warmup moves the loss: paired gaps above a study's best trial, and the committed
studies' answer (a quarter to a half of the run within min_effect, an eighth or less beyond)."""

from __future__ import annotations

import pandas as pd
import pytest

from research.warmup_effect import every_study, trial_gaps


def test_a_trials_gap_is_paired_by_seed_above_the_best() -> None:
    rows = [
        ("v", w, seed, loss)
        for w, losses in ((10, [2.5, 2.7]), (40, [2.2, 2.3]), (80, [2.22, 2.29]))
        for seed, loss in zip((3, 4), losses, strict=True)
    ]
    runs = pd.DataFrame(rows, columns=["variant", "warmup_steps", "seed", "final_val_loss"])
    runs = runs.assign(group="warmup", planned_steps=160)
    found = trial_gaps(runs).set_index("warmup")
    assert found.loc[40, "gap"] == 0.0  # the best
    assert found.loc[10, "gap"] == pytest.approx(0.35)
    assert found.loc[80, "gap"] == pytest.approx(0.005)
    assert found.loc[10, "paired_sd"] == pytest.approx(0.0707, abs=1e-4)
    assert found.loc[10, "share_of_run"] == 10 / 160
    assert found["beyond_min_effect"].tolist() == [True, False, False]


def test_the_committed_studies_need_the_warmup_only_within_a_factor_of_two() -> None:
    found = every_study()
    assert len(found.groupby(["source", "variant"])) == 8  # TPE studies and grids, 2 norms each
    band = found[found["share_of_run"].between(0.25, 0.57)]
    short = found[found["share_of_run"] < 0.125]
    eighth = found[found["share_of_run"] == 0.125]  # the grids' 32 steps
    assert len(band) >= 16 and (band["gap"] < 0.018).all()
    assert (band["gap"] <= band["paired_sd"]).all()
    assert len(short) == 8 and (short["gap"] > 0.025).all()
    assert len(eighth) == 4 and eighth["gap"].between(0.009, 0.021).all()  # in between
