"""The dense measured reference: the per-run table of ``experiments/reference.yaml`` read as
ground truth, and that truth's own answers with intervals over its seeds.

The reference trains both norms of the default experiment at every point of an LR lattice
(2^(k/4) through the basin, 2^(k/2) on to the divergence edge) on 16 seeds, in two runs of
``experiments/reference.yaml`` (seeds 0–7, then 8–15: :data:`REFERENCE_RUNS`).
:func:`load_reference` reads their ``runs.csv`` tables into one :class:`Curves` per variant:
seed × LR tables of the selection loss (final val loss, an unstable run counted as min(ℓ, ℓ0),
as every stage selects), the final test loss, and whether each run diverged or learned. The
answers every estimator is scored against (:mod:`research.held_to_runs`) are computed here
from all seeds:

- the LR optimum: the lattice point of the lowest seed-mean selection loss;
- Δ = second − first variant on the test split, paired by seed, at each one's optimum and at
  a shared LR;
- the usable-LR boundary: per seed, the largest lattice LR above the optimum before the first
  whose final loss is more than ``band`` nats above the seed's loss at the optimum;
- the divergence edge: per seed, the largest LR below its first diverged one.

Each comes with a percentile bootstrap over the reference's seeds (its own sampling error:
the reference is measured, not perfect).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.core.boundary import bracket_seed
from ablate.core.stability import clipped_loss
from ablate.core.usable import walk_seed
from research import REPO

REFERENCE_RUNS = (  # seeds 0-7, then seeds 8-15 (ablate run ... --seeds 8,...,15)
    REPO / "reports/reference/runs.csv",
    REPO / "reports/reference_seeds_8_15/reference/runs.csv",
)
HELD_OUT_RUNS = (  # seeds 16-23 of the same file, run after every estimator was chosen
    REPO / "reports/reference_seeds_16_23/reference/runs.csv",
)
Runs = Path | Sequence[Path]  # one or more runs.csv tables of a reference
FINE_PER_OCTAVE = 4  # the reference's lattice through the basin: 2^(1/4)
BAND = 0.1  # nats: the usable-LR boundary's default band (docs/stability-and-search.md)
BOOTSTRAP = 2000  # resamples of the reference's seeds for its own intervals


@dataclass(frozen=True)
class Curves:
    """One variant's reference: (LR, seed) arrays over its lattice (LRs ascending)."""

    lrs: np.ndarray
    seeds: tuple[int, ...]
    select: np.ndarray  # final val loss, an unstable run as min(ℓ, ℓ0): what stages select on
    test: np.ndarray  # final test loss (NaN where the run did not finish)
    diverged: np.ndarray  # blew up or went non-finite
    learned: np.ndarray  # the stability criterion's verdict (below the unigram floor)
    _usable_edges: dict[tuple[int, float, float], float | None] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )  # (seed, start, band): edge, filled by usable_edge_of

    @cached_property
    def _columns(self) -> dict[int, int]:
        return {seed: i for i, seed in enumerate(self.seeds)}

    @cached_property
    def _rows(self) -> dict[float, int]:
        """Each LR's row; an LR held twice has none (a replay reads millions of rows)."""
        rows = {float(lr): i for i, lr in enumerate(self.lrs)}
        return {lr: i for lr, i in rows.items() if np.count_nonzero(self.lrs == lr) == 1}

    def columns(self, seeds: Sequence[int]) -> np.ndarray:
        """The columns of ``seeds`` (a seed may repeat: a bootstrap draw)."""
        return np.array([self._columns[int(s)] for s in seeds])

    def row(self, lr: float) -> int:
        """The row of a reference LR (exactly one of :attr:`lrs`)."""
        found = self._rows.get(lr)
        if found is None:
            raise KeyError(f"{lr!r} is not an LR of the reference")
        return found

    def nearest(self, lr: float) -> float:
        """The reference LR nearest ``lr`` in log (a tie goes to the lower)."""
        return float(self.lrs[int(np.argmin(np.abs(np.log2(self.lrs) - math.log2(lr))))])

    def subset(self, seeds: Sequence[int]) -> Curves:
        """These curves on ``seeds`` only (a seed may repeat: a bootstrap draw)."""
        cols = self.columns(seeds)
        return Curves(
            self.lrs,
            tuple(range(len(cols))),  # renamed: a repeated seed is another column
            self.select[:, cols],
            self.test[:, cols],
            self.diverged[:, cols],
            self.learned[:, cols],
        )

    def loss_of(self, seed: int) -> np.ndarray:
        """One seed's selection loss along the lattice."""
        return self.select[:, self._columns[int(seed)]]

    @cached_property
    def divergence_edges(self) -> dict[int, float | None]:
        """Each seed's divergence edge (:func:`divergence_edge`), by seed: a bootstrap asks
        for the same seeds' edges thousands of times."""
        return {s: divergence_edge(self.lrs, self.diverged[:, i]) for s, i in self._columns.items()}

    @cached_property
    def learned_edges(self) -> dict[int, float | None]:
        """Each seed's "learned at all" edge (:func:`learned_edge`), by seed."""
        return {s: learned_edge(self.lrs, self.learned[:, i]) for s, i in self._columns.items()}

    def usable_edge_of(self, seed: int, start: float, band: float) -> float | None:
        """One seed's walked usable-LR boundary from ``start`` (:func:`usable_edge`), kept:
        a bootstrap's draws start from a few optima only."""
        key = (int(seed), start, band)
        if key not in self._usable_edges:
            self._usable_edges[key] = usable_edge(self.lrs, self.loss_of(seed), start, band)
        return self._usable_edges[key]


def selection_loss(row: pd.Series) -> float:
    """What the curve, search and warmup stages select on: the final val loss, an unstable run
    counted as min(ℓ, ℓ0) (a missing loss as ℓ0)."""
    loss = None if pd.isna(row["final_val_loss"]) else float(row["final_val_loss"])
    if str(row["stable"]) == "False":
        return clipped_loss(loss, float(row["initial_loss"]))
    return loss if loss is not None else float(row["initial_loss"])


def read_runs(paths: Runs) -> tuple[pd.DataFrame, str]:
    """The lattice runs (group ``sweep``) of one or more ``runs.csv`` tables, and their names
    for errors; a (variant, seed, LR) in two tables is an error, not a choice."""
    paths = [paths] if isinstance(paths, Path) else list(paths)
    name = ", ".join(map(str, paths))
    runs = pd.concat([pd.read_csv(p) for p in paths], ignore_index=True)
    runs = runs[runs["group"] == "sweep"].copy()
    if runs.empty:
        raise ValueError(f"{name}: no sweep runs: not a reference's runs.csv")
    twice = runs.duplicated(["variant", "seed", "lr"])
    if twice.any():
        first = runs[twice].iloc[0]
        raise ValueError(
            f"{name}: {first['variant']} seed {first['seed']} at LR {first['lr']} appears twice"
        )
    return runs, name


def load_reference(paths: Runs = REFERENCE_RUNS) -> dict[str, Curves]:
    """Each variant's :class:`Curves` from a reference's ``runs.csv`` tables (their lattice
    runs, :func:`read_runs`); every seed must have run every LR."""
    runs, path = read_runs(paths)
    runs["select"] = runs.apply(selection_loss, axis=1)
    reason = runs["unstable_reason"].astype(str)
    runs["diverged_flag"] = (runs["status"] == "diverged") | reason.str.startswith("diverged")
    runs["learned_flag"] = runs["stable"].astype(str) == "True"
    curves = {}
    for variant, rows in runs.groupby("variant", sort=False):

        def table(column: str, rows: pd.DataFrame = rows) -> pd.DataFrame:
            return rows.pivot_table(index="lr", columns="seed", values=column, aggfunc="first")

        select = table("select").sort_index()
        if select.isna().any().any():
            raise ValueError(f"{path}: {variant} misses runs: every seed needs every LR")
        curves[str(variant)] = Curves(
            select.index.to_numpy(dtype=float),
            tuple(int(s) for s in select.columns),
            select.to_numpy(dtype=float),
            table("final_test_loss").reindex_like(select).to_numpy(dtype=float),
            table("diverged_flag").reindex_like(select).to_numpy(dtype=bool),
            table("learned_flag").reindex_like(select).to_numpy(dtype=bool),
        )
    return curves


def mean_argmin(curves: Curves, seeds: Sequence[int], lrs: Sequence[float]) -> float:
    """The LR of ``lrs`` with the lowest mean selection loss over ``seeds``."""
    rows = [curves.row(lr) for lr in lrs]
    means = curves.select[np.ix_(rows, curves.columns(seeds))].mean(axis=1)
    return float(curves.lrs[rows[int(np.argmin(means))]])


def usable_edge(
    lrs: np.ndarray, losses: np.ndarray, start: float, band: float = BAND, walk: bool = True
) -> float | None:
    """One seed's usable-LR boundary from ``start`` (its optimum): the largest lattice LR at
    or above it before the first whose loss exceeds the loss at ``start`` by more than
    ``band``. ``walk``: every lattice point in turn (the reference's own answer); else as the
    protocol brackets (:func:`ablate.core.boundary.bracket_seed`: moves up of a factor 2,
    then bisection), which may step over a point that fails between two that pass. None
    where no LR above fails (the lattice's end)."""
    first = int(np.flatnonzero(lrs == start)[0])
    threshold = losses[first] + band
    if walk:  # the usable stage's own walk, over the reference's lattice
        lattice = [float(lr) for lr in lrs[first:]]
        found = walk_seed(
            0, dict(zip(lattice, losses[first:].tolist(), strict=True)), lattice, band
        )
        return found.edge if found.failed_at is not None else None

    def passes(lr: float) -> bool:
        return bool(losses[int(np.argmin(np.abs(np.log2(lrs) - math.log2(lr))))] <= threshold)

    found = bracket_seed(
        passes, 0, start, (start, float(lrs[-1])), per_octave=FINE_PER_OCTAVE, coarse=4
    )
    return found.last_stable if found.first_unstable is not None else None


def first_flag_edge(lrs: np.ndarray, flags: np.ndarray, after: int = 0) -> float | None:
    """The largest LR below the first flagged one at row ``after`` or above (None: none
    flagged, or the first row is)."""
    flagged = np.flatnonzero(flags[after:])
    if not len(flagged) or after + flagged[0] == 0:
        return None
    return float(lrs[after + flagged[0] - 1])


def divergence_edge(lrs: np.ndarray, diverged: np.ndarray) -> float | None:
    """One seed's divergence edge: the largest LR below its first diverged one."""
    return first_flag_edge(lrs, diverged)


def learned_edge(lrs: np.ndarray, learned: np.ndarray) -> float | None:
    """One seed's "learned at all" edge: the largest LR below the first that failed the
    stability criterion above its lowest learned one (the old max-stable-LR's quantity)."""
    ok = np.flatnonzero(learned)
    return first_flag_edge(lrs, ~learned, int(ok[0])) if len(ok) else None


def median_found(values: Sequence[float | None]) -> float:
    """The median of the found values (NaN where none was found)."""
    found = [v for v in values if v is not None]
    return float(np.median(found)) if found else math.nan


@dataclass(frozen=True)
class Answer:
    """One of the reference's answers: the value from all its seeds and a 95% percentile
    bootstrap interval over them."""

    value: float
    low: float
    high: float


Statistic = Callable[[Sequence[int]], float]


def bootstrapped(statistic: Statistic, seeds: Sequence[int], draws: int = BOOTSTRAP) -> Answer:
    """``statistic(seeds)`` and its percentile interval over seeds resampled with
    replacement (a fixed generator: the same interval on every call)."""
    rng = np.random.default_rng(0)
    values = np.array([statistic(list(rng.choice(seeds, len(seeds)))) for _ in range(draws)])
    finite = values[np.isfinite(values)]
    low, high = np.percentile(finite, [2.5, 97.5]) if len(finite) else (math.nan, math.nan)
    return Answer(statistic(list(seeds)), float(low), float(high))


def optimum(curves: Curves, seeds: Sequence[int] | None = None) -> float:
    """The reference optimum: the lattice LR of the lowest seed-mean selection loss."""
    return mean_argmin(curves, seeds or curves.seeds, curves.lrs)


def paired_test_delta(
    first: Curves, second: Curves, first_lr: float, second_lr: float, seeds: Sequence[int]
) -> np.ndarray:
    """Per seed, second's final test loss at ``second_lr`` minus first's at ``first_lr``."""
    return (
        second.test[second.row(second_lr), second.columns(seeds)]
        - first.test[first.row(first_lr), first.columns(seeds)]
    )


def usable_boundary(curves: Curves, seeds: Sequence[int], band: float = BAND) -> float:
    """The median over ``seeds`` of their walked usable-LR boundaries from the optimum of
    those seeds' mean curve."""
    start = optimum(curves, seeds)
    return median_found([curves.usable_edge_of(s, start, band) for s in seeds])


def divergence_boundary(curves: Curves, seeds: Sequence[int]) -> float:
    """The median over ``seeds`` of their divergence edges."""
    return median_found([curves.divergence_edges[int(s)] for s in seeds])


def learned_boundary(curves: Curves, seeds: Sequence[int]) -> float:
    """The median over ``seeds`` of their "learned at all" edges."""
    return median_found([curves.learned_edges[int(s)] for s in seeds])
