"""Where the LR optimum lies at the warmup the tuned runs train at: the paired tables, and
what the committed runs at warmups 20 and 64 say."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from research.lr_at_warmup import (
    CURVES,
    WALKS,
    lattice_step,
    norm_rows,
    optimum_rows,
    paired,
    trained_lrs,
    walk_rows,
)
from research.reference import load_reference

TUNED = 2.0 ** (-34 / 4)


def _walks() -> pd.DataFrame:
    rows = []
    for seed, offset in enumerate([0.0, 0.01, -0.01]):
        for step, loss in [(-34, 2.10), (-33, 2.08), (-32, 2.05)]:
            rows.append(("ln", seed, 2.0 ** (step / 4), "usable", loss + offset))
            rows.append(("rms", seed, 2.0 ** (step / 4), "usable", loss + offset - 0.01 * seed))
        rows.append(("ln", seed, float(f"{TUNED:.12g}"), "tuned", 2.10 + offset))  # same point
        rows.append(("rms", seed, float(f"{TUNED:.12g}"), "tuned", 2.10 + offset - 0.01 * seed))
    return pd.DataFrame(rows, columns=["variant", "seed", "lr", "group", "final_test_loss"])


def test_a_walk_is_paired_by_seed_against_its_tuned_run_on_the_lattice() -> None:
    found = walk_rows(_walks())
    ln = found[found["variant"] == "ln"]
    assert ln["octaves above the tuned LR"].tolist() == [0.0, 0.25, 0.5]  # the start once
    assert ln["test loss"].tolist() == pytest.approx([2.10, 2.08, 2.05])
    assert ln["− the tuned run's, paired [95%]"].iloc[2] == "-0.0500 [-0.0500, -0.0500]"


def test_the_norms_are_compared_at_every_lr_both_reached() -> None:
    found = norm_rows(_walks())
    assert found["LR"].tolist() == ["0.00276", "0.00328", "0.00391"]
    mean, low, high = paired(pd.Series([0.0, -0.01, -0.02]).to_numpy())
    assert found["rms − ln, paired [95%]"].iloc[0] == f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]"


def test_one_seed_has_no_interval() -> None:
    mean, low, high = paired(pd.Series([0.5]).to_numpy())
    assert mean == 0.5 and math.isnan(low) and math.isnan(high)
    assert lattice_step(2.0 ** (-30 / 4)) == -30


def test_at_warmup_64_the_default_s_tuned_lrs_lie_below_the_optimum() -> None:
    trained = trained_lrs()
    assert {v: lattice_step(lr) for v, lr in trained.items()} == {
        "layernorm": -34,
        "rmsnorm": -33,
    }
    walked = walk_rows(pd.read_csv(WALKS))
    for variant, rows in walked.groupby("variant"):
        best = rows.loc[rows["test loss"].idxmin()]
        assert best["octaves above the tuned LR"] >= 0.75, variant
        high = float(best["− the tuned run's, paired [95%]"].split(", ")[1].rstrip("]"))
        assert high < -0.02, variant  # better than the tuned run by more than min_effect


def test_the_reference_s_optimum_moves_up_with_the_warmup() -> None:
    trained = trained_lrs()
    found = optimum_rows({w: load_reference(p) for w, p in CURVES.items()}, trained)
    steps = {
        (r["variant"], r["warmup"], r["seeds"]): int(r["optimum"].split("2^(")[1].split("/")[0])
        for _, r in found.iterrows()
    }
    for variant in trained:  # up on the same seeds, and up on four others
        assert steps[(variant, 64, "0–3")] - steps[(variant, 20, "0–3")] >= 3, steps
        assert steps[(variant, 64, "13–16")] - steps[(variant, 20, "0–3")] >= 1, steps


def test_a_chosen_lr_is_held_to_the_optimum_of_seeds_nothing_chose_it_on() -> None:
    import numpy as np

    from research.lr_at_warmup import chosen_rows
    from research.reference import Curves

    lrs = np.array([2.0 ** (k / 4) for k in (-32, -31, -30)])
    select = np.array([[2.3, 2.31], [2.2, 2.21], [2.25, 2.24]])  # the optimum: 2^(-31/4)
    test = select - 0.2
    flags = np.zeros_like(select, dtype=bool)
    curve = Curves(lrs, (13, 14), select, test, flags, ~flags)
    row = chosen_rows({"ln": curve}, {"ln": float(f"{lrs[2]:.12g}")}).iloc[0]
    assert (row["chosen"], row["their optimum"], row["steps apart"]) == ("0.00552", "0.00465", 1)
    mean, low, high = paired(np.array([0.05, 0.03]))
    assert row["chosen − optimum, test, paired [95%]"] == (f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]")
