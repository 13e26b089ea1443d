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
whose gap over the start at the step lies more than the margin from the band's edge is decided
there; the rest count their final loss. Walks of one seed from neighbouring starts share runs:
the table gives the seed curves beside them.

Run::

    python -m research.walk_hold [--steps 128 192] [--margins 0.03 0.05 0.08 0.1] \\
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


def walk_of(curve: Curve, seed: int, start: int, step: int, margin: float) -> Walk:
    """Seed ``seed``'s walk up ``curve``'s lattice from index ``start``, whole and held at
    ``step`` with ``margin``."""
    lrs = sorted(curve.final.index)[start:]
    final = curve.final[seed].to_dict()
    at = curve.at[step][seed].to_dict()
    budget = max(curve.at)  # the last evaluation: the budget
    decisions = {}
    for lr in lrs[1:]:
        inside = held_inside(at[lr] - at[lrs[0]], WITHIN, margin)
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


def walks(curves: list[Curve], step: int, margin: float) -> pd.DataFrame:
    """Every seed's walk of every curve from each start, replayed."""
    rows = []
    for curve in curves:
        if step not in curve.at:
            continue
        optimum = sorted(curve.final.index).index(curve.final.mean(axis=1).idxmin())
        for seed, shift in itertools.product(curve.final.columns, STARTS):
            start = optimum + shift
            if 0 <= start < len(curve.final) - 1:
                found = walk_of(curve, int(seed), start, step, margin)
                rows.append({"curve": (curve.source, curve.variant, seed), **found.__dict__})
    return pd.DataFrame(rows)


def table(curves: list[Curve], steps: list[int], margins: list[float]) -> pd.DataFrame:
    """Per warmup, step and margin: walks and seed curves, the share of walks whose edge moves
    and the largest move (lattice steps), the share of decided points misjudged, and the share
    of the walks' run-steps spared."""
    rows = []
    warmups = sorted({c.warmup for c in curves if c.warmup is not None})
    for warmup, step, margin in itertools.product(warmups, steps, margins):
        found = walks([c for c in curves if c.warmup == warmup], step, margin)
        moved = (found["edge_held"] - found["edge_whole"]).abs()
        rows.append(
            {
                "warmup": warmup,
                "step": step,
                "margin": margin,
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


def every_curve() -> list[Curve]:
    """The reference's slices with their evaluations."""
    return [
        c for source, folder in WALK_REPORTS.items() for c in load_curves(source, REPO / folder)
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, nargs="+", default=[128, 192])
    parser.add_argument("--margins", type=float, nargs="+", default=[0.03, 0.05, 0.08, 0.1])
    parser.add_argument("--write", type=Path, help="a doc whose walk-hold block to rewrite")
    args = parser.parse_args(argv)
    text = table(every_curve(), args.steps, args.margins).to_markdown(index=False, floatfmt=".3g")
    if args.write:
        write_block(args.write, "walk-hold", text, command_line("research.walk_hold", argv))
    print(text)


if __name__ == "__main__":
    main()
