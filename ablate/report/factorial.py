"""Statistics of a factorial grid and their tables: main effects, two-way tables, interactions.

A grid (``grid:`` in the experiment file) makes one variant per combination of factor levels;
the manifest keeps each grid variant's levels. The unit of replication is the seed: every
combination is trained once per seed from the same initial weights and batches.

- **Main effect** of a factor at level ``l``: for each seed, the mean over the other factors'
  combinations of (metric at ``l`` − metric at the factor's first level), both runs finished;
  then the mean over seeds with a 95% t interval and the p-value of a one-sample t-test over the
  seeds (a paired test of the two levels). Level means pool every finished run at that level.
- **Two-way table** of factors ``a`` × ``b``: mean ± std over the finished runs of each cell
  (pooled over seeds and any further factors), and the diverged count.
- **Interaction** of two two-level factors: for each seed, (effect of ``b`` at ``a``'s second
  level) − (effect of ``b`` at ``a``'s first level), averaged over further factors; a mean,
  interval and p-value over seeds as above. Zero means the effects add up.

Diverged runs are counted, never averaged in (their final loss measures the blow-up); a
collapsed run (finished at the unigram floor) is averaged in at its loss and counted apart.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablate.core.manifest import Manifest
from ablate.report.analysis import (
    PairedDifference,
    column,
    difference_columns,
    mean_difference,
)

METRIC = "final_val_loss"
EFFECT_COLUMNS = ("effect", "effect_ci_low", "effect_ci_high", "effect_p", "seeds")


def level_text(value: object) -> str:
    """A level as the table shows it (``True`` -> ``true``, as it is written in YAML)."""
    return str(value).lower() if isinstance(value, bool) else str(value)


@dataclass(frozen=True)
class Design:
    """A grid as the manifest records it: factors and levels in order, each variant's cell."""

    keys: list[str]
    levels: dict[str, list[str]]  # factor -> its levels as text, in grid order
    cells: dict[str, dict[str, str]]  # grid variant -> factor -> level text

    @classmethod
    def from_manifest(cls, manifest: Manifest) -> Design | None:
        """The design of an experiment.json with a grid, else None."""
        grid = manifest.grid
        if not grid:
            return None
        return cls(
            keys=[key for key, _ in grid],
            levels={key: [level_text(v) for v in levels] for key, levels in grid},
            cells={
                variant: {k: level_text(v) for k, v in levels.items()}
                for variant, levels in manifest.factors.items()
            },
        )


def factor_runs(runs: pd.DataFrame, design: Design, metric: str = METRIC) -> pd.DataFrame:
    """The grid's runs with one column per factor (its level, as text), ``metric`` in the
    :data:`METRIC` column the statistics read; other variants dropped."""
    grid = runs[runs["variant"].isin(list(design.cells))].copy()
    for key in design.keys:
        grid[key] = grid["variant"].map(lambda v, k=key: design.cells[v][k])
    grid[METRIC] = column(grid, metric)
    return grid


def _finished_cells(grid: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Finished runs indexed by (seed, *factor levels) -> metric."""
    done = grid[grid["status"] == "finished"]
    return done.set_index(["seed", *keys])[METRIC]


def level_contrast(
    grid: pd.DataFrame, keys: list[str], key: str, level: str, base: str
) -> pd.Series:
    """Per seed: mean over the other factors' cells of metric(level) − metric(base); empty when
    no run of either level finished (every one diverged: nothing to average)."""
    values = _finished_cells(grid, keys)
    pos = keys.index(key)
    present = set(values.index.get_level_values(pos + 1))
    if level not in present or base not in present:
        return pd.Series(dtype=float)
    at_level = values.xs(level, level=pos + 1)
    at_base = values.xs(base, level=pos + 1)
    diff = (at_level - at_base).dropna()
    return diff.groupby(level="seed").mean()


def main_effects(runs: pd.DataFrame, design: Design) -> pd.DataFrame:
    """One row per factor level: runs, finished, diverged, mean ± std, effect vs first level."""
    grid = factor_runs(runs, design)
    keys = design.keys
    rows = []
    for key in keys:
        levels = design.levels[key]
        for level in levels:
            mine = grid[grid[key] == level]
            done = mine[mine["status"] == "finished"][METRIC]
            effect = (
                mean_difference(level_contrast(grid, keys, key, level, levels[0]))
                if level != levels[0]
                else None
            )
            rows.append(
                {
                    "factor": key,
                    "level": level,
                    "runs": len(mine),
                    "finished": len(done),
                    "diverged": int((mine["status"] == "diverged").sum()),
                    "collapsed": int(
                        (column(mine[mine["status"] == "finished"], "stable") == 0).sum()
                    ),
                    "mean": done.mean(),
                    "std": done.std(ddof=1),
                    **difference_columns(effect, EFFECT_COLUMNS),
                }
            )
    return pd.DataFrame(rows)


def two_way(runs: pd.DataFrame, design: Design, a: str, b: str) -> pd.DataFrame:
    """Cells of ``a`` × ``b``: runs, diverged, mean and std of the metric over the runs."""
    grid = factor_runs(runs, design)
    rows = []
    for la, lb in itertools.product(design.levels[a], design.levels[b]):
        mine = grid[(grid[a] == la) & (grid[b] == lb)]
        done = mine[mine["status"] == "finished"][METRIC]
        rows.append(
            {
                a: la,
                b: lb,
                "runs": len(mine),
                "diverged": int((mine["status"] == "diverged").sum()),
                "mean": done.mean(),
                "std": done.std(ddof=1),
            }
        )
    return pd.DataFrame(rows)


def interaction(runs: pd.DataFrame, design: Design, a: str, b: str) -> PairedDifference | None:
    """The a × b interaction contrast over seeds; None unless both factors have two levels."""
    la, lb = design.levels[a], design.levels[b]
    if len(la) != 2 or len(lb) != 2:
        return None
    grid = factor_runs(runs, design)
    keys = design.keys
    others = [k for k in keys if k not in (a, b)]
    cells = _finished_cells(grid, keys).reset_index()
    wide = cells.pivot_table(index=["seed", *others], columns=[a, b], values=METRIC)
    if any((x, y) not in wide.columns for x in la for y in lb):
        return mean_difference(pd.Series(dtype=float))
    contrast = (wide[(la[1], lb[1])] - wide[(la[1], lb[0])]) - (
        wide[(la[0], lb[1])] - wide[(la[0], lb[0])]
    )
    return mean_difference(contrast.dropna().groupby(level="seed").mean())


def _num(value: float, digits: int = 4) -> str:
    return "–" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


def _estimate_text(est: PairedDifference | None) -> tuple[str, str]:
    """('Δ [low, high]', 'p (n seeds)') of an estimate, or dashes."""
    if est is None or est.n_pairs == 0:
        return "–", "–"
    interval = (
        f" [{_num(est.ci_low)}, {_num(est.ci_high)}]" if np.isfinite(est.ci_low) else " (no CI)"
    )
    return f"{_num(est.mean)}{interval}", f"{_num(est.p_value, 3)} ({est.n_pairs})"


def main_effects_markdown(table: pd.DataFrame) -> str:
    """The main-effect table: one row per factor level."""
    rows = []
    first_levels = table.groupby("factor", sort=False)["level"].first()
    for r in table.itertuples():
        first = r.level == first_levels[r.factor]
        est = PairedDifference(r.seeds, r.effect, r.effect_ci_low, r.effect_ci_high, r.effect_p)
        effect, p = ("first level", "–") if first else _estimate_text(est)
        collapsed = f", {r.collapsed} collapsed" if getattr(r, "collapsed", 0) else ""
        rows.append(
            {
                "factor": r.factor,
                "level": r.level,
                "runs (finished / diverged)": f"{r.runs} ({r.finished} / {r.diverged}){collapsed}",
                "final val loss, mean ± std": f"{_num(r.mean)} ± {_num(r.std)}",
                "effect vs first level [95% CI]": effect,
                "p (seeds)": p,
            }
        )
    return pd.DataFrame(rows).to_markdown(index=False)


def two_way_markdown(cells: pd.DataFrame, a: str, b: str) -> str:
    """``a`` down, ``b`` across; each cell 'mean ± std', with '(k diverged)' when any did."""

    def text(r: pd.Series) -> str:
        diverged = f" ({r['diverged']} of {r['runs']} diverged)" if r["diverged"] else ""
        return f"{_num(r['mean'])} ± {_num(r['std'])}{diverged}"

    shown = cells.assign(cell=cells.apply(text, axis=1))
    wide = shown.pivot(index=a, columns=b, values="cell")
    wide = wide.reindex(index=list(dict.fromkeys(cells[a])), columns=list(dict.fromkeys(cells[b])))
    wide.columns.name = None
    return wide.reset_index().rename(columns={a: f"{a} ↓ {b} →"}).to_markdown(index=False)


FactorPair = tuple[str, str, pd.DataFrame]  # factor a, factor b, their two_way cells


def factor_section(
    runs: pd.DataFrame, design: Design
) -> tuple[list[str], pd.DataFrame, list[FactorPair]]:
    """Markdown lines of the factor analysis, the main-effect table (for the CSV) and each
    factor pair's two-way cells (for the figure)."""
    effects = main_effects(runs, design)
    pairs = []
    lines = [
        "## Factors",
        "",
        "Main effects: each level against the factor's first level, averaged over the other "
        "factors' levels within each seed; 95% interval and p-value from a t-test over seeds "
        "(descriptive; the Answer judges them at the plan's level). A collapsed run (finished "
        "without learning) is averaged in at its final loss, as in the quality table; a diverged "
        "one is counted, not averaged.",
        "",
        main_effects_markdown(effects),
        "",
    ]
    for a, b in itertools.combinations(design.keys, 2):
        cells = two_way(runs, design, a, b)
        pairs.append((a, b, cells))
        lines += [
            f"### {a} × {b}",
            "",
            "Final val loss, mean ± std over seeds"
            + (" and the other factors" if len(design.keys) > 2 else "")
            + ":",
            "",
            two_way_markdown(cells, a, b),
            "",
        ]
        est = interaction(runs, design, a, b)
        if est is not None:
            effect, p = _estimate_text(est)
            lines += [
                f"Interaction (effect of {b} at {a} = {design.levels[a][1]} minus at "
                f"{design.levels[a][0]}): {effect}, p {p}. Zero means the two effects add up.",
                "",
            ]
    return lines, effects, pairs
