"""The report's sweep optima: each variant's optimum recovered from constructed valleys, a
ratio shown only when its interval excludes 1, and Δ at every LR both ran stably."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from ablate.report.optimum import curve_differences, optimum_section, optimum_table

LRS = [2.0 ** (k / 2) for k in range(-20, -9)]


def _frame(optima: dict[str, float], shift: dict[int, float], unstable_above: float = 1.0):
    """Sweep runs of valleys ℓ = 1.7 + 0.3·log10(lr/opt)² + the seed's shift; runs above
    ``unstable_above`` unstable."""
    rows = []
    for variant, opt in optima.items():
        for seed, offset in shift.items():
            for lr in LRS:
                loss = 1.7 + 0.3 * math.log10(lr / opt) ** 2 + offset
                stable = lr <= unstable_above
                rows.append(
                    {
                        "variant": variant,
                        "seed": seed,
                        "lr": lr,
                        "run_id": f"{variant}-{seed}-{lr}",
                        "status": "finished",
                        "stable": stable,
                        "final_val_loss": loss if stable else 3.3,
                        "initial_loss": math.log(256),
                        "clipped_loss": loss if stable else 3.3,
                    }
                )
    return pd.DataFrame(rows)


def test_two_optima_a_factor_two_apart_are_recovered_and_differ() -> None:
    jitter = {0: 0.0, 1: 0.01, 2: -0.005}  # a seed's shift is shared along its curve
    frame = _frame({"ln": 2**-8.0, "rms": 2**-7.0}, jitter)
    table = optimum_table(frame, ["ln", "rms"]).set_index("variant")
    assert table.loc["ln", "optimum_lr"] == pytest.approx(2**-8.0, rel=1e-6)
    assert table.loc["rms", "ratio_to_baseline"] == pytest.approx(2.0, rel=1e-6)
    assert table.loc["rms", "ratio_shown"]
    assert table.loc["rms", "inside"] and table.loc["rms", "seeds"] == 3
    diffs = curve_differences(frame, ["ln", "rms"])
    assert len(diffs) == len(LRS) and (diffs["pairs"] == 3).all()
    # Δ at each LR is the valleys' gap there (the seeds' shifts cancel in the pairs)
    gap = [0.3 * (math.log10(lr / 2**-7.0) ** 2 - math.log10(lr / 2**-8.0) ** 2) for lr in LRS]
    assert list(diffs["diff"]) == pytest.approx(gap)


def test_an_optimum_at_the_grids_edge_is_said_to_be_one() -> None:
    frame = _frame({"ln": 2**-4.0, "rms": 2**-4.0}, {0: 0.0, 1: 0.0})  # above the grid
    section = optimum_section(frame, ["ln", "rms"])
    assert set(section.tables) == {"sweep_optimum.csv", "sweep_differences.csv"}
    optima = section.tables["sweep_optimum.csv"]
    assert list(optima["inside"]) == [False, False]  # each lowest at the grid's top
    assert (optima["optimum_lr"] == frame["lr"].max()).all()


def test_unstable_runs_are_no_points_of_the_curve() -> None:
    frame = _frame({"ln": 2**-8.0, "rms": 2**-8.0}, {0: 0.0, 1: 0.002}, unstable_above=2**-7)
    table = optimum_table(frame, ["ln", "rms"]).set_index("variant")
    assert table.loc["ln", "optimum_lr"] == pytest.approx(2**-8.0, rel=1e-6)
    assert not table.loc["rms", "ratio_shown"]  # equal optima: the interval holds 1
    assert table.loc["rms", "ratio_to_baseline"] == 1.0  # every resample the same grid point
    assert table.loc["rms", "ratio_resolved"] is False  # a finer grid resolves it
    assert curve_differences(frame, ["ln", "rms"])["lr"].max() <= 2**-7


def test_an_lr_where_no_seed_ran_both_stably_has_no_row() -> None:
    frame = _frame({"ln": 2**-8.0, "rms": 2**-8.0}, {0: 0.0, 1: 0.002}, unstable_above=2**-7)
    frame.loc[frame["variant"] == "rms", "stable"] = True  # only the baseline failed up there
    diffs = curve_differences(frame, ["ln", "rms"])
    assert (diffs["pairs"] > 0).all() and diffs["lr"].max() <= 2**-7
