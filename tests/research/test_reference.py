"""The dense reference read as ground truth: its tables, optimum, boundaries and intervals, on a
runs.csv built by hand where every answer is known."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from research import reference as ref

LRS = [2.0 ** (k / 4) for k in range(-40, -27)]  # 0.00098 .. 0.0078, 13 points
OPT = 2.0**-8.5  # row 6
SEEDS = list(range(8))


def loss(lr: float, seed: int, offset: float = 0.0) -> float:
    """A valley around OPT with a cliff two steps above it, a seed effect and no run noise."""
    x = math.log2(lr / OPT)
    cliff = 0.5 if x > 0.3 else 0.0
    return 2.0 + offset + 0.05 * x * x + cliff + 0.001 * seed


def split_noise(variant: str, seed: int) -> float:
    """A fixed offset of each (variant, seed) on the test split, up to ±0.004 nats."""
    return 0.004 * ((3 * seed + 5 * (variant == "rmsnorm")) % 7 - 3) / 3


def write_runs(path: Path, offset: float = -0.03, drop: int | None = None) -> Path:
    """Both norms at every LR and seed; rmsnorm ``offset`` nats lower; the top LR diverges."""
    rows = []
    for variant, shift in (("layernorm", 0.0), ("rmsnorm", offset)):
        for seed in SEEDS:
            for i, lr in enumerate(LRS):
                if drop is not None and (variant, seed, i) == ("rmsnorm", 3, drop):
                    continue
                diverged = i == len(LRS) - 1
                value = math.nan if diverged else loss(lr, seed, shift)
                rows.append(
                    {
                        "group": "sweep",
                        "variant": variant,
                        "seed": seed,
                        "lr": lr,
                        "final_val_loss": value,
                        "final_test_loss": value + 0.1 + split_noise(variant, seed),
                        "status": "diverged" if diverged else "finished",
                        "stable": not diverged and i < 11,  # rows 11.. failed the criterion
                        "unstable_reason": "diverged: loss" if diverged else "",
                        "initial_loss": 5.5,
                    }
                )
    rows.append({**rows[0], "group": "main", "lr": 0.003})  # off the lattice: not read
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_the_tables_hold_every_seed_and_lr_with_unstable_runs_clipped(tmp_path: Path) -> None:
    curves = ref.load_reference(write_runs(tmp_path / "runs.csv"))
    ln = curves["layernorm"]
    assert list(curves) == ["layernorm", "rmsnorm"] and ln.seeds == tuple(SEEDS)
    assert list(ln.lrs) == LRS  # the main run at 0.003 is not a lattice point
    assert ln.select[-1, 0] == 5.5  # diverged: no loss, counted as ℓ0
    assert ln.diverged[-1].all() and not ln.diverged[:-1].any()
    assert ln.test[0, 2] == pytest.approx(loss(LRS[0], 2) + 0.1 + split_noise("layernorm", 2))
    with pytest.raises(ValueError, match="rmsnorm misses runs"):
        ref.load_reference(write_runs(tmp_path / "gap.csv", drop=4))


def test_two_tables_of_seeds_read_as_one_and_a_run_in_both_is_refused(tmp_path: Path) -> None:
    runs = pd.read_csv(write_runs(tmp_path / "runs.csv"))
    low, high = runs[runs["seed"] < 3], runs[runs["seed"] >= 3]
    low.to_csv(tmp_path / "low.csv", index=False)
    high.to_csv(tmp_path / "high.csv", index=False)
    both = ref.load_reference([tmp_path / "low.csv", tmp_path / "high.csv"])
    whole = ref.load_reference(tmp_path / "runs.csv")
    assert both["rmsnorm"].seeds == tuple(SEEDS)
    assert np.array_equal(both["rmsnorm"].select, whole["rmsnorm"].select)
    with pytest.raises(ValueError, match="layernorm seed 0 at LR .* appears twice"):
        ref.load_reference([tmp_path / "low.csv", tmp_path / "runs.csv"])


def test_the_optimum_delta_and_edges_are_the_constructed_ones(tmp_path: Path) -> None:
    curves = ref.load_reference(write_runs(tmp_path / "runs.csv"))
    ln, rms = curves["layernorm"], curves["rmsnorm"]
    assert ref.optimum(ln) == OPT and ref.optimum(rms, [0, 1]) == OPT
    delta = ref.paired_test_delta(ln, rms, OPT, OPT, SEEDS)
    noise = [split_noise("rmsnorm", s) - split_noise("layernorm", s) for s in SEEDS]
    assert delta == pytest.approx(np.full(8, -0.03) + noise)
    # the cliff starts two lattice steps above the optimum: one step (0.0125 nats) is usable
    assert ref.usable_boundary(ln, SEEDS) == LRS[7]
    assert ref.divergence_boundary(ln, SEEDS) == LRS[-2]
    assert ref.learned_boundary(ln, SEEDS) == LRS[10]


def test_a_bracket_can_step_over_a_failing_point_that_the_walk_stops_at() -> None:
    lrs = np.array(LRS)
    losses = np.array([2.0] * 13)
    losses[8] = 2.3  # one bad point two steps up, good again after it
    losses[11:] = 3.0
    assert ref.usable_edge(lrs, losses, LRS[6], 0.1) == LRS[7]  # the walk stops before it
    assert ref.usable_edge(lrs, losses, LRS[6], 0.1, walk=False) == LRS[10]  # a factor 2 over it
    assert ref.usable_edge(lrs, np.full(13, 2.0), LRS[6], 0.1) is None  # none fails: no edge


def test_the_bootstrap_interval_holds_the_value_and_repeats() -> None:
    values = {s: float(s) for s in SEEDS}

    def mean(seeds: list[int]) -> float:
        return float(np.mean([values[s] for s in seeds]))

    found = ref.bootstrapped(mean, SEEDS, draws=500)
    assert found.value == 3.5 and found.low < 3.5 < found.high
    assert found == ref.bootstrapped(mean, SEEDS, draws=500)
    assert 1.5 < found.low and found.high < 5.5  # about ±2 SE of the mean of 0..7
