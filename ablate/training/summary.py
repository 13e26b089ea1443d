"""What a run stores about itself: its summary (the :data:`ablate.core.store.SUMMARY_KEYS`
contract, with the stability verdict of :func:`ablate.core.stability.run_verdict`) and the
environment it ran in.
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import pandas as pd
import torch

from ablate.core.numerics import pinned_settings
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.core.stability import run_verdict
from ablate.core.store import FINAL_TRAIN_WINDOW
from ablate.nn.fast_norms import build_target
from ablate.nn.model import (
    count_parameters,
)
from ablate.nn.norms import used_impls
from ablate.training.callbacks import (
    DivergenceMonitor,
    PeakMemory,
)
from ablate.training.prepare import Prepared
from ablate.training.probes import ModelProbe
from ablate.training.trainer import Outcome


def environment(spec: RunSpec) -> dict[str, Any]:
    """Everything that could differ between two machines running the same spec."""
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "platform": platform.platform(),
        "processor": platform.machine(),
        "accelerator": spec.config.runtime.accelerator,
        "cuda_device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "precision": spec.config.train.precision,
        "default_dtype": str(torch.get_default_dtype()),
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        **pinned_settings(),
        "processes": spec.config.runtime.processes(),
        "strategy": spec.config.runtime.strategy,
        "git_commit": git_commit(),
        "hostname": platform.node(),
        "pid": os.getpid(),
    }


def what_decides_the_bits(model: torch.nn.Module) -> dict[str, Any]:
    """The summary's record of what fixes a run's arithmetic besides its spec: the torch
    version, its thread count, the CPU capability ATen dispatched to (env.json has the MKL and
    oneDNN pins too, :mod:`ablate.core.numerics`), and the C++ norm kernels' build target
    when a norm ran it."""
    return {
        "kernel_target": build_target() if "cpp" in used_impls(model) else None,
        "torch_version": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
    }


def git_commit() -> str | None:
    """The commit of the ablate checkout in use, when it is a git checkout."""
    here = Path(__file__).resolve().parent
    try:
        out = subprocess.run(
            ["git", "-C", str(here), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None


@dataclass
class Observed:
    """What the observing callbacks measured besides the per-step metrics."""

    probe: ModelProbe
    memory: PeakMemory
    divergence: DivergenceMonitor


def final_loss(evaluated: pd.Series, whole_split: float | None) -> float | None:
    """A split's final loss: the whole split's where it was scored, else the last evaluation's."""
    if whole_split is not None:
        return whole_split
    return float(evaluated.iloc[-1]) if len(evaluated) else None


def summarize(
    spec: RunSpec,
    prepared: Prepared,
    frame: pd.DataFrame,
    outcome: Outcome,
    observed: Observed,
    wall_time_s: float,
    digests: tuple[str, str],
    final_split: dict[str, float] | None = None,
) -> RunRecord:
    """The run's record: the keys of :data:`ablate.core.store.SUMMARY_KEYS` (docs/results.md).
    Its final val (test) loss is ``final_split["val"]`` (``["test"]``) where the run was
    evaluated on the whole split at the end (``train.final_eval: split``), else the last
    evaluation's (metrics.csv's last); the test losses are None without a test split."""
    tokens_per_step = spec.config.tokens_per_step()
    steps_done = int(frame["step"].max()) if len(frame) else 0
    val = frame["val_loss"].dropna()
    final_val = final_loss(val, (final_split or {}).get("val"))
    test = frame["test_loss"].dropna() if "test_loss" in frame else pd.Series(dtype=float)
    train_time = float(frame["step_time_s"].sum())
    initial_loss = math.log(prepared.corpus.vocab_size)
    diverged = outcome.stop if outcome.status == "diverged" else None
    losses = (initial_loss, prepared.corpus.unigram_loss)
    verdict = run_verdict(
        outcome.status, outcome.stop, list(val), spec.config.train.stability, losses, steps_done
    )
    return RunRecord(
        **spec.summary_keys(),
        status=outcome.status,
        stable=verdict.stable if verdict else None,
        unstable_reason=verdict.reason if verdict else None,
        unstable_step=verdict.step if verdict else None,
        final_val_loss=final_val,
        best_val_loss=float(val.min()) if len(val) else None,
        final_test_loss=final_loss(test, (final_split or {}).get("test")),
        best_test_loss=float(test.min()) if len(test) else None,
        final_train_loss=(
            float(frame["train_loss"].tail(FINAL_TRAIN_WINDOW).mean()) if len(frame) else None
        ),
        diverged_step=diverged.step if diverged else None,
        diverged_reason=diverged.reason if diverged else None,
        stopped_reason=outcome.stop.reason if outcome.stop else None,
        steps=steps_done,
        planned_steps=prepared.steps,
        tokens=steps_done * tokens_per_step,
        planned_tokens=prepared.steps * tokens_per_step,
        n_params=count_parameters(prepared.model),
        vocab_size=prepared.corpus.vocab_size,
        initial_loss=initial_loss,
        unigram_loss=prepared.corpus.unigram_loss,
        entropy_floor=prepared.corpus.entropy_floor,
        tokens_per_byte=prepared.corpus.tokens_per_byte,
        divergence_threshold=observed.divergence.threshold,
        norm_kind=spec.config.model.norm_kind(),
        norm_placement=spec.config.model.norm_placement(),
        norm_impl=",".join(used_impls(prepared.model)) or None,
        **what_decides_the_bits(prepared.model),
        wall_time_s=wall_time_s,
        train_time_s=train_time,
        tokens_per_s=steps_done * tokens_per_step / train_time if train_time > 0 else None,
        step_time_median_s=float(frame["step_time_s"].median()) if len(frame) else None,
        peak_memory_mb=observed.memory.peak_mb,
        memory_kind=observed.memory.kind,
        probe_steps=observed.probe.probe_steps,
        nonfinite_activations=observed.probe.nonfinite["activations"],
        nonfinite_grads=observed.probe.nonfinite["grads"],
        init_digest=digests[0],
        data_digest=digests[1],
        error=outcome.error,
        extra=prepared.start.as_extra() if prepared.start else {},
    )
