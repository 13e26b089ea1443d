"""Paired statistics over matched seeds, checked against direct computation."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from ablate.core.manifest import PlannedRun
from ablate.report.analysis import (
    column,
    curve_band,
    holm,
    noise_floor,
    paired_difference,
    probe_band,
    sensitivity_table,
    sweep_frame,
    sweep_table,
    variant_table,
)


def _runs() -> pd.DataFrame:
    rows = []
    base = {0: 2.10, 1: 2.00, 2: 2.20, 3: 2.05}
    other = {0: 2.00, 1: 1.95, 2: 2.08, 3: 9.99}
    for seed, loss in base.items():
        rows.append(
            {
                "variant": "ln",
                "seed": seed,
                "status": "finished",
                "final_val_loss": loss,
                "best_val_loss": loss - 0.01,
                "n_params": 100,
                "tokens_per_s": 1000.0,
            }
        )
    for seed, loss in other.items():
        status = "diverged" if seed == 3 else "finished"
        rows.append(
            {
                "variant": "rms",
                "seed": seed,
                "status": status,
                "final_val_loss": loss,
                "best_val_loss": loss - 0.01,
                "n_params": 90,
                "tokens_per_s": 1200.0,
            }
        )
    return pd.DataFrame(rows)


def test_paired_difference_matches_a_direct_computation() -> None:
    d = paired_difference(_runs(), "rms", "ln")
    diffs = np.array([2.00 - 2.10, 1.95 - 2.00, 2.08 - 2.20])  # seed 3 diverged: not paired
    assert d.n_pairs == 3
    assert d.mean == pytest.approx(diffs.mean())
    half = stats.t.ppf(0.975, 2) * diffs.std(ddof=1) / math.sqrt(3)
    assert d.ci_low == pytest.approx(diffs.mean() - half)
    assert d.ci_high == pytest.approx(diffs.mean() + half)
    t = diffs.mean() / (diffs.std(ddof=1) / math.sqrt(3))
    assert d.p_value == pytest.approx(2 * stats.t.sf(abs(t), 2))


def test_one_pair_gives_no_interval() -> None:
    runs = _runs()
    d = paired_difference(runs[runs["seed"] == 0], "rms", "ln")
    assert d.n_pairs == 1 and d.mean == pytest.approx(-0.1)
    assert math.isnan(d.ci_low) and math.isnan(d.p_value)


def test_variant_table_counts_and_means() -> None:
    table = variant_table(_runs(), ["ln", "rms"], "ln").set_index("variant")
    assert table.loc["ln", "runs"] == 4 and table.loc["rms", "diverged"] == 1
    assert table.loc["rms", "finished"] == 3
    assert table.loc["ln", "final_val_loss_mean"] == pytest.approx(
        np.mean([2.10, 2.00, 2.20, 2.05])
    )
    assert table.loc["rms", "final_val_loss_mean"] == pytest.approx(np.mean([2.00, 1.95, 2.08]))
    assert table.loc["rms", "final_val_loss_std"] == pytest.approx(
        np.std([2.00, 1.95, 2.08], ddof=1)
    )
    assert math.isnan(table.loc["ln", "diff_vs_baseline"])
    assert table.loc["rms", "n_pairs"] == 3 and table.loc["rms", "n_params"] == 90


def test_curve_band_over_seeds() -> None:
    metrics = pd.DataFrame(
        {
            "variant": ["a"] * 4,
            "run_id": ["r1", "r1", "r2", "r2"],
            "step": [1, 2, 1, 2],
            "val_loss": [3.0, np.nan, 5.0, 2.0],
        }
    )
    band = curve_band(metrics, "val_loss").set_index("step")
    assert band.loc[1, "mean"] == 4.0 and band.loc[1, "count"] == 2
    assert band.loc[2, "mean"] == 2.0 and band.loc[2, "count"] == 1


def test_noise_floor_pools_the_variances_of_finished_runs() -> None:
    runs = _runs()
    ln = np.var([2.10, 2.00, 2.20, 2.05], ddof=1)
    rms = np.var([2.00, 1.95, 2.08], ddof=1)  # the diverged seed 3 is left out
    assert noise_floor(runs) == pytest.approx(math.sqrt((ln + rms) / 2))
    assert math.isnan(noise_floor(runs[runs["seed"] == 0]))  # one seed each: no spread


def test_missing_summary_keys_read_as_nan() -> None:
    table = variant_table(_runs(), ["ln", "rms"], "ln").set_index("variant")
    assert math.isnan(table.loc["ln", "peak_memory_mb_mean"])  # older runs lack the key
    assert table.loc["ln", "nonfinite_values"] == 0
    assert column(_runs(), "tokens_per_s").mean() == pytest.approx((4 * 1000 + 4 * 1200) / 8)


def test_probe_band_means_over_seeds() -> None:
    probes = pd.DataFrame(
        {
            "variant": ["a"] * 4,
            "run_id": ["r1", "r1", "r2", "r2"],
            "step": [1, 1, 1, 1],
            "quantity": ["resid_rms", "grad_norm", "resid_rms", "grad_norm"],
            "site": ["blocks.0"] * 4,
            "layer": [0] * 4,
            "value": [1.0, 5.0, 3.0, 7.0],
        }
    )
    band = probe_band(probes, "resid_rms")
    assert band["mean"].tolist() == [2.0] and band["count"].tolist() == [2]


def test_holm_adjusts_in_rank_order_and_keeps_nan() -> None:
    # sorted: 0.005 x 4 = 0.02, 0.01 x 3 = 0.03, 0.03 x 2 = 0.06, max(0.06, 0.04 x 1) = 0.06
    adjusted = holm([0.01, 0.04, 0.03, math.nan, 0.005])
    assert adjusted[:3] == pytest.approx([0.03, 0.06, 0.06]) and adjusted[4] == pytest.approx(0.02)
    assert math.isnan(adjusted[3])
    assert holm([0.6, 0.7]) == pytest.approx([1.0, 1.0])  # capped at 1
    assert holm([0.04]) == pytest.approx([0.04])  # one comparison: unchanged


L0 = math.log(256)


def _sweep(points: dict[float, list[tuple[str, bool, float | None]]]) -> tuple[list, pd.DataFrame]:
    """A manifest's sweep entries and summaries from {lr: [(status, stable, loss) per seed]}."""
    manifest, runs = [], []
    for lr, seeds in points.items():
        for seed, (status, stable, loss) in enumerate(seeds):
            run_id = f"{lr}-{seed}"
            manifest.append(PlannedRun("ln", seed, run_id, "sweep", lr))
            runs.append(
                {
                    "run_id": run_id,
                    "status": status,
                    "stable": stable,
                    "final_val_loss": loss,
                    "initial_loss": L0,
                }
            )
    return manifest, pd.DataFrame(runs)


def test_lr_sensitivity_is_wortsmans_mean_of_capped_losses_minus_the_best() -> None:
    manifest, runs = _sweep(
        {
            1e-4: [("finished", False, 3.30), ("finished", False, 3.40)],  # collapsed: own loss
            1e-3: [("finished", True, 2.00), ("finished", True, 2.10)],
            1e-2: [("finished", True, 2.20), ("finished", False, 6.00)],  # above ℓ0: capped
            1e-1: [("diverged", False, 2.90), ("diverged", False, None)],  # diverged: ℓ0
        }
    )
    frame = sweep_frame(manifest, runs)
    table = sweep_table(frame)
    means = [(3.30 + 3.40) / 2, (2.00 + 2.10) / 2, (2.20 + L0) / 2, L0]
    assert list(table["loss_mean"]) == pytest.approx(means)
    sensitivity = sensitivity_table(table, frame).iloc[0]
    assert sensitivity["lr_sensitivity"] == pytest.approx(sum(means) / 4 - 2.05)
    assert sensitivity["best_lr"] == 1e-3 and sensitivity["best_inside"]
    assert sensitivity["unstable_points"] == 3
    # 1e-4 lies below both seeds' stable LRs: it did not learn yet; the others are unstable
    assert list(table["unlearned"]) == [2, 0, 0, 0] and list(table["unstable"]) == [2, 0, 1, 2]


def test_a_point_the_early_stop_stopped_is_left_out_with_all_its_runs() -> None:
    manifest, runs = _sweep(
        {
            1e-3: [("finished", True, 2.0), ("finished", True, 2.1)],
            1e-2: [("pruned", None, 2.9), ("finished", True, 2.3)],  # seed 1 trained whole later
        }
    )
    frame = sweep_frame(manifest, runs)
    assert list(frame["lr"]) == [1e-3, 1e-3]
    assert sweep_table(frame)["loss_mean"].tolist() == pytest.approx([2.05])


def test_a_sweep_best_at_its_edge_is_flagged() -> None:
    manifest, runs = _sweep(
        {
            1e-4: [("finished", True, 2.0)],
            1e-3: [("finished", True, 2.5)],
            1e-2: [("finished", True, 3.0)],
        }
    )
    frame = sweep_frame(manifest, runs)
    sensitivity = sensitivity_table(sweep_table(frame), frame).iloc[0]
    assert sensitivity["best_lr"] == 1e-4 and not sensitivity["best_inside"]
