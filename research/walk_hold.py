"""The usable walks' hold (``max_lr.walk_step``, :func:`ablate.core.usable.held_inside`)
replayed on real runs: how often a walk held at a step ends at another edge than the same walk
trained whole, how often a point it decides there ends on the other side of the band, and what
it spares.

The runs are the dense reference's slices retrained with every evaluation stored (each a 2^(1/4)
lattice, both norms: ``reports/reference_curves`` at warmup 20, seeds 0–3; at warmup 64,
``reports/warmup64/curves`` on seeds 0–3 and ``reports/warmup64/curves_seeds_13_16``), read by
:func:`research.early_stop.load_curves`. A walk is one seed's, from a start at the seeds' mean
optimum of its slice or a lattice step either side of it (the tuned LR a curve on other seeds
picks lies there), up the lattice to its first point above the band (``within`` 0.1 nats over
the seed's loss at the start), as :func:`ablate.core.usable.walk_seed` walks it. Held, a point
whose gap over the start at the step lies more than a margin under the band's edge, or another
over it, is decided there; the rest count their final loss. Walks of one seed from
neighbouring starts share runs: the table gives the seed curves beside them. A second table
takes every pair of a start and a higher point on a seed's lattice (every gap the rule could
meet, far from the walks' too): the decisions the final loss overturns, and how far a gap near
the edge moves from the hold to the end.

Run::

    python -m research.walk_hold [--steps 128 192] [--margins 0.05,0.05 0.05,0.1 ...] \\
        [--write docs/early-stop.md]
"""

from __future__ import annotations

import argparse
import itertools
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ablate.core.usable import held_inside, walk_seed
from research import REPO
from research.early_stop import Curve, load_curves
from research.estimators import command_line, write_block

WALK_REPORTS = {  # the dense reference's slices with every evaluation: 2^(1/4) lattices
    "reference 0-3": "reports/reference_curves",
    "reference 0-3, warmup 64": "reports/warmup64/curves",
    "reference 13-16, warmup 64": "reports/warmup64/curves_seeds_13_16",
}
WITHIN = 0.1  # the default experiments' band (max_lr.within)
STARTS = (-1, 0, 1)  # lattice steps from the slice's mean optimum a walk starts at


@dataclass(frozen=True)
class Walk:
    """One walk replayed: its edge whole and held (lattice index), the points it decided at the
    hold and how many of them the final loss places on the other side, and its run-steps whole
    and held (the start excluded: a tuned run)."""

    edge_whole: int
    edge_held: int
    decided: int
    misjudged: int
    steps_whole: int
    steps_held: int


Margins = tuple[float, float]  # under the band's edge (decided within), over it (above)


def walk_of(curve: Curve, seed: int, start: int, step: int, margins: Margins) -> Walk:
    """Seed ``seed``'s walk up ``curve``'s lattice from index ``start``, whole and held at
    ``step`` with ``margins``."""
    lrs = sorted(curve.final.index)[start:]
    final = curve.final[seed].to_dict()
    at = curve.at[step][seed].to_dict()
    budget = max(curve.at)  # the last evaluation: the budget
    decisions = {}
    for lr in lrs[1:]:
        inside = held_inside(at[lr] - at[lrs[0]], WITHIN, *margins)
        if inside is not None:
            decisions[lr] = inside
    whole = walk_seed(seed, final, lrs, WITHIN)
    held = walk_seed(seed, final, lrs, WITHIN, decisions)
    walked = [lr for lr in lrs[1:] if lr <= (held.failed_at or held.edge)]
    decided = [lr for lr in walked if lr in decisions]
    misjudged = [lr for lr in decided if decisions[lr] != (final[lr] <= final[lrs[0]] + WITHIN)]
    reached = [lr for lr in lrs[1:] if lr <= (whole.failed_at or whole.edge)]
    return Walk(
        lrs.index(whole.edge),
        lrs.index(held.edge),
        len(decided),
        len(misjudged),
        budget * len(reached),
        sum(step if lr in decisions else budget for lr in walked),
    )


def walks(curves: list[Curve], step: int, margins: Margins) -> pd.DataFrame:
    """Every seed's walk of every curve from each start, replayed."""
    rows = []
    for curve in curves:
        if step not in curve.at:
            continue
        optimum = sorted(curve.final.index).index(curve.final.mean(axis=1).idxmin())
        for seed, shift in itertools.product(curve.final.columns, STARTS):
            start = optimum + shift
            if 0 <= start < len(curve.final) - 1:
                found = walk_of(curve, int(seed), start, step, margins)
                rows.append({"curve": (curve.source, curve.variant, seed), **found.__dict__})
    return pd.DataFrame(rows)


def table(curves: list[Curve], steps: list[int], margins: list[Margins]) -> pd.DataFrame:
    """Per warmup, step and margins: walks and seed curves, the share of walks whose edge
    moves and the largest move (lattice steps), the share of decided points misjudged, and the
    share of the walks' run-steps spared."""
    rows = []
    warmups = sorted({c.warmup for c in curves if c.warmup is not None})
    for warmup, step, pair in itertools.product(warmups, steps, margins):
        found = walks([c for c in curves if c.warmup == warmup], step, pair)
        moved = (found["edge_held"] - found["edge_whole"]).abs()
        rows.append(
            {
                "warmup": warmup,
                "step": step,
                "under": pair[0],
                "over": pair[1],
                "walks": len(found),
                "seed_curves": found["curve"].nunique(),
                "edge_moved": (moved > 0).mean(),
                "worst_move": int(moved.max()),
                "points_decided": int(found["decided"].sum()),
                "misjudged": found["misjudged"].sum() / max(1, found["decided"].sum()),
                "run_steps_spared": 1 - found["steps_held"].sum() / found["steps_whole"].sum(),
            }
        )
    return pd.DataFrame(rows)


def gap_pairs(curves: list[Curve], step: int) -> pd.DataFrame:
    """Every (start, higher point) pair of every seed's lattice: warmup, the gap at ``step``
    and at the end."""
    rows = []
    for curve in curves:
        lrs = sorted(curve.final.index)
        for seed, (i, j) in itertools.product(
            curve.final.columns, itertools.combinations(range(len(lrs)), 2)
        ):
            at, final = curve.at[step][seed], curve.final[seed]
            held = at[lrs[j]] - at[lrs[i]]
            rows.append(
                {"warmup": curve.warmup, "held": held, "end": final[lrs[j]] - final[lrs[i]]}
            )
    return pd.DataFrame(rows)


def pairs_table(curves: list[Curve], step: int, margins: list[Margins]) -> pd.DataFrame:
    """Per warmup and margins, over every pair (:func:`gap_pairs`): pairs, those decided at
    ``step``, those decided within that end above the band and those decided above that end
    within it; and, for the gaps within 0.1 of the edge at the step, their mean, SD and most
    negative move to the end."""
    found = gap_pairs(curves, step)
    rows = []
    for (warmup, mine), pair in itertools.product(found.groupby("warmup"), margins):
        inside = mine["held"] < WITHIN - pair[0]
        above = mine["held"] > WITHIN + pair[1]
        near = mine[(mine["held"] - WITHIN).abs() < 0.1]
        drift = near["end"] - near["held"]
        rows.append(
            {
                "warmup": warmup,
                "under": pair[0],
                "over": pair[1],
                "pairs": len(mine),
                "decided": int((inside | above).sum()),
                "within_ended_above": int((inside & (mine["end"] > WITHIN)).sum()),
                "above_ended_within": int((above & (mine["end"] <= WITHIN)).sum()),
                "near_edge_move_mean": drift.mean(),
                "sd": drift.std(),
                "lowest": drift.min(),
            }
        )
    return pd.DataFrame(rows)


def every_curve() -> list[Curve]:
    """The reference's slices with their evaluations."""
    return [
        c for source, folder in WALK_REPORTS.items() for c in load_curves(source, REPO / folder)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[128, 192])
    parser.add_argument(
        "--margins",
        nargs="+",
        default=["0.03,0.03", "0.05,0.05", "0.05,0.1", "0.08,0.08", "0.1,0.1"],
        help="UNDER,OVER: nats under the band's edge a point is decided within, over it above",
    )
    parser.add_argument("--write", type=Path, help="a doc whose walk-hold block to rewrite")
    args = parser.parse_args(argv)
    margins = [margin_pair(text) for text in args.margins]
    curves = every_curve()
    text = "\n\n".join(
        [
            table(curves, args.steps, margins).to_markdown(index=False, floatfmt=".3g"),
            counted(pairs_table(curves, max(args.steps), margins)).to_markdown(
                index=False, floatfmt=".3g"
            ),
        ]
    )
    if args.write:
        write_block(args.write, "walk-hold", text, command_line("research.walk_hold", argv))
    print(text)


def counted(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with its pairs and decisions written as whole numbers."""
    return frame.assign(**{c: frame[c].map("{:,}".format) for c in ("pairs", "decided")})


def margin_pair(text: str) -> Margins:
    """``UNDER,OVER`` as two floats."""
    under, over = (float(part) for part in text.split(","))
    return under, over


if __name__ == "__main__":
    main()
