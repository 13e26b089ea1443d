"""The Lightning side of one run: a quiet Trainer, fitting it, and how training ended.

:func:`fit` trains, always evaluates the last step, and turns every ending into an
:class:`Outcome` (finished, an early stop's status, paused, interrupted, failed). Under
``ddp_spawn`` the observing callbacks live in the spawned processes; :class:`RankZeroHandBack`
brings rank 0's state back to the process that built them.
"""

from __future__ import annotations

import logging
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import pandas as pd
import torch
from lightning.pytorch.plugins.precision import MixedPrecision
from torch import nn

from ablate.core import folders
from ablate.core.folders import RunFolder
from ablate.core.plan import RunSpec
from ablate.core.stability import Stop, StopKind
from ablate.core.store import store_fault_cause
from ablate.nn.model import next_token_loss
from ablate.training.callbacks import (
    EarlyStop,
    MetricsRecorder,
    RunPaused,
)
from ablate.training.data import gather_windows
from ablate.training.loggers import build_loggers, flatten
from ablate.training.task import LanguageModelTask, RunData
from ablate.training.tokens import MappedIds

Ids = torch.Tensor | MappedIds  # a split's token ids, in memory or mapped from a token file


def quiet_lightning() -> None:
    """Silence Lightning's start-up banners and tips; ablate prints its own progress."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    # a non-finite loss skips its update on purpose; the divergence monitor stops and says so
    warnings.filterwarnings("ignore", message=".*`training_step` returned `None`.*")
    if "SLURM_JOB_ID" not in os.environ:  # Lightning's srun hint is for runs inside a Slurm job
        warnings.filterwarnings("ignore", message="The `srun` command is available")


def precision_arguments(precision: str, accelerator: str) -> dict[str, Any]:
    """The Trainer's precision, as asked. Lightning turns ``16-mixed`` on a CPU into
    ``bf16-mixed`` (with a warning): there ablate passes fp16 autocast with loss scaling as a
    plugin itself, so a run labelled fp16 trains in fp16."""
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available())
    if precision == "16-mixed" and on_cpu:
        scaler = torch.amp.GradScaler("cpu")
        return {"plugins": [MixedPrecision("16-mixed", "cpu", scaler)]}
    return {"precision": precision}


def build_trainer(
    spec: RunSpec, steps: int, callbacks: list[L.Callback], run: RunFolder
) -> L.Trainer:
    """A quiet Trainer: no progress bar, summary or Lightning checkpoints (ablate records itself
    and saves its own resumable checkpoint: :class:`ablate.training.callbacks.Checkpointer`).

    The loggers (CSV and those named in ``runtime.loggers``) get the run's configuration now and
    its metrics from the callbacks (:mod:`ablate.training.loggers`).
    """
    cfg = spec.config
    quiet_lightning()
    loggers = build_loggers(spec, run)
    for logger in loggers:
        logger.log_hyperparams(flatten(spec.to_json()))
    runtime = cfg.runtime
    several = runtime.processes() > 1
    return L.Trainer(
        accelerator=runtime.accelerator,
        devices=runtime.devices,
        num_nodes=runtime.num_nodes,
        strategy="ddp_spawn" if several and runtime.strategy == "auto" else runtime.strategy,
        use_distributed_sampler=False,  # RunData gives each process its share of every batch
        **precision_arguments(cfg.train.precision, runtime.accelerator),
        max_steps=steps,
        max_epochs=1,
        val_check_interval=min(cfg.train.eval_interval, steps),
        num_sanity_val_steps=0,
        logger=loggers,
        log_every_n_steps=cfg.runtime.log_every_n_steps,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        callbacks=callbacks,
    )


def has_test_loss(recorder: MetricsRecorder) -> bool:
    """Whether the run's evaluations scored a test split (``data.test_fraction``)."""
    return any("test_loss" in row for row in recorder.evals)


def metrics_frame(recorder: MetricsRecorder) -> pd.DataFrame:
    """Per-step rows with ``val_loss`` filled at the steps where an evaluation ran."""
    steps = pd.DataFrame(
        recorder.steps,
        columns=folders.METRIC_COLUMNS,
    )
    columns = ["step", "val_loss"] + (["test_loss"] if has_test_loss(recorder) else [])
    evals = pd.DataFrame(recorder.evals, columns=columns)
    evals = evals.drop_duplicates("step", keep="last")
    return steps.merge(evals, on="step", how="left")


@dataclass
class Outcome:
    """How training ended: status, the early stop that ended it (if any), the error (if any)."""

    status: str
    stop: Stop | None = None
    error: str | None = None


@torch.no_grad()
def evaluate(model: nn.Module, ids: Ids, offsets: torch.Tensor, seq_len: int) -> float:
    """Mean loss over the windows of ``ids`` (a split) at ``offsets`` (as the trainer's
    evaluation), in fp32."""
    model.eval()
    losses = [
        float(next_token_loss(model, gather_windows(ids, batch, seq_len))) for batch in offsets
    ]
    model.train()
    return sum(losses) / len(losses)


def evaluate_final(
    trainer: L.Trainer, model: nn.Module, ids: Ids, offsets: torch.Tensor, seq_len: int
) -> float:
    """The trained model's mean loss on a split over ``offsets`` (``train.final_eval:
    split``: the whole split), here, in the precision plugin's forward context."""
    with torch.no_grad(), trainer.precision_plugin.forward_context():
        return evaluate(model, ids, offsets, seq_len)


def evaluate_last_step(
    trainer: L.Trainer,
    task: LanguageModelTask,
    data: RunData,
    recorder: MetricsRecorder,
    spawned: bool,
) -> None:
    """Evaluate the last step when the evaluation cadence did not.

    In-process training: ``trainer.validate``. After ``ddp_spawn`` the model here holds rank
    0's final weights, and a second spawn would restart the loggers' files, so the evaluation
    runs in this process (in the precision plugin's forward context) and is recorded in
    ``metrics.csv`` only, not in the Lightning loggers.
    """
    if not spawned:
        trainer.validate(task, datamodule=data, verbose=False)
        return
    corpus, seq_len = data.corpus, data.seq_len
    with torch.no_grad(), trainer.precision_plugin.forward_context():
        row = {"val_loss": evaluate(task.model, corpus.val, data.val_offsets, seq_len)}
        if corpus.test is not None and data.test_offsets is not None:
            row["test_loss"] = evaluate(task.model, corpus.test, data.test_offsets, seq_len)
    recorder.evals.append({"step": recorder.steps[-1]["step"], **row})


class RankZeroHandBack(L.Callback):
    """Brings the observers' state back from spawned DDP processes.

    Under ``ddp_spawn`` the callbacks that record a run live in the spawned processes; at the
    end of fit or validate rank 0 writes their state (their pickled ``__dict__``) to ``path``,
    and :meth:`restore`, in the process that built them, loads it into the originals.
    """

    def __init__(self, observers: list[L.Callback], path: Path) -> None:
        self.observers = observers
        self.path = path
        self.owner = os.getpid()

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if os.getpid() != self.owner:
            quiet_lightning()  # a spawned process starts with Lightning's default logging

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if os.getpid() != self.owner and trainer.is_global_zero:
            state = [cb.__getstate__() for cb in self.observers]
            folders.write_atomic(self.path, lambda tmp: torch.save(state, tmp))

    def restore(self) -> bool:
        """Load rank 0's state into the observers; whether spawned processes left one."""
        if not self.path.exists():
            return False
        for observer, state in zip(
            self.observers, torch.load(self.path, weights_only=False), strict=True
        ):
            observer.__dict__.update(state)
        self.path.unlink()
        return True


def fit(
    trainer: L.Trainer,
    task: LanguageModelTask,
    data: RunData,
    recorder: MetricsRecorder,
    stoppers: list[EarlyStop],
    handback: RankZeroHandBack,
    resume: Path | None = None,
) -> Outcome:
    """Train (from the checkpoint ``resume``, where a cut run left one), evaluate the last step,
    and say how it ended; exceptions become outcomes."""
    try:
        trainer.fit(task, datamodule=data, ckpt_path=resume, weights_only=False)
        spawned = handback.restore()
        if not recorder.evals or recorder.evals[-1]["step"] != recorder.steps[-1]["step"]:
            evaluate_last_step(trainer, task, data, recorder, spawned)  # always the last step
    except (KeyboardInterrupt, SystemExit):
        return Outcome("interrupted")
    except RunPaused as paused:  # held at runtime.pause_step, its checkpoint saved
        return Outcome("paused", Stop(paused.step, StopKind.PAUSED))
    except Exception as exc:  # a crash inside training is stored as a failed run
        if store_fault_cause(exc) is not None:
            raise  # a full or read-only store is no outcome of the run: the command stops
        return Outcome("failed", error=f"{type(exc).__name__}: {exc}")
    for stopper in stoppers:
        if stopper.stop is not None:
            return Outcome(stopper.status, stopper.stop)
    return Outcome("finished")
