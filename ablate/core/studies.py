"""The studies' results as the stages return them and as ``stability.json`` stores them: one
contract, defined once (as :data:`ablate.core.store.SUMMARY_KEYS` is for a run's summary).

``stability.json`` has the keys :data:`STABILITY_KEYS`; its ``search`` maps each variant to a
:class:`SearchResult` stored with :data:`SEARCH_KEYS`, its ``max_lr`` each variant to a
:class:`BoundaryResult` stored with :data:`BOUNDARY_KEYS` (each probe with :data:`PROBE_KEYS`,
each seed's bracket with :data:`SEED_BOUNDARY_KEYS`, each boundary with :data:`INTERVAL_KEYS`,
each collapse margin's with :data:`MARGIN_KEYS`).
What only one process saw — which probes it found stored, how many runs it trained itself — is
kept on the objects and never stored, so a rerun that trains nothing stores the same file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ablate.core.boundary import Interval, SeedBoundary

STABILITY_KEYS = ("experiment", "storage", "criterion", "search_seed", "search", "max_lr")
SEARCH_KEYS = (
    "study",
    "trial_table",
    "trials",
    "complete",
    "pruned",
    "stable",
    "best",
    "stable_region",
)
PROBE_KEYS = ("lr", "seed", "stable", "diverged", "reason")
SEED_BOUNDARY_KEYS = ("seed", "last_stable", "first_unstable", "estimate")
INTERVAL_KEYS = ("value", "low", "high", "seeds")
MARGIN_KEYS = ("margin", "seed_bounds", "boundary")
BOUNDARY_KEYS = (
    "variant",
    "study",
    "seeds",
    "per_octave",
    "seed_bounds",
    "boundary",
    "divergence_bounds",
    "divergence",
    "margins",
    "probes",
    "runs_total",
    "run_ids",
    "checked_runs",
    "monotone",
    "contradictions",
    "below_window",
)


@dataclass
class SearchResult:
    """One variant's LR x warmup study: every counted trial, the best stable one (``lr``,
    ``warmup_steps``, ``value``, ``run_id``) and the stable region's ranges."""

    study: str
    trial_table: list[dict[str, Any]]
    trials: int
    complete: int
    pruned: int
    stable: int
    best: dict[str, Any] | None
    stable_region: dict[str, list[float]] | None

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it."""
        return {key: getattr(self, key) for key in SEARCH_KEYS}


@dataclass
class Probe:
    """One max-LR probe: one seed's run at one lattice LR, stable or not (and why not), and
    whether it diverged (non-finite, or blown up: the divergence rule); ``reused``: read back
    from the study, not run by this process (not stored)."""

    lr: float
    seed: int
    stable: bool
    diverged: bool
    reason: str | None = None  # why the run was unstable
    reused: bool = False

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it."""
        return {key: getattr(self, key) for key in PROBE_KEYS}


def stored_seed_boundary(bound: SeedBoundary) -> dict[str, Any]:
    """One seed's bracket as ``stability.json`` holds it (its probes are the variant's)."""
    return {key: getattr(bound, key) for key in SEED_BOUNDARY_KEYS}


def seed_boundary_of(stored: dict[str, Any]) -> SeedBoundary:
    """A seed's bracket read back from ``stability.json``."""
    return SeedBoundary(stored["seed"], stored["last_stable"], stored["first_unstable"])


def seed_bounds_of(entry: dict[str, Any]) -> list[SeedBoundary]:
    """The seed brackets of a stored boundary entry (a variant's, or one margin's)."""
    return [seed_boundary_of(b) for b in entry.get("seed_bounds", [])]


def interval_of(stored: dict[str, Any] | None) -> Interval | None:
    """An interval read back from ``stability.json`` (None stays None)."""
    return Interval(**{key: stored[key] for key in INTERVAL_KEYS}) if stored else None


def stored_interval(found: Interval | None) -> dict[str, Any] | None:
    """An interval as ``stability.json`` holds it."""
    return found and {key: getattr(found, key) for key in INTERVAL_KEYS}


@dataclass(frozen=True)
class MarginBoundary:
    """The quality boundary at one collapse margin, re-derived from every stored run of the
    variant's family and a max-LR seed (:func:`ablate.core.boundary.edge_of_points`)."""

    margin: float
    seed_bounds: list[SeedBoundary]
    boundary: Interval | None

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it (:data:`MARGIN_KEYS`)."""
        values = {
            "margin": self.margin,
            "seed_bounds": [stored_seed_boundary(b) for b in self.seed_bounds],
            "boundary": stored_interval(self.boundary),
        }
        return {key: values[key] for key in MARGIN_KEYS}


@dataclass
class BoundaryResult:
    """One variant's maximum stable LR: each max-LR seed's bracket on the shared lattice
    (``per_octave`` points per doubling), their median with its interval (None when no seed
    was bracketed); the divergence boundary the same way (the LR above which runs blow up or
    go non-finite, rather than fail to get below the floor); the probes and the runs they
    took; after the check against the store, the quality boundary re-derived at each collapse
    margin, how many runs it was held against, which contradict it and which lie below the
    stable window (did not learn yet)."""

    variant: str
    study: str
    seeds: list[int]
    per_octave: int
    seed_bounds: list[SeedBoundary]
    boundary: Interval | None
    divergence_bounds: list[SeedBoundary]
    divergence: Interval | None
    probes: list[Probe]
    run_ids: list[str]
    margins: list[MarginBoundary] = field(default_factory=list)
    checked_runs: int | None = None
    monotone: bool | None = None
    contradictions: list[dict[str, Any]] = field(default_factory=list)
    below_window: list[dict[str, Any]] = field(default_factory=list)  # did not learn yet

    @property
    def runs_total(self) -> int:
        """Runs the probes took, stored or trained."""
        return len(self.probes)

    @property
    def trained(self) -> int:
        """Runs this process's probes trained (the rest were stored)."""
        return sum(not p.reused for p in self.probes)

    def checked(
        self,
        checked_runs: int,
        found: tuple[list[dict[str, Any]], list[dict[str, Any]]],
        margins: list[MarginBoundary],
    ) -> BoundaryResult:
        """This boundary held against ``checked_runs`` stored runs: ``found`` the runs that
        contradict it and those below the window (did not learn yet), with its quality
        boundary at every margin."""
        contradictions, below = found
        return replace(
            self,
            checked_runs=checked_runs,
            monotone=not contradictions,
            contradictions=contradictions,
            below_window=below,
            margins=margins,
        )

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it (the probes without ``reused``)."""
        stored = {key: getattr(self, key) for key in BOUNDARY_KEYS}
        stored["probes"] = [p.stored() for p in self.probes]
        stored["seed_bounds"] = [stored_seed_boundary(b) for b in self.seed_bounds]
        stored["boundary"] = stored_interval(self.boundary)
        stored["divergence_bounds"] = [stored_seed_boundary(b) for b in self.divergence_bounds]
        stored["divergence"] = stored_interval(self.divergence)
        stored["margins"] = [m.stored() for m in self.margins]
        return stored


@dataclass
class Studies:
    """Every study of one experiment (``{variant: result}`` per kind) and what stores them."""

    search: dict[str, SearchResult] = field(default_factory=dict)
    max_lr: dict[str, BoundaryResult] = field(default_factory=dict)

    def best_settings(self) -> dict[str, dict[str, Any]]:
        """``{variant: {lr, warmup_steps}}`` of each variant's best stable search trial."""
        return {
            variant: {"lr": found.best["lr"], "warmup_steps": found.best["warmup_steps"]}
            for variant, found in self.search.items()
            if found.best
        }

    def best_lrs(self) -> dict[str, float]:
        """``{variant: lr}`` of each best stable search trial: where its bracketing starts."""
        return {variant: best["lr"] for variant, best in self.best_settings().items()}

    def stored(self, header: dict[str, Any]) -> dict[str, Any]:
        """``stability.json``: ``header`` (experiment, storage, criterion, search seed) and
        every result."""
        stored = {
            **header,
            "search": {v: r.stored() for v, r in self.search.items()},
            "max_lr": {v: r.stored() for v, r in self.max_lr.items()},
        }
        missing = set(STABILITY_KEYS) - stored.keys()
        assert not missing, f"stability.json without {sorted(missing)}"
        return stored
