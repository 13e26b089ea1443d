"""Lightning callbacks that record a run and may end it early: metrics, memory, divergence, pruning.

:class:`MetricsRecorder` keeps one row per optimizer step (step, tokens, train loss, lr, grad
norm, step time, elapsed time) and one per evaluation (val loss) in memory; the run writes them
once at the end, so recording costs a few float conversions per step. :class:`PeakMemory`
records the peak memory of the training loop (:mod:`ablate.training.memory`).

:class:`Checkpointer` saves the run's resumable state every ``runtime.checkpoint_minutes`` (or
``checkpoint_steps``), and the recording callbacks are :class:`Resumable`: the checkpoint holds
what they recorded, so a cut run resumed from it stores the same rows as an uninterrupted one.

An :class:`EarlyStop` ends a run before its budget with a :class:`~ablate.core.stability.Stop`
(step and reason) and names the run's status: :class:`DivergenceMonitor` applies the stability
criterion's divergence rule (``diverged``: a result, not a crash); an
:class:`EvalStop` asks a watcher after every evaluation, and stops a trial the search's pruner
prunes (``pruned``).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import lightning as L
import torch

from ablate.core.config import StabilityConfig
from ablate.core.stability import DivergenceRule, Stop, StopKind
from ablate.training.loggers import log_metrics
from ablate.training.memory import read_peak_memory, reset_peak_memory
from ablate.training.task import LanguageModelTask

ProgressFn = Callable[[int, float], None]


class Resumable(L.Callback):
    """A callback whose attributes named in ``resumed`` a checkpoint holds: Lightning saves
    :meth:`state_dict` under the callback's class name and hands it to :meth:`load_state_dict`
    when a run resumes from the checkpoint."""

    resumed: ClassVar[tuple[str, ...]] = ()

    def state_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.resumed}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        for name in self.resumed:
            setattr(self, name, state_dict[name])


class Checkpointer(Resumable):
    """Saves the run's resumable state to ``path`` before an optimizer step (after the last
    step's evaluation), every ``every_steps`` steps, or else every ``every_s`` seconds (0:
    never): weights, optimizer, schedule, step, loss scaler, RNG
    (:class:`ablate.training.task.LanguageModelTask`) and the :class:`Resumable` callbacks'
    records. Written to a temporary name and renamed: a cut during a save leaves the previous
    checkpoint. ``wall_s`` is the run's wall time before this process (restored on resume);
    ``resumed_from`` the step it resumed at (None: it started at step 0). At ``pause_step``
    it saves (unless the run resumed there) and raises :class:`RunPaused`."""

    resumed = ("wall_s",)

    def __init__(
        self,
        path: Path,
        every_steps: int,
        every_s: float,
        started: float,
        pause_step: int | None = None,
    ) -> None:
        self.path = path
        self.pause_step = pause_step
        self.every_steps = every_steps
        self.every_s = every_s
        self.started = started  # time.perf_counter() when this process began the run
        self.wall_s = 0.0
        self.resumed_from: int | None = None
        self._last = time.monotonic()

    def state_dict(self) -> dict[str, Any]:
        return {"wall_s": self.wall_s + time.perf_counter() - self.started}

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._last = time.monotonic()
        if trainer.global_step > 0:
            self.resumed_from = trainer.global_step

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int
    ) -> None:
        step = trainer.global_step
        pause = step == self.pause_step
        if step not in (0, self.resumed_from) and (pause or self._due(trainer, step)):
            self._save(trainer)
        if pause:
            raise RunPaused(step)

    def _save(self, trainer: L.Trainer) -> None:
        partial = self.path.with_name(f".{self.path.name}.partial")
        trainer.save_checkpoint(partial)
        if trainer.is_global_zero:
            os.replace(partial, self.path)
        trainer.strategy.barrier()
        self._last = time.monotonic()

    def _due(self, trainer: L.Trainer, step: int) -> bool:
        """Whether to save before ``step + 1``; under DDP rank 0's clock decides for all."""
        if self.every_steps:
            return step % self.every_steps == 0
        due = bool(self.every_s) and time.monotonic() - self._last >= self.every_s
        return trainer.strategy.broadcast(due, src=0) if trainer.world_size > 1 else due


class RunPaused(Exception):
    """Raised by the :class:`Checkpointer` at its pause step, the checkpoint saved: the run is
    stored as paused (:func:`ablate.training.trainer.fit`)."""

    def __init__(self, step: int) -> None:
        super().__init__(f"paused at step {step}")
        self.step = step


class EarlyStop(Resumable):
    """A callback that may end training early; ``status`` names the run's outcome if it does."""

    status = "stopped"
    resumed: ClassVar[tuple[str, ...]] = ("stop",)

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
            self.request_stop(trainer, Stop(step, StopKind.PRUNED))


class MetricsRecorder(Resumable):
    """Collects per-step and per-evaluation metrics; reports progress every ``every_s`` seconds.
    A resumed run's elapsed times go on from the checkpoint's last step."""

    resumed = ("steps", "evals")

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
        self._start = time.perf_counter() - (self.steps[-1]["elapsed_s"] if self.steps else 0.0)

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


class PeakMemory(Resumable):
    """Peak memory of the training loop in MiB, and what was measured (``kind``); a resumed
    run's is the larger of its checkpoint's and its own."""

    resumed = ("peak_mb", "kind")

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
            before = self.peak_mb
            self.peak_mb, self.kind = read_peak_memory(self._device)
            if before is not None and self.peak_mb is not None:
                self.peak_mb = max(before, self.peak_mb)


class DivergenceMonitor(EarlyStop):
    """Applies :class:`ablate.core.stability.DivergenceRule` after every training step and stops
    a run that diverged."""

    status = "diverged"
    resumed = ("stop", "rule")

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
