"""The stability criterion, the LR-sensitivity metric and the check of the max-LR brackets
against every other run.

A run is **unstable** when (checked in this order):

1. **diverged**: its training loss becomes non-finite (NaN or inf), at any step; or its
   training loss, averaged over the last ``window`` steps (default 5, so that a one-batch spike
   that training recovers from is not a divergence), exceeds the threshold after warmup. The
   default threshold is judged against where the run starts: its start loss max(ℓ0, loss of
   step 1), ℓ0 = ln(vocab), plus ``divergence_margin`` (default 0.5), so the untrained model's
   own loss (a little above ℓ0 for a small model) is never a divergence, with or without
   warmup;
2. **collapsed**: its final validation loss is not below the floor − ``final_margin``
   (default 0.1). The floor (``floor``) is by default the corpus's unigram cross-entropy
   (train-split token frequencies, add-½ smoothing, scored on the val split): a run that ends
   there learned nothing a frequency table does not know. ``floor: initial`` uses ℓ0 instead.
   Its reason says which of three it was: **learned, then lost it** (its best val loss was
   below the line), **not learned yet** (still improving: its val loss fell by more than
   :data:`IMPROVING_DROP` over its last evaluation, so a longer budget may learn), or
   **stuck** at the floor.

The first stops the run early (``status: diverged``; :class:`DivergenceRule`, applied every
step by a training callback); the second is judged at the end (:func:`run_verdict`). Every
run's summary records ``stable``, ``unstable_reason`` and ``unstable_step``. This module is the
criterion's one home: the callbacks and the run only apply it.

:func:`contradictions` holds the max-LR stage's per-seed brackets (:mod:`ablate.core.boundary`)
against other runs of the same variant and budget; a run that failed to learn below its seed's
lowest stable LR did not learn yet (:func:`below_window`): it bounds nothing above.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from ablate.core.boundary import SeedBoundary
from ablate.core.config import StabilityConfig

if TYPE_CHECKING:
    from ablate.core.record import RunRecord

FLOAT_SLACK = 1e-9  # relative: LRs equal up to float rounding are the same LR


def criterion_text(cfg: StabilityConfig) -> str:
    """The stability criterion in words, with these settings."""
    if cfg.threshold:
        threshold = f"{cfg.threshold:g}"
    else:
        threshold = f"the start loss max(ℓ0, step-1 loss) + {cfg.divergence_margin:g}"
    when = "after warmup" if cfg.after_warmup else "at any step"
    loss = "the train loss" if cfg.window == 1 else f"the mean train loss of {cfg.window} steps"
    floor = "the unigram floor" if cfg.floor == "unigram" else "ℓ0 = ln(vocab)"
    return (
        f"unstable if the train loss becomes non-finite, or {loss} exceeds {threshold} {when} "
        f"(diverged), or the final val loss is not below {floor} − {cfg.final_margin:g} "
        "(collapsed)"
    )


def divergence_threshold(cfg: StabilityConfig, initial_loss: float, first_loss: float) -> float:
    """The train loss above which a run has diverged: ``threshold`` if set, else the run's start
    loss max(ℓ0, loss of step 1) + ``divergence_margin``."""
    if cfg.threshold:
        return cfg.threshold
    start = max(initial_loss, first_loss) if math.isfinite(first_loss) else initial_loss
    return start + cfg.divergence_margin


def floor_value(cfg: StabilityConfig, initial_loss: float, unigram: float) -> float:
    """The loss a run must get below (by ``final_margin``) to count as having learned."""
    return unigram if cfg.floor == "unigram" and math.isfinite(unigram) else initial_loss


class Instability(Enum):
    """Why a run was judged unstable: the opening of its reason."""

    DIVERGED = "diverged"  # stopped early by the divergence rule (its :class:`Stop` says how)
    NON_FINITE = "non-finite"  # no finite final val loss to judge
    COLLAPSED = "collapsed"  # final val loss not below the line: stuck, or learned and lost it
    NOT_LEARNED_YET = "not learned yet"  # not below the line, but still improving at its end


@dataclass(frozen=True)
class FloorMiss:
    """A final val loss ``final`` not below ``floor`` − ``margin``; ``best`` the run's best val
    loss where it was below that line (it learned, then lost it), ``drop`` how far the val loss
    fell over its last evaluation."""

    final: float
    floor: float
    margin: float
    unigram: bool  # the floor is the unigram floor (else the initial loss ℓ0)
    best: float | None
    drop: float

    def where(self) -> str:
        """``final val loss 3.27 not below the unigram floor 3.25 − 0.1``."""
        name = "unigram floor" if self.unigram else "initial loss ℓ0"
        return (
            f"final val loss {self.final:.4g} not below the {name} {self.floor:.4g} − "
            f"{self.margin:g}"
        )


@dataclass(frozen=True)
class Verdict:
    """Whether a run was stable, and if not, of which :class:`Instability`, at which step, and
    the numbers behind it: the early ``stop`` (diverged) or the ``miss`` of the floor."""

    stable: bool
    kind: Instability | None = None
    step: int | None = None
    stop: Stop | None = None
    miss: FloorMiss | None = None

    @property
    def reason(self) -> str | None:
        """The reason in words, as run summaries store it (None: stable)."""
        if self.kind is None:
            return None
        if self.stop is not None:
            return f"diverged: {self.stop.reason}"
        if self.miss is None:
            return "no finite final val loss"
        if self.kind is Instability.NOT_LEARNED_YET:
            return (
                f"not learned yet: {self.miss.where()}, still improving "
                f"({self.miss.drop:.3g} over its last evaluation)"
            )
        if self.miss.best is not None:
            return (
                f"collapsed: learned (best val loss {self.miss.best:.4g}), then {self.miss.where()}"
            )
        return f"collapsed: {self.miss.where()}"


IMPROVING_DROP = 0.01  # nats: a val loss that fell more over the last evaluation still improves
NOT_LEARNED_YET = Instability.NOT_LEARNED_YET.value  # the reason's opening for such a run


def not_learned_yet(reason: object) -> bool:
    """Whether an unstable run's reason says it was still improving (did not learn yet)."""
    return isinstance(reason, str) and reason.startswith(NOT_LEARNED_YET)


def final_loss_verdict(
    val_losses: Sequence[float],
    cfg: StabilityConfig,
    initial_loss: float,
    unigram: float,
    step: int,
) -> Verdict:
    """Criterion 2: a run whose final val loss (the last of ``val_losses``, every evaluation in
    order) is not below floor − margin collapsed; its verdict tells a run that learned and lost
    it, one still improving at its last evaluation (not learned yet) and one stuck apart."""
    final = val_losses[-1] if len(val_losses) else None
    if final is None or not math.isfinite(final):
        return Verdict(False, Instability.NON_FINITE, step)
    floor = floor_value(cfg, initial_loss, unigram)
    line = floor - cfg.final_margin
    if final < line:
        return Verdict(True)
    finite = [v for v in val_losses if math.isfinite(v)]
    drop = finite[-2] - final if len(finite) > 1 else 0.0
    best = min(finite) if min(finite) < line else None
    miss = FloorMiss(final, floor, cfg.final_margin, floor == unigram, best, drop)
    if best is None and drop > IMPROVING_DROP:
        return Verdict(False, Instability.NOT_LEARNED_YET, step, miss=miss)
    return Verdict(False, Instability.COLLAPSED, step, miss=miss)


def verdict_at_margin(
    status: str,
    final_val_loss: float | None,
    losses: tuple[float, float],
    cfg: StabilityConfig,
    margin: float,
) -> bool:
    """Whether a finished or diverged run is stable under ``cfg`` with ``final_margin`` set to
    ``margin``: a diverged run never is (the divergence rule does not depend on the margin)."""
    if status == "diverged":
        return False
    at_margin = cfg.model_copy(update={"final_margin": margin})
    initial_loss, unigram = losses
    final = [final_val_loss] if final_val_loss is not None else []
    return final_loss_verdict(final, at_margin, initial_loss, unigram, 0).stable


class StopKind(Enum):
    """Why a run stopped early."""

    NON_FINITE = "non-finite"  # a NaN or infinite train loss
    ABOVE_THRESHOLD = "above threshold"  # the (mean) train loss above the divergence threshold
    PRUNED = "pruned"  # the search's pruner ended it at an evaluation
    PAUSED = "paused"  # a curve run held at the early stop's step, its checkpoint kept
    FAR_ABOVE = "far above the best"  # the curve's early stop: ``loss`` nats above its best
    HELD = "held"  # a max-LR probe held at max_lr.stop_step: it had not diverged by then
    WITHIN_BAND = "within the band"  # a walk point held at max_lr.walk_step, decided within
    ABOVE_BAND = "above the band"  # and one decided above: ``loss`` its gap over the start


@dataclass(frozen=True)
class Stop:
    """Where and why a run stopped early: its ``kind``, and for a divergence the ``loss`` (the
    non-finite one, or the mean of ``steps`` steps in a ``window``) against ``threshold``."""

    step: int
    kind: StopKind
    loss: float = math.nan
    threshold: float = math.nan
    window: int = 1
    steps: int = 1  # the steps the mean covered (fewer than ``window`` early in a run)
    after_warmup: bool = False

    @property
    def reason(self) -> str:
        """The reason in words, as run summaries store it."""
        if self.kind is StopKind.PRUNED:
            return f"pruned by Optuna at step {self.step}"
        if self.kind is StopKind.PAUSED:
            return f"paused at step {self.step} for the curve's early stop"
        if self.kind is StopKind.FAR_ABOVE:
            return (
                f"stopped at step {self.step}: {self.loss:.3g} nats above the curve's best "
                f"point there (margin {self.threshold:.3g})"
            )
        if self.kind in (StopKind.WITHIN_BAND, StopKind.ABOVE_BAND):
            return (
                f"stopped at step {self.step}: {self.loss:.3g} nats over its seed's start there, "
                f"{self.kind.value} (edge {self.threshold:.3g}, max_lr.walk_step)"
            )
        if self.kind is StopKind.HELD:
            return f"held at step {self.step} (max_lr.stop_step): not diverged by then"
        if self.kind is StopKind.NON_FINITE:
            return f"non-finite loss ({self.loss})"
        what = "loss" if self.window == 1 else f"mean loss of {self.steps} steps"
        after = " after warmup" if self.after_warmup else ""
        return f"{what} {self.loss:.4g} > threshold {self.threshold:.4g}{after}"


class DivergenceRule:
    """Criterion 1, step by step: a non-finite train loss, or the mean train loss of the last
    ``window`` steps above the threshold after warmup (``window`` 1: any single step).

    The threshold is fixed at the first step (:func:`divergence_threshold`): the criterion's
    ``threshold`` if set, else the run's start loss max(ℓ0, loss of step 1) +
    ``divergence_margin``, so the untrained model's own loss is never a divergence.
    """

    def __init__(self, cfg: StabilityConfig, initial_loss: float, warmup_steps: int) -> None:
        self.cfg = cfg
        self.initial_loss = initial_loss
        self.threshold: float | None = None
        self.warmup_steps = warmup_steps if cfg.after_warmup else 0
        self.recent: deque[float] = deque(maxlen=cfg.window)

    def check(self, step: int, loss: float) -> Stop | None:
        """Record the training loss of ``step``; the divergence it shows, if any."""
        if self.threshold is None:
            self.threshold = divergence_threshold(self.cfg, self.initial_loss, loss)
        if not math.isfinite(loss):
            return Stop(step, StopKind.NON_FINITE, loss)
        self.recent.append(loss)
        mean = sum(self.recent) / len(self.recent)
        if step > self.warmup_steps and mean > self.threshold:
            return Stop(
                step,
                StopKind.ABOVE_THRESHOLD,
                mean,
                self.threshold,
                self.recent.maxlen or 1,
                len(self.recent),
                bool(self.warmup_steps),
            )
        return None


def run_verdict(
    status: str,
    stop: Stop | None,
    val_losses: Sequence[float],
    cfg: StabilityConfig,
    losses: tuple[float, float],
    steps: int,
) -> Verdict | None:
    """The stability verdict of a run that ended with ``status`` (``val_losses``: its
    evaluations in order); None when it cannot be judged (pruned, failed, interrupted).
    ``losses`` are the run's ℓ0 and the corpus's unigram loss."""
    if status == "diverged" and stop is not None:
        return Verdict(False, Instability.DIVERGED, stop.step, stop=stop)
    if status != "finished":
        return None
    initial_loss, unigram = losses
    return final_loss_verdict(val_losses, cfg, initial_loss, unigram, steps)


def clipped_loss(loss: float | None, initial_loss: float) -> float:
    """min(loss, ℓ0), with a missing or non-finite loss counted as ℓ0 (Wortsman et al. 2023)."""
    if loss is None or not math.isfinite(loss):
        return initial_loss
    return min(loss, initial_loss)


def trial_value(record: RunRecord) -> float:
    """What every stage selects on: the final val loss, an unstable run counted as
    min(loss, ℓ0) and a run without one as ℓ0."""
    loss = record.final_val_loss
    if record.stable is False:
        return clipped_loss(loss, record.initial_loss)
    return loss if loss is not None else record.initial_loss


def lr_sensitivity(losses: Sequence[float | None], initial_loss: float) -> float:
    """Wortsman et al. (2023): mean over a learning-rate grid of min(ℓ(η), ℓ0) − ℓ*, ℓ* the
    grid's lowest loss (a missing or non-finite loss counts as ℓ0). Lower: less sensitive."""
    clipped = [clipped_loss(loss, initial_loss) for loss in losses]
    return sum(clipped) / len(clipped) - min(clipped)


@dataclass(frozen=True)
class Observation:
    """One stored run of a variant: its LR and whether it was stable."""

    run_id: str
    lr: float
    stable: bool
    group: str
    seed: int
    diverged: bool = False


def below_window(runs: Sequence[Observation]) -> list[Observation]:
    """The runs that did not learn yet: unstable without diverging, below the lowest LR at
    which their seed was stable (a seed with no stable run: the lowest of any seed's). The
    low end of the stable window, not a hole in it."""
    lowest: dict[int, float] = {}
    for run in runs:
        if run.stable:
            lowest[run.seed] = min(run.lr, lowest.get(run.seed, math.inf))
    anyone = min(lowest.values(), default=math.inf)
    return [
        run
        for run in runs
        if not run.stable
        and not run.diverged
        and run.lr < lowest.get(run.seed, anyone) * (1 - FLOAT_SLACK)
    ]


def contradictions(
    bounds: Sequence[SeedBoundary], runs: Sequence[Observation]
) -> list[Observation]:
    """The runs that contradict the seeds' brackets: an unstable run below its seed's last
    stable LR (a hole; for a seed not bracketed, below the lowest last stable LR of the seeds
    that were, where each of them was stable), or a stable run above an LR at or beyond its
    seed's first unstable one (for another seed, the highest) where the same seed was unstable
    (stability coming back). Runs :func:`below_window` are not holes. Empty: the brackets are
    monotone with every run."""
    own = {b.seed: b for b in bounds}
    every_stable = min((b.last_stable for b in bounds if b.last_stable is not None), default=None)
    every_unstable = max(
        (b.first_unstable for b in bounds if b.first_unstable is not None), default=None
    )
    failed_at: dict[int, float] = {}  # per seed: its smallest unstable LR at/after its bracket
    for run in runs:
        edge = own[run.seed].first_unstable if run.seed in own else every_unstable
        if edge is not None and not run.stable and run.lr >= edge * (1 - FLOAT_SLACK):
            failed_at[run.seed] = min(run.lr, failed_at.get(run.seed, math.inf))
    unlearned = {id(run) for run in below_window(runs)}
    found = []
    for run in runs:
        if id(run) in unlearned:
            continue
        floor = own[run.seed].last_stable if run.seed in own else every_stable
        hole = floor is not None and run.lr < floor * (1 - FLOAT_SLACK)
        above = run.lr > failed_at.get(run.seed, math.inf) * (1 + FLOAT_SLACK)
        if (hole and not run.stable) or (above and run.stable):
            found.append(run)
    return sorted(found, key=lambda r: (r.lr, r.seed))
