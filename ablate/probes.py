"""Lightning callbacks that observe a run: per-step metrics, evaluations, progress and divergence.

:class:`MetricsRecorder` keeps one row per optimizer step (step, tokens, train loss, lr, grad
norm, step time) and one per evaluation (val loss) in memory; the run writes them once at the
end, so recording costs a few float conversions per step. An :class:`EarlyStop` ends a run
before its budget with a :class:`Stop` (step and reason) and names the run's status:
:class:`DivergenceMonitor` turns a non-finite loss, or a loss above the threshold after warmup,
into ``diverged`` (a result, not a crash); the search adds a pruner whose status is ``pruned``.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import lightning as L

from ablate.train import LanguageModelTask

ProgressFn = Callable[[int, float], None]


@dataclass
class Stop:
    """Where and why a run stopped early."""

    step: int
    reason: str


class EarlyStop(L.Callback):
    """A callback that may end training early; ``status`` names the run's outcome if it does."""

    status = "stopped"

    def __init__(self) -> None:
        self.stop: Stop | None = None

    def request_stop(self, trainer: L.Trainer, stop: Stop) -> None:
        """Record why, and ask the Trainer to stop after this batch."""
        self.stop = stop
        trainer.should_stop = True


class MetricsRecorder(L.Callback):
    """Collects per-step and per-evaluation metrics; reports progress every ``every_s`` seconds."""

    def __init__(
        self, tokens_per_step: int, progress: ProgressFn | None = None, every_s: float = 0.5
    ) -> None:
        self.tokens_per_step = tokens_per_step
        self.progress = progress
        self.every_s = every_s
        self.steps: list[dict[str, float]] = []
        self.evals: list[dict[str, float]] = []
        self._t0 = 0.0
        self._lr = math.nan
        self._last_report = 0.0

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int
    ) -> None:
        self._lr = trainer.optimizers[0].param_groups[0]["lr"]
        self._t0 = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        elapsed = time.perf_counter() - self._t0
        assert isinstance(pl_module, LanguageModelTask)
        step = batch_idx + 1
        loss = float(pl_module.last_loss) if pl_module.last_loss is not None else math.nan
        grad = pl_module.last_grad_norm
        self.steps.append(
            {
                "step": step,
                "tokens": step * self.tokens_per_step,
                "train_loss": loss,
                "lr": self._lr,
                "grad_norm": float(grad) if grad is not None else math.nan,
                "step_time_s": elapsed,
            }
        )
        now = time.monotonic()
        if self.progress is not None and now - self._last_report >= self.every_s:
            self._last_report = now
            self.progress(step, loss)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        assert isinstance(pl_module, LanguageModelTask)
        if pl_module.last_val_loss is not None:
            step = self.steps[-1]["step"] if self.steps else 0
            self.evals.append({"step": step, "val_loss": pl_module.last_val_loss})


class DivergenceMonitor(EarlyStop):
    """Stops training on a non-finite loss, or when the mean train loss of the last ``window``
    steps is above ``threshold`` after warmup (``window`` 1: any single step)."""

    status = "diverged"

    def __init__(
        self, threshold: float, warmup_steps: int, after_warmup: bool = True, window: int = 1
    ) -> None:
        super().__init__()
        self.threshold = threshold
        self.warmup_steps = warmup_steps if after_warmup else 0
        self.recent: deque[float] = deque(maxlen=window)

    def check(self, step: int, loss: float) -> Stop | None:
        """Record the training loss of ``step``; the divergence it shows, if any."""
        if not math.isfinite(loss):
            return Stop(step, f"non-finite loss ({loss})")
        self.recent.append(loss)
        mean = sum(self.recent) / len(self.recent)
        if step > self.warmup_steps and mean > self.threshold:
            what = "loss" if self.recent.maxlen == 1 else f"mean loss of {len(self.recent)} steps"
            return Stop(step, f"{what} {mean:.4g} > threshold {self.threshold:.4g} after warmup")
        return None

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        assert isinstance(pl_module, LanguageModelTask)
        if self.stop is not None or pl_module.last_loss is None:
            return
        stop = self.check(batch_idx + 1, float(pl_module.last_loss))
        if stop is not None:
            self.request_stop(trainer, stop)
