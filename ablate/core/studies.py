"""The studies' results as the stages return them and as ``stability.json`` stores them: one
contract, defined once (as :data:`ablate.core.store.SUMMARY_KEYS` is for a run's summary).

``stability.json`` has the keys :data:`STABILITY_KEYS`; its ``search`` maps each variant to a
:class:`SearchResult` stored with :data:`SEARCH_KEYS`, its ``max_lr`` each variant to a
:class:`BracketResult` stored with :data:`BRACKET_KEYS` (each probe with :data:`PROBE_KEYS`).
What only one process saw — which probes it found stored, how many runs it trained itself — is
kept on the objects and never stored, so a rerun that trains nothing stores the same file.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

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
PROBE_KEYS = ("lr", "stable", "runs", "failed_seeds", "reason")
BRACKET_KEYS = (
    "variant",
    "study",
    "seeds",
    "bracket",
    "ratio",
    "precision",
    "probes",
    "runs_total",
    "failed_seeds",
    "run_ids",
    "checked_runs",
    "monotone",
    "contradictions",
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
    """One max-LR probe: stable for every seed tried, the runs it took, the seeds that failed;
    ``reused``: read back from the study, not run by this process (not stored)."""

    lr: float
    stable: bool
    runs: int
    failed_seeds: list[int]
    reason: str | None = None  # why the first failing seed was unstable
    reused: bool = False

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it."""
        return {key: getattr(self, key) for key in PROBE_KEYS}


@dataclass
class BracketResult:
    """One variant's max-stable-LR bracket, its probes and the runs they took; after the check
    against the store, how many runs it was held against and which contradict it."""

    variant: str
    study: str
    seeds: list[int]
    bracket: list[float | None]  # [largest stable, smallest unstable]
    ratio: float | None
    precision: float
    probes: list[Probe]
    run_ids: list[str]
    checked_runs: int | None = None
    monotone: bool | None = None
    contradictions: list[dict[str, Any]] = field(default_factory=list)

    @property
    def runs_total(self) -> int:
        """Runs the probes took, stored or trained."""
        return sum(p.runs for p in self.probes)

    @property
    def trained(self) -> int:
        """Runs this process's probes trained (the rest were stored)."""
        return sum(p.runs for p in self.probes if not p.reused)

    @property
    def failed_seeds(self) -> list[int]:
        """Every seed an unstable probe stopped at."""
        return sorted({s for p in self.probes for s in p.failed_seeds})

    def checked(self, checked_runs: int, contradictions: list[dict[str, Any]]) -> BracketResult:
        """This bracket held against ``checked_runs`` stored runs."""
        return replace(
            self,
            checked_runs=checked_runs,
            monotone=not contradictions,
            contradictions=contradictions,
        )

    def stored(self) -> dict[str, Any]:
        """As ``stability.json`` holds it (the probes without ``reused``)."""
        stored = {key: getattr(self, key) for key in BRACKET_KEYS}
        stored["probes"] = [p.stored() for p in self.probes]
        return stored


@dataclass
class Studies:
    """Every study of one experiment (``{variant: result}`` per kind) and what stores them."""

    search: dict[str, SearchResult] = field(default_factory=dict)
    max_lr: dict[str, BracketResult] = field(default_factory=dict)

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
