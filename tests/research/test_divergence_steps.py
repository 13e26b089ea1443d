"""When real runs diverge, and what a probe held at a step would miss."""

from __future__ import annotations

import math

import pandas as pd

from research.divergence_steps import source_row, table


def _runs(rows: list[tuple[str, str, float, int, float]]) -> pd.DataFrame:
    columns = ["run_id", "status", "diverged_step", "steps", "final_val_loss"]
    return pd.DataFrame(rows, columns=columns).assign(warmup_steps=20)


def test_a_run_that_diverged_after_the_hold_or_ended_non_finite_is_a_miss() -> None:
    runs = _runs(
        [
            ("a", "diverged", 21, 21, 7.0),
            ("b", "diverged", 30, 30, 6.5),
            ("c", "finished", math.nan, 256, 2.3),
        ]
    )
    row = source_row("x", runs, 64)
    assert (row["diverged"], row["latest step"], row["latest after warmup"]) == (2, 30, 10)
    assert row["at the first step after warmup"] == 0.5 and row["misses"] == 0
    late = pd.concat([runs, _runs([("d", "diverged", 100, 100, 9.0)])], ignore_index=True)
    assert source_row("x", late, 64)["misses"] == 1  # a held probe calls it not diverged
    assert source_row("x", late, 128)["misses"] == 0
    lost = pd.concat([runs, _runs([("e", "finished", math.nan, 256, math.inf)])])
    assert source_row("x", lost, 64)["misses"] == 1  # non-finite at the end, no rule fired


def test_no_committed_run_diverged_after_step_32() -> None:
    found = table(64)
    every = found.iloc[-1]
    assert every["source"] == "all" and every["diverged"] >= 300 and every["misses"] == 0
    assert every["latest step"] <= 32 and every["past the hold"] >= 2500
    reference = found[found["source"].str.startswith("reference")]
    assert reference["diverged"].sum() >= 130 and reference["latest step"].max() <= 30
