"""The report's usable-LR boundary: each seed's walk up from its variant's tuned optimum
(:mod:`ablate.core.usable`), read back from the stored runs of the ``usable`` stage, the
variant's geometric-mean edge with the seeds' range, the usable range's width in octaves, and each
variant's edge over the baseline's per seed. Where every seed stops at one lattice point, the
edge is known to the lattice's step only, and the text says so. A point the walks' hold
(``max_lr.walk_step``) stopped is placed by its gap over its seed's start at that step, recomputed
from the walks' evaluations (``usable_evals.csv``).
"""

from __future__ import annotations

import math

import pandas as pd

from ablate.core.stability import clipped_loss
from ablate.core.usable import (
    PER_OCTAVE,
    SeedWalk,
    held_inside,
    usable_boundary,
    usable_ratio,
    walk_seed,
)
from ablate.report.analysis import selection_values
from ablate.report.load import StoredExperiment
from ablate.report.section import Section
from ablate.report.text import sig


def usable_runs(stored: StoredExperiment) -> pd.DataFrame:
    """The ``usable`` stage's stored runs with their selection loss (``value``) and, for a
    point the walks' hold stopped, its gap over its seed's start at the hold (``gap``) and its
    place (``inside``: True within the band, False above it; None for a run trained whole)."""
    ids = stored.manifest.group_ids("usable")
    mine = stored.runs[stored.runs["run_id"].isin(ids)]
    mine = mine.assign(value=selection_values(mine), gap=math.nan, inside=None)
    hold, within = stored.manifest.walk_hold, stored.manifest.usable_within
    if not hold or within is None or mine.empty:
        return mine
    held = (mine["status"] == "pruned") & (mine["steps"] == hold["step"])
    gaps = held_gaps(stored.usable_evals, mine, hold["step"])
    mine.loc[held, "gap"] = mine.loc[held, "run_id"].map(gaps)
    mine["inside"] = [
        held_inside(gap, within, hold["within"], hold["above"]) if is_held else None
        for gap, is_held in zip(mine["gap"], held, strict=True)
    ]
    return mine


def held_gaps(evals: pd.DataFrame, runs: pd.DataFrame, step: int) -> dict[str, float]:
    """Each walk run's value at ``step`` minus its seed's start's there (the lowest LR its
    variant walked), by run id: the val loss at that evaluation as the stage read it,
    min(loss, ℓ0), ℓ0 without one (:func:`ablate.core.early_stop.value_at`)."""
    at = evals[evals["step"] == step].set_index("run_id")["val_loss"]
    initial = runs.set_index("run_id")["initial_loss"]
    values = {rid: clipped_loss(at.get(rid), initial[rid]) for rid in runs["run_id"]}
    found = {}
    for _, rows in runs.groupby(["variant", "seed"]):
        start = values[rows.loc[rows["lr"].idxmin(), "run_id"]]
        found.update({rid: values[rid] - start for rid in rows["run_id"]})
    return found


def seed_walks(runs: pd.DataFrame, variant: str, within: float) -> list[SeedWalk]:
    """Every seed's walk of the variant, over the LRs its seeds walked (from the lowest)."""
    mine = runs[runs["variant"] == variant]
    lrs = sorted(set(mine["lr"].astype(float)))
    walks = []
    for seed, rows in mine.groupby("seed"):
        whole = rows[rows["inside"].isna()]
        points = dict(zip(whole["lr"].astype(float), whole["value"].astype(float), strict=True))
        decided = rows[rows["inside"].notna()]
        held = dict(zip(decided["lr"].astype(float), decided["inside"].astype(bool), strict=True))
        if lrs and lrs[0] in points:
            walks.append(walk_seed(int(seed), points, lrs, within, held))
    return walks


def usable_table(stored: StoredExperiment) -> pd.DataFrame:
    """Per variant: the optimum walked from, the geometric-mean edge and the seeds' range, the
    width in octaves, and the edge over the baseline's (geometric mean and range over seeds)."""
    within = stored.manifest.usable_within
    if within is None:
        return pd.DataFrame()
    runs = usable_runs(stored)
    if runs.empty:
        return pd.DataFrame()
    variants = [v for v in stored.manifest.variants if v in set(runs["variant"])]
    walks = {v: seed_walks(runs, v, within) for v in variants}
    rows = []
    for variant in variants:
        found = usable_boundary(walks[variant], min(runs.loc[runs["variant"] == variant, "lr"]))
        if found is None:
            continue
        ratio = usable_ratio(walks[variants[0]], walks[variant])
        rows.append(
            {
                "variant": variant,
                "within": within,
                "optimum_lr": found.start,
                "usable_lr": found.value,
                "usable_low": found.low,
                "usable_high": found.high,
                "seeds": found.seeds,
                "octaves": found.octaves,
                "resolved": found.resolved,
                "ratio_to_baseline": ratio[0] if variant != variants[0] else math.nan,
                "ratio_low": ratio[1] if variant != variants[0] else math.nan,
                "ratio_high": ratio[2] if variant != variants[0] else math.nan,
            }
        )
    return pd.DataFrame(rows)


def edge_text(row: pd.Series) -> str:
    """``0.00465 (seeds 0.00391–0.00552)``, or the one lattice point every seed stopped at."""
    if not row["resolved"]:
        return (
            f"{sig(row['usable_lr'])} (every seed: known to the lattice's 2^(1/{PER_OCTAVE}) "
            "step only)"
        )
    return f"{sig(row['usable_lr'])} (seeds {sig(row['usable_low'])}–{sig(row['usable_high'])})"


def summary_line(table: pd.DataFrame) -> list[str]:
    """The written summary's usable-LR line (nothing without a walk)."""
    if table.empty:
        return []
    text = "; ".join(
        f"{r['variant']} {edge_text(r)}, {r['octaves']:.2f} octaves above its optimum "
        f"{sig(r['optimum_lr'])}"
        for _, r in table.iterrows()
    )
    return [
        f"- **Usable LR** (the largest LR whose final loss stays within "
        f"{table['within'].iloc[0]:g} nats of the seed's at the tuned optimum, walked in "
        f"2^(1/{PER_OCTAVE}) steps; geometric mean over seeds): {text}."
    ]


def usable_section(stored: StoredExperiment) -> Section:
    """Markdown and CSV of the usable-LR boundary (nothing without the stage's runs)."""
    table = usable_table(stored)
    if table.empty:
        return Section()
    baseline = table["variant"].iloc[0]
    shown = pd.DataFrame(
        {
            "variant": table["variant"],
            "tuned optimum": table["optimum_lr"].map(sig),
            "usable LR, geometric mean (seeds' range)": [edge_text(r) for _, r in table.iterrows()],
            "octaves above the optimum": table["octaves"].map(lambda v: f"{v:.2f}"),
            f"÷ {baseline}'s, per seed: geometric mean (range)": [
                "–"
                if pd.isna(r["ratio_to_baseline"])
                else f"{r['ratio_to_baseline']:.3g}× ({r['ratio_low']:.3g}–{r['ratio_high']:.3g})"
                for _, r in table.iterrows()
            ],
            "seeds": table["seeds"],
        }
    )
    lines = [
        "## Usable learning rate",
        "",
        f"The largest LR a practitioner can raise the tuned one to and lose at most "
        f"{table['within'].iloc[0]:g} nats of final val loss: on each seed, a walk up from the "
        f"variant's tuned optimum in 2^(1/{PER_OCTAVE}) steps (its tuned warmup, the full "
        "budget), stopped at the first LR more than that above the seed's own loss at the "
        "optimum. Held to the dense reference (docs/stability-and-search.md), this walk finds "
        "its usable boundary within one step; the brackets below (a run that learned at all, "
        "and divergence) answer other questions.",
        "",
        shown.to_markdown(index=False),
        "",
        *hold_lines(stored),
    ]
    tables = {"usable_lr.csv": table}
    if stored.manifest.walk_hold:
        tables[USABLE_EVALS] = stored.usable_evals
    return Section(lines, tables)


USABLE_EVALS = "usable_evals.csv"  # every evaluation of every walk run, where the walks held


def hold_lines(stored: StoredExperiment) -> list[str]:
    """What the walks' hold decided and spared (nothing without one)."""
    hold, within = stored.manifest.walk_hold, stored.manifest.usable_within
    if not hold or within is None:
        return []
    runs = usable_runs(stored)
    decided = runs[runs["inside"].notna()]
    inside = int(decided["inside"].astype(bool).sum())
    spared = int((decided["planned_steps"] - decided["steps"]).sum())
    return [
        f"Hold (`max_lr.walk_step` {hold['step']}): every walk point but the starts was held at "
        f"step {hold['step']}, and one whose val loss there, less its seed's start's, lay more "
        f"than {hold['within']:g} nats under the band's edge ({within:g}) or {hold['above']:g} "
        "over it stopped there: "
        f"{inside} within the band, {len(decided) - inside} above it, sparing {spared:,} "
        f"run-steps; the rest trained to the end. `{USABLE_EVALS}` holds every evaluation of "
        "every walk run, to recompute it; docs/early-stop.md gives its replay on real curves.",
        "",
    ]
