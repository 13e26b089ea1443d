"""Factorial grids: main effects, two-way cells and interactions against hand computations."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import stored_manifest
from scipy import stats

from ablate.report.factorial import (
    Design,
    factor_section,
    interaction,
    main_effects,
    main_effects_markdown,
    two_way,
    two_way_markdown,
)

KIND, PLACE = "model.norm.kind", "model.norm.placement"
_RNG = np.random.default_rng(0)
NOISE = {  # (kind, placement, seed) -> a fixed perturbation, so the seeds disagree
    (k, p, s): float(_RNG.normal(0.0, 0.005))
    for k in ("layernorm", "rmsnorm")
    for p in ("pre", "post")
    for s in range(3)
}


def _loss(kind: str, place: str, seed: int) -> float:
    rms, post = kind == "rmsnorm", place == "post"
    return (
        2.0
        + 0.1 * rms
        + 0.3 * post
        + 0.05 * (rms and post)
        + 0.01 * seed
        + NOISE[(kind, place, seed)]
    )


def _design() -> Design:
    manifest = {
        "grid": [[KIND, ["layernorm", "rmsnorm"]], [PLACE, ["pre", "post"]]],
        "factors": {
            f"{k}.{p}": {KIND: k, PLACE: p}
            for k in ("layernorm", "rmsnorm")
            for p in ("pre", "post")
        },
    }
    design = Design.from_manifest(stored_manifest(**manifest))
    assert design is not None
    return design


def _runs(diverged: tuple[str, str, int] | None = None) -> pd.DataFrame:
    rows = []
    for (k, p, s), _ in NOISE.items():
        gone = (k, p, s) == diverged
        rows.append(
            {
                "variant": f"{k}.{p}",
                "seed": s,
                "status": "diverged" if gone else "finished",
                "final_val_loss": 9.0 if gone else _loss(k, p, s),
            }
        )
    rows.append({"variant": "other", "seed": 0, "status": "finished", "final_val_loss": 0.0})
    return pd.DataFrame(rows)


def _t_interval(values: list[float]) -> tuple[float, float, float]:
    x = np.asarray(values)
    half = stats.t.ppf(0.975, len(x) - 1) * x.std(ddof=1) / math.sqrt(len(x))
    return x.mean(), x.mean() - half, x.mean() + half


def test_main_effects_average_the_other_factor_within_each_seed() -> None:
    table = main_effects(_runs(), _design()).set_index(["factor", "level"])
    per_seed = [
        np.mean([_loss("rmsnorm", p, s) - _loss("layernorm", p, s) for p in ("pre", "post")])
        for s in range(3)
    ]
    mean, low, high = _t_interval(per_seed)
    row = table.loc[(KIND, "rmsnorm")]
    assert row["effect"] == pytest.approx(mean, abs=1e-12)
    assert (row["effect_ci_low"], row["effect_ci_high"]) == pytest.approx((low, high), abs=1e-9)
    assert row["seeds"] == 3 and 0 < row["effect_p"] < 0.05
    assert mean == pytest.approx(0.1 + 0.05 / 2, abs=0.01)
    level = [_loss("rmsnorm", p, s) for p in ("pre", "post") for s in range(3)]
    assert row["mean"] == pytest.approx(np.mean(level)) and row["std"] == pytest.approx(
        np.std(level, ddof=1)
    )
    first = table.loc[(PLACE, "pre")]
    assert math.isnan(first["effect"]) and first["runs"] == 6 and first["finished"] == 6
    assert table.loc[(PLACE, "post"), "effect"] == pytest.approx(0.3 + 0.05 / 2, abs=0.01)


def test_diverged_runs_are_counted_and_left_out_of_every_contrast() -> None:
    runs, design = _runs(diverged=("rmsnorm", "post", 2)), _design()
    table = main_effects(runs, design).set_index(["factor", "level"])
    row = table.loc[(KIND, "rmsnorm")]
    assert (row["runs"], row["finished"], row["diverged"]) == (6, 5, 1)
    seed2 = _loss("rmsnorm", "pre", 2) - _loss("layernorm", "pre", 2)  # only the complete pair
    per_seed = [
        np.mean([_loss("rmsnorm", p, s) - _loss("layernorm", p, s) for p in ("pre", "post")])
        for s in range(2)
    ] + [seed2]
    assert row["effect"] == pytest.approx(np.mean(per_seed), abs=1e-12)
    cells = two_way(runs, design, KIND, PLACE).set_index([KIND, PLACE])
    assert cells.loc[("rmsnorm", "post"), "diverged"] == 1
    assert cells.loc[("rmsnorm", "post"), "mean"] == pytest.approx(
        np.mean([_loss("rmsnorm", "post", s) for s in range(2)])
    )
    assert interaction(runs, design, KIND, PLACE).n_pairs == 2


def test_a_collapsed_run_is_averaged_at_its_loss_and_counted_apart() -> None:
    runs = _runs().assign(stable=True)
    collapsed = (runs["variant"] == "rmsnorm.post") & (runs["seed"] == 2)
    runs.loc[collapsed, "stable"] = False  # finished at the floor: its loss stays in
    table = main_effects(runs, _design()).set_index(["factor", "level"])
    row = table.loc[(KIND, "rmsnorm")]
    assert (row["finished"], row["diverged"], row["collapsed"]) == (6, 0, 1)
    assert row["effect"] == pytest.approx(main_effects(_runs(), _design()).set_index(
        ["factor", "level"]).loc[(KIND, "rmsnorm"), "effect"])  # fmt: skip
    text = main_effects_markdown(table.reset_index())
    assert table.loc[(KIND, "layernorm"), "collapsed"] == 0
    # the wording is the point: a collapsed run is counted apart from the finished ones
    assert "| 6 (6 / 0), 1 collapsed " in text


def test_two_way_cells_and_interaction_contrast() -> None:
    runs, design = _runs(), _design()
    cells = two_way(runs, design, KIND, PLACE)
    assert list(zip(cells[KIND], cells[PLACE], strict=True)) == [
        ("layernorm", "pre"),
        ("layernorm", "post"),
        ("rmsnorm", "pre"),
        ("rmsnorm", "post"),
    ]
    for r in cells.itertuples():
        values = [_loss(r[1], r[2], s) for s in range(3)]
        assert r.mean == pytest.approx(np.mean(values)) and r.std == pytest.approx(
            np.std(values, ddof=1)
        )
    per_seed = [
        (_loss("rmsnorm", "post", s) - _loss("rmsnorm", "pre", s))
        - (_loss("layernorm", "post", s) - _loss("layernorm", "pre", s))
        for s in range(3)
    ]
    est = interaction(runs, design, KIND, PLACE)
    mean, low, high = _t_interval(per_seed)
    assert est is not None and est.mean == pytest.approx(mean, abs=1e-12)
    assert (est.ci_low, est.ci_high) == pytest.approx((low, high), abs=1e-9)
    assert mean == pytest.approx(0.05, abs=0.01)


def test_factor_section_renders_every_table() -> None:
    lines, effects, pairs = factor_section(_runs(), _design())
    text = "\n".join(lines)
    assert [(a, b) for a, b, _ in pairs] == [(KIND, PLACE)]  # one two-way table, one pair
    assert main_effects_markdown(effects) in lines
    assert two_way_markdown(pairs[0][2], KIND, PLACE) in lines
    assert list(effects["effect"].isna()) == [True, False, True, False]  # the first levels
    est = interaction(_runs(), _design(), KIND, PLACE)  # its line follows the two-way table
    assert est is not None and f"{est.mean:.4f} [{est.ci_low:.4f}, {est.ci_high:.4f}]" in text
    assert len(effects) == 4 and text.count("\n| ") == (1 + 4) + (1 + 2)
    assert Design.from_manifest(stored_manifest(grid=[], factors={})) is None


def test_a_level_whose_runs_all_diverged_has_no_effect_and_is_not_the_first_level() -> None:
    runs = _runs()
    post = runs["variant"].str.endswith(".post")
    runs.loc[post, "status"] = "diverged"
    table = main_effects(runs, _design()).set_index(["factor", "level"])
    row = table.loc[(PLACE, "post")]
    assert (row["runs"], row["finished"], row["diverged"]) == (6, 0, 6)
    assert math.isnan(row["effect"]) and math.isnan(row["mean"])
    lines, _, _ = factor_section(runs, _design())
    rows = "\n".join(lines).splitlines()
    [post_row] = [r for r in rows if r.startswith(f"| {PLACE} ") and "| post " in r]
    cells = [cell.strip() for cell in post_row.split("|")[1:-1]]
    assert cells[2:] == ["6 (0 / 6)", "– ± –", "–", "–"]  # no effect, not "first level"
