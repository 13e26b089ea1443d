"""The curve stage: every variant's final loss along a lattice of LRs on curve seeds disjoint
from the final ones, grown at an edge optimum, and the tuned A/B's settings from each
variant's optimum (:mod:`ablate.core.optimum`).

The grid is fixed by design (every 2^(k / ``curve.per_octave``) of the range), so its runs go
through the stage's executor like the shared A/B's, in parallel; where a curve's lowest point
is the grid's first or last LR, the grid grows by an octave on that side, up to
``curve.extend`` octaves, and the report says when an optimum is still at an edge.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ablate.core import store
from ablate.core.experiment import Experiment
from ablate.core.optimum import Curve, Optimum, edge_sides, variant_optimum
from ablate.core.plan import RunSpec, plan_curve, plan_manifest
from ablate.launch.execute import Executor


def curve_stage(
    experiment: Experiment,
    executor: Executor,
    exp_dir: Path,
    planned: list[RunSpec],
    say: Callable[[str], None],
) -> tuple[list[RunSpec], dict[str, Optimum | None]]:
    """Every variant's LR curve on the curve seeds (:func:`plan_curve`), grown by an octave
    on a side where a curve's lowest point is the grid's end, up to ``curve.extend`` octaves;
    (the curve runs, each variant's optimum). The plan in ``exp_dir`` (``planned`` runs) gains
    the curve's runs before they train."""
    cfg = experiment.curve
    assert cfg is not None
    grown = [0, 0]
    while True:
        specs = plan_curve(experiment, (grown[0], grown[1]))
        store.write_manifest(exp_dir, plan_manifest(experiment, planned + specs))
        summaries = {s["run_id"]: s for s in executor.run(specs)}
        curves = {v: curve_of(specs, summaries, v) for v in experiment.variants}
        grid = cfg.lrs(grown[0], grown[1])
        sides = set().union(*(edge_sides(c, grid) for c in curves.values()))
        if not sides or sum(grown) >= cfg.extend:
            return specs, {v: variant_optimum(c) for v, c in curves.items()}
        for side in sorted(sides)[: cfg.extend - sum(grown)]:
            grown[0 if side < 0 else 1] += 1
        lrs = cfg.lrs(*grown)
        say(f"curve: a lowest point at the grid's edge: grown to {lrs[0]:.3g}–{lrs[-1]:.3g}")


def curve_of(specs: list[RunSpec], summaries: dict[str, dict], variant: str) -> dict[int, Curve]:
    """``{seed: [(lr, final val loss)]}`` of the variant's stable curve runs."""
    found: dict[int, list[tuple[float, float]]] = {}
    for spec in specs:
        summary = summaries.get(spec.run_id)
        if spec.variant == variant and summary and summary.get("stable"):
            found.setdefault(spec.seed, []).append(
                (spec.config.train.lr, float(summary["final_val_loss"]))
            )
    return found


def at_curve_optima(
    experiment: Experiment, chosen: dict[str, dict[str, Any]], optima: dict[str, Optimum | None]
) -> dict[str, dict[str, Any]]:
    """The tuned A/B's settings: each variant at its curve's optimum LR, with the search's
    best warmup where there is a search (else the file's)."""
    return {
        variant: {
            "lr": found.value,
            "warmup_steps": chosen.get(variant, {}).get(
                "warmup_steps", experiment.variants[variant].train.warmup_steps
            ),
        }
        for variant, found in optima.items()
        if found is not None
    }
