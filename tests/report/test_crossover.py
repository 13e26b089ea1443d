"""The cross-over read as a 2×2: its parts are the algebra of the four runs per seed, and the
committed default report's 2×2 recomputes from its runs.csv."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from conftest import REPO, stored_manifest

from ablate.report.crossover import TwoByTwo, crossover_table


def _cells() -> pd.DataFrame:
    return pd.DataFrame(
        {"bb": [2.0, 2.1], "bv": [1.9, 2.05], "vb": [2.02, 2.08], "vv": [1.88, 2.0]},
        index=pd.Index([0, 1], name="seed"),
    )


def test_the_parts_of_a_two_by_two_are_its_cells_algebra() -> None:
    found = TwoByTwo("rms", "ln", (0.003, 20), (0.004, 10), _cells())
    np.testing.assert_allclose(found.tuned, [-0.12, -0.10])
    np.testing.assert_allclose(found.at_baseline_setting, [0.02, -0.02])
    np.testing.assert_allclose(found.at_variant_setting, [-0.02, -0.05])
    np.testing.assert_allclose(found.main, [0.0, -0.035])
    np.testing.assert_allclose(found.setting, [-0.12, -0.065])
    np.testing.assert_allclose(found.interaction, [-0.04, -0.03])
    # the tuned gain is the main effect plus the setting effect, each half the interaction off
    np.testing.assert_allclose(found.tuned, found.main + found.setting)
    assert list(found.parts())[1] == "both at ln's (0.003, 20)"


class _Stored:
    def __init__(self, runs: pd.DataFrame) -> None:
        self.manifest = stored_manifest(variants=["layernorm", "rmsnorm"])
        self.tuned = runs[runs["group"] == "tuned"]
        self.crossover = runs[runs["group"] == "crossover"]


@pytest.mark.parametrize(
    ("report", "pairs", "main", "low", "high"),
    [("ln_vs_rms", 5, -0.0026, -0.0330, +0.0277)],  # the 2x2 decide: stopped at, 95%
)
def test_the_committed_two_by_two_recomputes_from_runs_csv(
    report: str, pairs: int, main: float, low: float, high: float
) -> None:
    runs = pd.read_csv(REPO / "reports" / report / "runs.csv")
    table = crossover_table(_Stored(runs)).set_index("part")
    row = table.loc["main effect: the mean of the two"]
    assert row["pairs"] == pairs
    assert (round(row["diff"], 4), round(row["ci_low"], 4), round(row["ci_high"], 4)) == (
        main,
        low,
        high,
    )


def test_where_both_chose_one_setting_no_cross_over_is_trained() -> None:
    # llama_style: both norms' optima at LR 0.00391 and warmup 64, so the tuned A/B is at
    # matched settings and there is no 2x2 to recompute
    runs = pd.read_csv(REPO / "reports" / "llama_style" / "runs.csv")
    tuned = runs[runs["group"] == "tuned"]
    assert tuned[["lr", "warmup_steps"]].drop_duplicates().shape[0] == 1
    assert crossover_table(_Stored(runs)).empty
