"""Lightning callbacks that record a run and may end it early: metrics, memory, divergence, pruning.

:class:`MetricsRecorder` keeps one row per optimizer step (step, tokens, train loss, lr, grad
norm, step time, elapsed time) and one per evaluation (val loss) in memory; the run writes them
once at the end, so recording costs a few float conversions per step. :class:`PeakMemory`
records the peak memory of the training loop (:mod:`ablate.training.memory`).

An :class:`EarlyStop` ends a run before its budget with a :class:`~ablate.core.stability.Stop`
(step and reason) and names the run's status: :class:`DivergenceMonitor` applies the stability
criterion's divergence rule (``diverged``: a result, not a crash); an
:class:`EvalStop` asks a watcher after every evaluation, and stops a trial the search's pruner
prunes (``pruned``).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import lightning as L
import torch

from ablate.core.config import StabilityConfig
from ablate.core.stability import DivergenceRule, Stop
from ablate.training.loggers import log_metrics
from ablate.training.memory import read_peak_memory, reset_peak_memory
from ablate.training.task import LanguageModelTask

ProgressFn = Callable[[int, float], None]


class EarlyStop(L.Callback):
    """A callback that may end training early; ``status`` names the run's outcome if it does."""

    status = "stopped"

    def __init__(self) -> None:
        self.stop: Stop | None = None

    def request_stop(self, trainer: L.Trainer, stop: Stop) -> None:
        """Record why, and ask the Trainer to stop after this batch."""
        self.stop = stop
        trainer.should_stop = True


class EvalStop(EarlyStop):
    """Hands each evaluation's (step, val loss) to ``watch``; stops the run when it answers True
    (the search's Optuna pruner, :func:`ablate.launch.search.pruning_watch`)."""

    status = "pruned"

    def __init__(self, watch: Callable[[int, float], bool]) -> None:
        super().__init__()
        self.watch = watch

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        assert isinstance(pl_module, LanguageModelTask)
        if pl_module.last_val_loss is None or trainer.sanity_checking or self.stop is not None:
            return
        step = trainer.global_step
        prune = False
        if trainer.is_global_zero:  # under DDP one process talks to Optuna and tells the rest
            prune = self.watch(step, pl_module.last_val_loss)
        if trainer.strategy.broadcast(prune, src=0):
            self.request_stop(trainer, Stop(step, f"pruned by Optuna at step {step}"))


class MetricsRecorder(L.Callback):
    """Collects per-step and per-evaluation metrics; reports progress every ``every_s`` seconds."""

    def __init__(
        self,
        tokens_per_step: int,
        progress: ProgressFn | None = None,
        every_s: float = 0.5,
        log_every: int = 10,
    ) -> None:
        self.tokens_per_step = tokens_per_step
        self.progress = progress
        self.every_s = every_s
        self.log_every = log_every
        self.steps: list[dict[str, float]] = []
        self.evals: list[dict[str, float]] = []
        self._start = 0.0
        self._t0 = 0.0
        self._lr = math.nan
        self._last_report = 0.0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("progress")  # a function of the parent process (a queue, a console)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, progress=None)

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start = time.perf_counter()

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int
    ) -> None:
        self._lr = trainer.optimizers[0].param_groups[0]["lr"]
        self._t0 = time.perf_counter()

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        now_s = time.perf_counter()
        assert isinstance(pl_module, LanguageModelTask)
        step = batch_idx + 1
        loss = float(pl_module.last_loss) if pl_module.last_loss is not None else math.nan
        grad = pl_module.last_grad_norm
        row = {
            "step": step,
            "tokens": step * self.tokens_per_step,
            "train_loss": loss,
            "lr": self._lr,
            "grad_norm": float(grad) if grad is not None else math.nan,
            "step_time_s": now_s - self._t0,
            "elapsed_s": now_s - self._start,
        }
        self.steps.append(row)
        if trainer.loggers and step % self.log_every == 0:
            log_metrics(
                trainer,
                {"train/loss": loss, "train/lr": self._lr, "train/grad_norm": row["grad_norm"]},
                step,
            )
        now = time.monotonic()
        if self.progress is not None and now - self._last_report >= self.every_s:
            self._last_report = now
            self.progress(step, loss)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        assert isinstance(pl_module, LanguageModelTask)
        if pl_module.last_val_loss is not None:
            step = self.steps[-1]["step"] if self.steps else 0
            losses = {"val_loss": pl_module.last_val_loss}
            if pl_module.last_test_loss is not None:
                losses["test_loss"] = pl_module.last_test_loss
            self.evals.append({"step": step, **losses})
            if trainer.loggers:
                log_metrics(trainer, {k.replace("_", "/"): v for k, v in losses.items()}, step)


class PeakMemory(L.Callback):
    """Peak memory of the training loop in MiB, and what was measured (``kind``)."""

    def __init__(self) -> None:
        self.peak_mb: float | None = None
        self.kind = "unavailable"
        self._device = torch.device("cpu")
        self._started = False

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._device = pl_module.device
        self._started = reset_peak_memory(self._device)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._started:
            self.peak_mb, self.kind = read_peak_memory(self._device)


class DivergenceMonitor(EarlyStop):
    """Applies :class:`ablate.core.stability.DivergenceRule` after every training step and stops
    a run that diverged."""

    status = "diverged"

    def __init__(self, criterion: StabilityConfig, initial_loss: float, warmup_steps: int) -> None:
        super().__init__()
        self.rule = DivergenceRule(criterion, initial_loss, warmup_steps)

    @property
    def threshold(self) -> float | None:
        """The train loss above which the run diverges (set at its first step)."""
        return self.rule.threshold

    def check(self, step: int, loss: float) -> Stop | None:
        """Record the training loss of ``step``; the divergence it shows, if any."""
        return self.rule.check(step, loss)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        assert isinstance(pl_module, LanguageModelTask)
        if self.stop is not None or pl_module.last_loss is None:
            return
        stop = self.check(batch_idx + 1, float(pl_module.last_loss))
        if stop is not None:
            self.request_stop(trainer, stop)
