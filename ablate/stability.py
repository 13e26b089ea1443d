"""The stability criterion, the LR-sensitivity metric, and the max-stable-LR bracketing search.

A run is **unstable** when (checked in this order):

1. its training loss becomes non-finite (NaN or inf), at any step;
2. its training loss, averaged over the last ``window`` steps (default 5, so that a one-batch
   spike that training recovers from is not a divergence), exceeds the threshold (default: the
   initial loss ℓ0 = ln V) after warmup;
3. its final validation loss stays above ℓ0 − ``final_margin``: it never learned.

The first two stop the run early (``status: diverged``); the third is judged at the end. Every
run's summary records ``stable``, ``unstable_reason`` and ``unstable_step``.

The search functions here are pure: :func:`bracket_max_stable` takes a ``probe(lr) -> bool``
and knows nothing of training or Optuna, so it can be tested on a synthetic stability function.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ablate.config import StabilityConfig


def criterion_text(cfg: StabilityConfig) -> str:
    """The stability criterion in words, with these settings."""
    threshold = f"{cfg.threshold:g}" if cfg.threshold else "ℓ0 = ln(vocab)"
    when = "after warmup" if cfg.after_warmup else "at any step"
    loss = "the train loss" if cfg.window == 1 else f"the mean train loss of {cfg.window} steps"
    return (
        f"unstable if the train loss becomes non-finite, or {loss} exceeds {threshold} {when}, "
        f"or the final val loss stays above ℓ0 − {cfg.final_margin:g}"
    )


@dataclass(frozen=True)
class Verdict:
    """Whether a run was stable, and if not, why and at which step."""

    stable: bool
    reason: str | None = None
    step: int | None = None


def final_loss_verdict(
    final_val_loss: float | None, initial_loss: float, final_margin: float, step: int
) -> Verdict:
    """Criterion 3: a run whose final val loss is above ℓ0 − margin never learned."""
    if final_val_loss is None or not math.isfinite(final_val_loss):
        return Verdict(False, "no finite final val loss", step)
    if final_val_loss > initial_loss - final_margin:
        return Verdict(
            False,
            f"final val loss {final_val_loss:.4g} > initial loss {initial_loss:.4g} "
            f"- margin {final_margin:g}",
            step,
        )
    return Verdict(True)


def clipped_loss(loss: float | None, initial_loss: float) -> float:
    """min(loss, ℓ0), with a missing or non-finite loss counted as ℓ0 (Wortsman et al. 2023)."""
    if loss is None or not math.isfinite(loss):
        return initial_loss
    return min(loss, initial_loss)


def lr_sensitivity(losses: Sequence[float | None], initial_loss: float) -> float:
    """E_lr[min(ℓ(lr), ℓ0)] − min_lr ℓ(lr) over a learning-rate grid (lower: less sensitive)."""
    clipped = [clipped_loss(loss, initial_loss) for loss in losses]
    return sum(clipped) / len(clipped) - min(clipped)


@dataclass
class Bracket:
    """The max-stable-LR search's result: largest stable and smallest unstable LR probed."""

    largest_stable: float | None
    smallest_unstable: float | None
    probes: list[tuple[float, bool]] = field(default_factory=list)

    @property
    def ratio(self) -> float | None:
        """smallest_unstable / largest_stable, the bracket's relative width."""
        if self.largest_stable is None or self.smallest_unstable is None:
            return None
        return self.smallest_unstable / self.largest_stable


def bracket_max_stable(
    probe: Callable[[float], bool],
    start: float,
    factor: float = 4.0,
    precision: float = 2**0.25,
    lr_min: float = 1e-6,
    lr_max: float = 100.0,
) -> Bracket:
    """Find the largest stable LR to within ``precision`` (a ratio), assuming one boundary.

    Coarse phase: from ``start``, multiply by ``factor`` while stable (or divide while
    unstable) until the boundary is bracketed or ``lr_min``/``lr_max`` is reached. Fine phase:
    bisect in log space (probe the geometric mean) until unstable / stable <= ``precision``.
    """
    if not (lr_min <= start <= lr_max) or factor <= 1 or precision <= 1:
        raise ValueError("need lr_min <= start <= lr_max, factor > 1 and precision > 1")
    result = Bracket(None, None)

    def check(lr: float) -> bool:
        stable = probe(lr)
        result.probes.append((lr, stable))
        if stable:
            result.largest_stable = max(lr, result.largest_stable or lr)
        else:
            result.smallest_unstable = min(lr, result.smallest_unstable or lr)
        return stable

    lr = start
    if check(lr):
        while result.smallest_unstable is None and lr < lr_max:
            lr = min(lr * factor, lr_max)
            check(lr)
    else:
        while result.largest_stable is None and lr > lr_min:
            lr = max(lr / factor, lr_min)
            check(lr)
    while result.ratio is not None and result.ratio > precision * (1 + 1e-9):  # float slack
        check(math.sqrt(result.largest_stable * result.smallest_unstable))
    return result
