"""Check the max-LR seeds' brackets against a dense learning-rate grid (run once, by hand).

For every variant, trains a ``--points``-point log grid over the experiment's ``max_lr`` range
(``lr_min`` to ``lr_max``) with every ``max_lr`` seed, finds each seed's boundary on the grid
(its last stable LR below its first unstable one, that one), and prints it beside the seed's
bracket in ``stability.json`` from an earlier ``ablate run``/``ablate search``: whether they
agree (the intervals overlap) and how many runs each took.

    python -m ablate.bench.grid_check experiments/lr_stability.yaml --points 16
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ablate.core import store
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec, plan_lr_grid
from ablate.core.record import RunRecord
from ablate.core.stage_sections import SweepConfig
from ablate.launch.execute import execute


def grid_specs(experiment: Experiment, points: int) -> list[RunSpec]:
    """Every variant x grid LR x max_lr seed, as runs of group ``grid``."""
    cfg = experiment.max_lr
    assert cfg is not None
    grid = SweepConfig(
        lr_min=cfg.lr_min, lr_max=cfg.lr_max, points=points, seeds=cfg.seeds, tokens=cfg.tokens
    )
    return plan_lr_grid(experiment, grid, "grid")


def grid_stability(records: list[RunRecord]) -> pd.Series:
    """Per grid LR (sorted): stable for every seed of ``records``."""
    frame = pd.DataFrame({"lr": [r.lr for r in records], "stable": [r.stable for r in records]})
    return frame.groupby("lr")["stable"].agg(lambda s: bool(s.fillna(False).all())).sort_index()


def grid_boundary(stable: pd.Series) -> tuple[float | None, float | None]:
    """The onset of instability: (last LR stable below the first unstable one, that one).

    This is the boundary the bracketing search finds when it starts below it; stable LRs
    above the first unstable one (a non-monotone profile) are counted by :func:`stable_above`.
    """
    bad = stable[~stable].index
    first_bad = float(bad.min()) if len(bad) else None
    below = stable[stable & (stable.index < (first_bad or float("inf")))].index
    return (float(below.max()) if len(below) else None, first_bad)


def stable_above(stable: pd.Series, boundary: float | None) -> int:
    """How many grid LRs above the first unstable one are stable again."""
    return 0 if boundary is None else int(stable[stable.index > boundary].sum())


def overlaps(a: list[float | None], b: list[float | None]) -> bool:
    """Whether two [stable, unstable] boundary intervals are consistent (None: open end)."""
    low = max(x for x in (a[0], b[0], 0.0) if x is not None)
    high = min(x for x in (a[1], b[1], float("inf")) if x is not None)
    return low <= high


def _interval(pair: list[float | None]) -> str:
    return "[" + ", ".join("–" if x is None else f"{x:.4g}" for x in pair) + "]"


def main(argv: list[str] | None = None) -> None:
    """Train the grid (finished runs are reused), then print grid vs bracket per seed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--points", type=int, default=16)
    parser.add_argument("--results-dir", type=Path, default=Path("results"))
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    experiment = load_experiment(args.experiment)
    if experiment.max_lr is None:
        parser.error(f"{args.experiment} has no max_lr: section")
    found = store.read_studies(ExperimentFolder.of(args.results_dir, experiment.name)).max_lr
    if not found:
        parser.error(f"no max-LR boundaries stored: run `ablate run {args.experiment}` first")
    specs = grid_specs(experiment, args.points)
    by_id = {r.run_id: r for r in execute(specs, args.results_dir, args.workers)}
    print(
        f"{'variant':<12} {'seed':>4} {'grid [stable, unstable]':<26} {'runs':>5}   "
        f"{'bracket [stable, unstable]':<26}  agree"
    )
    for variant in experiment.variants:
        for bound in found[variant].seed_bounds:
            seed = bound.seed
            mine = [
                by_id[s.run_id]
                for s in specs
                if s.variant == variant and s.seed == seed and s.run_id in by_id
            ]
            stable = grid_stability(mine)
            grid = list(grid_boundary(stable))
            bracket = [bound.last_stable, bound.first_unstable]
            agree = "yes" if overlaps(grid, bracket) else "NO"
            print(
                f"{variant:<12} {seed:>4} {_interval(grid):<26} {len(mine):>5}   "
                f"{_interval(bracket):<26}  {agree}"
                f"  (stable again above the onset: {stable_above(stable, grid[1])} grid LRs)"
            )
            marks = " ".join(f"{lr:.3g}{'' if ok else 'x'}" for lr, ok in stable.items())
            print(f"  grid: {marks}")
        print(f"  {variant}: {found[variant].runs_total} probe runs in all")


if __name__ == "__main__":
    main()
