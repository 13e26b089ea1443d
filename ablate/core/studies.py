"""The studies' results as the stages return them and as ``stability.json`` stores them: one
contract, defined once (as :data:`ablate.core.store.SUMMARY_KEYS` is for a run's summary).

``stability.json`` has the keys :data:`STABILITY_KEYS`; its ``search`` maps each variant to a
:class:`SearchResult` stored with :data:`SEARCH_KEYS` (each trial with :data:`TRIAL_KEYS`, the
best with :data:`BEST_KEYS`), its ``max_lr`` each variant to a :class:`BoundaryResult` stored
with :data:`BOUNDARY_KEYS` (each probe with :data:`PROBE_KEYS`, each seed's bracket with
:data:`SEED_BOUNDARY_KEYS`, each boundary with :data:`INTERVAL_KEYS`, each collapse margin's
with :data:`MARGIN_KEYS`, each run held against it with :data:`OBSERVATION_KEYS`).
Every result is written by its ``stored()`` and read back by its ``from_stored()``, so the
report and the stages read the same types the stages wrote (:class:`StoredStudies`: the file).
What only one process saw — which probes it found stored, how many runs it trained itself — is
kept on the objects and never stored, so a rerun that trains nothing stores the same file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from ablate.core.boundary import Interval, SeedBoundary
from ablate.core.plan import Settings
from ablate.core.stability import Observation

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
    "reruns",
)
TRIAL_KEYS = ("lr", "number", "run_id", "stable", "state", "value", "warmup_steps")
BEST_KEYS = ("lr", "run_id", "value", "warmup_steps")
OBSERVATION_KEYS = ("diverged", "group", "lr", "run_id", "seed", "stable")
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
    "held_at",
)


def _stored(found: Any, keys: tuple[str, ...]) -> dict[str, Any]:
    """``found``'s ``keys`` as ``stability.json`` holds them."""
    return {key: getattr(found, key) for key in keys}


@dataclass(frozen=True)
class Trial:
    """One counted trial of a search: its number and Optuna state, its settings, its value
    (None where pruned or non-finite), whether its run was stable, and the run."""

    number: int
    state: str
    value: float | None
    lr: float | None
    warmup_steps: int | None
    stable: bool | None
    run_id: str | None

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it (:data:`TRIAL_KEYS`)."""
        return _stored(self, TRIAL_KEYS)

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> Trial:
        """A trial read back from ``stability.json``."""
        return cls(**{key: stored.get(key) for key in TRIAL_KEYS})


@dataclass(frozen=True)
class BestTrial:
    """A search's best stable trial: the settings the tuned stage trains at, its value."""

    lr: float
    warmup_steps: int
    value: float
    run_id: str | None

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it (:data:`BEST_KEYS`)."""
        return _stored(self, BEST_KEYS)

    @classmethod
    def from_stored(cls, stored: dict[str, Any] | None) -> BestTrial | None:
        """The best trial read back from ``stability.json`` (None stays None)."""
        return cls(**{key: stored.get(key) for key in BEST_KEYS}) if stored else None


@dataclass
class SearchResult:
    """One variant's LR x warmup study: its counted trials (by slot), the best stable one, the
    stable region's ranges (``{"lr": [low, high], ...}``) and the slots re-run (``reruns``)."""

    study: str
    trial_table: list[Trial]
    trials: int
    complete: int
    pruned: int
    stable: int
    best: BestTrial | None
    stable_region: dict[str, list[float]] | None
    reruns: list[int] = field(default_factory=list)

    @property
    def run_ids(self) -> list[str]:
        """The runs its trials trained."""
        return [t.run_id for t in self.trial_table if t.run_id]

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it."""
        stored = _stored(self, SEARCH_KEYS)
        stored["trial_table"] = [t.stored() for t in self.trial_table]
        stored["best"] = self.best and self.best.stored()
        return stored

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> SearchResult:
        """A search read back from ``stability.json``."""
        return cls(
            study=stored["study"],
            trial_table=[Trial.from_stored(t) for t in stored.get("trial_table", [])],
            trials=stored["trials"],
            complete=stored["complete"],
            pruned=stored["pruned"],
            stable=stored["stable"],
            best=BestTrial.from_stored(stored.get("best")),
            stable_region=stored.get("stable_region"),
            reruns=stored.get("reruns", []),
        )


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
        return _stored(self, PROBE_KEYS)

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> Probe:
        """A probe read back from ``stability.json``: run by an earlier process (reused)."""
        return cls(**{key: stored.get(key) for key in PROBE_KEYS}, reused=True)


def stored_seed_boundary(bound: SeedBoundary) -> dict[str, Any]:
    """One seed's bracket as ``stability.json`` holds it (its probes are the variant's)."""
    return _stored(bound, SEED_BOUNDARY_KEYS)


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
    return found and _stored(found, INTERVAL_KEYS)


def observation_of(stored: dict[str, Any]) -> Observation:
    """A run held against a boundary, read back from ``stability.json``."""
    return Observation(**{key: stored[key] for key in OBSERVATION_KEYS})


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

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> MarginBoundary:
        """A margin's boundary read back from ``stability.json``."""
        return cls(stored["margin"], seed_bounds_of(stored), interval_of(stored.get("boundary")))


@dataclass
class BoundaryResult:
    """One variant's maximum stable LR: each max-LR seed's bracket on the shared lattice
    (``per_octave`` points per doubling), their geometric mean with its interval (None when
    no seed was bracketed); the divergence boundary the same way (where runs blow up or go
    non-finite); the probes and the runs they took; after the check against the store, the
    quality boundary at each collapse margin, how many runs it was held against, which
    contradict it and which lie below the stable window (did not learn yet). ``held_at``:
    ``max_lr.stop_step``, its probes held there bracketed divergence alone (no seed bounds)."""

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
    contradictions: list[Observation] = field(default_factory=list)
    below_window: list[Observation] = field(default_factory=list)  # did not learn yet
    held_at: int | None = None

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
        found: tuple[list[Observation], list[Observation]],
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
        stored["contradictions"] = [_stored(o, OBSERVATION_KEYS) for o in self.contradictions]
        stored["below_window"] = [_stored(o, OBSERVATION_KEYS) for o in self.below_window]
        return stored

    @classmethod
    def from_stored(cls, stored: dict[str, Any]) -> BoundaryResult:
        """A boundary read back from ``stability.json``; a key an older ablate did not store
        reads as unchecked (None) or empty."""
        return cls(
            variant=stored["variant"],
            study=stored["study"],
            seeds=stored["seeds"],
            per_octave=stored["per_octave"],
            seed_bounds=seed_bounds_of(stored),
            boundary=interval_of(stored.get("boundary")),
            divergence_bounds=[seed_boundary_of(b) for b in stored.get("divergence_bounds", [])],
            divergence=interval_of(stored.get("divergence")),
            probes=[Probe.from_stored(p) for p in stored.get("probes", [])],
            run_ids=stored.get("run_ids", []),
            margins=[MarginBoundary.from_stored(m) for m in stored.get("margins", [])],
            checked_runs=stored.get("checked_runs"),
            monotone=stored.get("monotone"),
            contradictions=[observation_of(o) for o in stored.get("contradictions") or []],
            below_window=[observation_of(o) for o in stored.get("below_window") or []],
            held_at=stored.get("held_at"),
        )


StudyResult = SearchResult | BoundaryResult


@dataclass
class Studies:
    """Every study of one experiment (``{variant: result}`` per kind) and what stores them."""

    search: dict[str, SearchResult] = field(default_factory=dict)
    max_lr: dict[str, BoundaryResult] = field(default_factory=dict)

    def best_settings(self) -> dict[str, Settings]:
        """Each variant's best stable search trial's settings."""
        return {
            variant: Settings(found.best.lr, found.best.warmup_steps)
            for variant, found in self.search.items()
            if found.best
        }

    def best_lrs(self) -> dict[str, float]:
        """``{variant: lr}`` of each best stable search trial: where its bracketing starts."""
        return {variant: best.lr for variant, best in self.best_settings().items()}


@dataclass
class StoredStudies(Studies):
    """``stability.json`` read back: every result, typed, with the header the run stored (all
    None, and no results, where no study ran). Max-LR results stored by an ablate older than
    per-seed brackets (no ``seed_bounds``) are left out: ``ablate run`` brackets them again."""

    experiment: str | None = None
    storage: str | None = None
    criterion: str | None = None
    search_seed: int | None = None

    def stored(self) -> dict[str, Any]:
        """``stability.json`` (:data:`STABILITY_KEYS`): the header and every result."""
        header = {key: getattr(self, key) for key in STABILITY_KEYS[:4]}
        return {
            **header,
            "search": {v: r.stored() for v, r in self.search.items()},
            "max_lr": {v: r.stored() for v, r in self.max_lr.items()},
        }

    @classmethod
    def from_stored(cls, stored: dict[str, Any] | None) -> StoredStudies:
        """The file's results (``None``: no file, no results)."""
        if not stored:
            return cls()
        return cls(
            search={
                v: SearchResult.from_stored(r) for v, r in (stored.get("search") or {}).items()
            },
            max_lr={
                v: BoundaryResult.from_stored(r)
                for v, r in (stored.get("max_lr") or {}).items()
                if "seed_bounds" in r
            },
            experiment=stored.get("experiment"),
            storage=stored.get("storage"),
            criterion=stored.get("criterion"),
            search_seed=stored.get("search_seed"),
        )

    def in_order(self, variants: list[str]) -> StoredStudies:
        """The results in the experiment's variant order (the file sorts its keys; the report's
        baseline is the first variant); variants not in it last."""
        rank = {variant: i for i, variant in enumerate(variants)}

        def ordered(found: dict[str, Any]) -> dict[str, Any]:
            return dict(sorted(found.items(), key=lambda item: rank.get(item[0], len(rank))))

        return replace(self, search=ordered(self.search), max_lr=ordered(self.max_lr))

    def run_ids(self) -> dict[tuple[str, str], list[str]]:
        """``{(variant, kind): run ids}``: a search's trials' runs, a boundary's probes'."""
        return {
            **{(v, "search"): r.run_ids for v, r in self.search.items()},
            **{(v, "max_lr"): r.run_ids for v, r in self.max_lr.items()},
        }
