"""Lightning callbacks that observe a run: metrics, probes, memory, progress and divergence.

:class:`MetricsRecorder` keeps one row per optimizer step (step, tokens, train loss, lr, grad
norm, step time, elapsed time) and one per evaluation (val loss) in memory; the run writes them
once at the end, so recording costs a few float conversions per step. :class:`ModelProbe`
looks inside the model every ``train.probes.interval`` steps (and at the first and last step):
per-layer RMS of the residual stream and of every norm's output, per-layer gradient norm before
clipping, each layer's largest attention logit, output-logit statistics and non-finite counts,
as long rows (step, quantity, site, layer, value). Forward hooks exist only during a probe
step, so the other steps run the bare model. :class:`PeakMemory` records the peak memory of the
training loop (CUDA: the allocator's peak; CPU: the process's peak resident set, reset at the
start of each run through ``/proc/self/clear_refs``).

An :class:`EarlyStop` ends a run before its budget with a :class:`Stop` (step and reason) and
names the run's status: :class:`DivergenceMonitor` turns a non-finite loss, or a loss above the
threshold after warmup, into ``diverged`` (a result, not a crash); the search adds a pruner
whose status is ``pruned``.
"""

from __future__ import annotations

import math
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import lightning as L
import torch
from torch import nn
from torch.utils.hooks import RemovableHandle

from ablate.core.config import StabilityConfig
from ablate.core.stability import clipped_loss, divergence_threshold
from ablate.nn.model import GPT, CausalSelfAttention
from ablate.nn.norms import is_norm
from ablate.training.loggers import log_metrics
from ablate.training.task import LanguageModelTask

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


class TrialPruner(EarlyStop):
    """Reports each evaluation's val loss to an Optuna trial; stops the run if it should prune."""

    status = "pruned"

    def __init__(self, trial: Any) -> None:
        super().__init__()
        self.trial = trial

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        assert isinstance(pl_module, LanguageModelTask)
        if pl_module.last_val_loss is None or trainer.sanity_checking or self.stop is not None:
            return
        step = trainer.global_step
        prune = False
        if trainer.is_global_zero:  # under DDP one process talks to Optuna and tells the rest
            self.trial.report(clipped_loss(pl_module.last_val_loss, math.inf), step)
            prune = step < pl_module.total_steps and self.trial.should_prune()
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
            self.evals.append({"step": step, "val_loss": pl_module.last_val_loss})
            if trainer.loggers:
                log_metrics(trainer, {"val/loss": pl_module.last_val_loss}, step)


ProbeRow = tuple[int, str, str, int, float]  # step, quantity, site, layer, value
PROBE_COLUMNS = ["step", "quantity", "site", "layer", "value"]
MODEL_LAYER = -1  # the layer of model-wide quantities (embedding, counts)


def layer_of(site: str, n_layers: int) -> int:
    """Block index of a module name (``blocks.2.norm_mlp`` -> 2); ``n_layers`` for the rest."""
    found = re.match(r"blocks\.(\d+)\b", site)
    return int(found.group(1)) if found else n_layers


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x.detach().float().pow(2).mean().sqrt()


def _nonfinite(x: torch.Tensor) -> torch.Tensor:
    return (~torch.isfinite(x.detach())).sum()


def max_causal_logit(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Largest pre-softmax attention logit q.k/sqrt(d_head) over allowed (causal) pairs.

    ``q`` and ``k`` are (B, H, T, d_head), as the attention uses them (after any QK-norm).
    Computed in fp32 one sequence at a time, so the (H, T, T) score matrix of a single sequence
    is the peak memory.
    """
    t, head = q.shape[2], q.shape[3]
    allowed = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    best = torch.full((), -math.inf, device=q.device)
    with torch.autocast(q.device.type, enabled=False):
        for q_row, k_row in zip(q.detach().float(), k.detach().float(), strict=True):
            scores = q_row @ k_row.transpose(1, 2) / math.sqrt(head)  # (H, T, T)
            best = torch.maximum(best, scores.masked_fill(~allowed, -math.inf).max())
    return best


class ModelProbe(L.Callback):
    """Looks inside the model at the first step, every ``interval`` steps and the last step.

    Quantities: ``resid_rms`` (block output), ``norm_rms`` (each norm's output), ``grad_norm``
    (each block's and the embeddings' gradient before clipping), ``attn_logit_max`` (each
    block), ``logit_max_abs``, ``logit_std`` and ``logsumexp_mean`` (the LM head's output),
    ``nonfinite_activations`` and ``nonfinite_grads`` (counts at the probe step).
    """

    def __init__(self, interval: int, attention: bool = True) -> None:
        self.interval = interval
        self.attention = attention
        self.rows: list[ProbeRow] = []
        self.probe_steps = 0
        self.nonfinite = {"activations": 0, "grads": 0}
        self._pending: list[tuple[str, str, int, torch.Tensor]] = []
        self._handles: list[RemovableHandle] = []
        self._step = 0

    def due(self, step: int, last_step: int) -> bool:
        """Whether ``step`` (1-based) is a probe step."""
        if self.interval <= 0:
            return False
        return step == 1 or step % self.interval == 0 or step == last_step

    def _add(self, quantity: str, site: str, layer: int, value: torch.Tensor) -> None:
        self._pending.append((quantity, site, layer, value))

    def _hook(self, module: nn.Module, record: Callable[[torch.Tensor], None]) -> None:
        self._handles.append(module.register_forward_hook(lambda _m, _i, out: record(out)))

    def start(self, model: GPT, step: int) -> None:
        """Hook the model for one probe step (its forward pass records the activations)."""
        self._step = step
        n_layers = len(model.blocks)
        for i, block in enumerate(model.blocks):
            self._hook(block, partial(self._activation, "resid_rms", f"blocks.{i}", i))
            if self.attention:
                self._handles.append(block.attn.register_forward_hook(partial(self._attention, i)))
        for name, module in model.named_modules():
            if is_norm(module):
                layer = layer_of(name, n_layers)
                self._hook(module, partial(self._activation, "norm_rms", name, layer))
        self._hook(model.head, self._logits)

    def _activation(self, quantity: str, site: str, layer: int, out: torch.Tensor) -> None:
        self._add(quantity, site, layer, _rms(out))
        self._add("nonfinite_activations", site, layer, _nonfinite(out))

    def _attention(
        self, layer: int, attn: CausalSelfAttention, inputs: tuple[torch.Tensor], _out: object
    ) -> None:
        with torch.no_grad():  # the queries and keys again, from the attention's own input
            q, k, _ = attn.heads(inputs[0])
        self._add("attn_logit_max", f"blocks.{layer}.attn", layer, max_causal_logit(q, k))

    def _logits(self, logits: torch.Tensor) -> None:
        z = logits.detach().float()
        with torch.autocast(z.device.type, enabled=False):
            self._add("logit_max_abs", "head", MODEL_LAYER, z.abs().max())
            self._add("logit_std", "head", MODEL_LAYER, z.std())
            self._add("logsumexp_mean", "head", MODEL_LAYER, torch.logsumexp(z, -1).mean())
        self._add("nonfinite_activations", "head", MODEL_LAYER, _nonfinite(z))

    def gradients(self, model: GPT) -> None:
        """Record the gradient norms and non-finite gradients (call after backward)."""
        groups = {f"blocks.{i}": (i, list(b.parameters())) for i, b in enumerate(model.blocks)}
        groups["embedding"] = (MODEL_LAYER, [model.tok_emb.weight, model.pos_emb.weight])
        for site, (layer, params) in groups.items():
            grads = [p.grad.detach().float() for p in params if p.grad is not None]
            if not grads:
                continue
            norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
            self._add("grad_norm", site, layer, torch.linalg.vector_norm(norms))
            count = torch.stack([_nonfinite(g) for g in grads]).sum()
            self._add("nonfinite_grads", site, layer, count)

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int
    ) -> None:
        step = batch_idx + 1
        if self.due(step, trainer.max_steps):
            assert isinstance(pl_module, LanguageModelTask)
            self.start(pl_module.model, step)

    def on_before_optimizer_step(
        self, trainer: L.Trainer, pl_module: L.LightningModule, optimizer: torch.optim.Optimizer
    ) -> None:
        if self._handles:
            assert isinstance(pl_module, LanguageModelTask)
            self.gradients(pl_module.model)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        if not self._handles:
            return
        rows = self.finish()
        if trainer.loggers and rows:
            log_metrics(trainer, {f"probe/{q}/{s}": v for _, q, s, _, v in rows}, self._step)

    def finish(self) -> list[ProbeRow]:
        """Unhook the model and turn the step's tensors into rows (one device sync)."""
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if not self._pending:
            return []
        values = torch.stack([v.float() for *_, v in self._pending]).tolist()
        rows = [
            (self._step, quantity, site, layer, value)
            for (quantity, site, layer, _), value in zip(self._pending, values, strict=True)
        ]
        self._pending.clear()
        self.probe_steps += 1
        for _, quantity, _, _, value in rows:
            if quantity.startswith("nonfinite_"):
                self.nonfinite[quantity.removeprefix("nonfinite_")] += int(value)
        self.rows.extend(rows)
        return rows


def read_peak_rss_mb() -> float | None:
    """The process's peak resident set since start or the last reset, in MiB (Linux only)."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else None


def reset_peak_rss() -> bool:
    """Reset the peak resident set to the current one; False where /proc does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: reset the peak RSS (VmHWM)
    except OSError:
        return False
    return True


def reset_peak_memory(device: torch.device) -> bool:
    """Start a peak-memory measurement on ``device``; False where none is possible."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    return reset_peak_rss()


def read_peak_memory(device: torch.device) -> tuple[float | None, str]:
    """(peak MiB since :func:`reset_peak_memory`, what was measured)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    peak = read_peak_rss_mb()
    return peak, "process_peak_rss" if peak is not None else "unavailable"


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
    """Stops training on a non-finite loss, or when the mean train loss of the last ``window``
    steps is above the threshold after warmup (``window`` 1: any single step).

    The threshold is fixed at the first step (:func:`ablate.core.stability.divergence_threshold`):
    the criterion's ``threshold`` if set, else the run's start loss max(ℓ0, loss of step 1) +
    ``divergence_margin``, so the untrained model's own loss is never a divergence.
    """

    status = "diverged"

    def __init__(self, criterion: StabilityConfig, initial_loss: float, warmup_steps: int) -> None:
        super().__init__()
        self.criterion = criterion
        self.initial_loss = initial_loss
        self.threshold: float | None = None
        self.warmup_steps = warmup_steps if criterion.after_warmup else 0
        self.recent: deque[float] = deque(maxlen=criterion.window)

    def check(self, step: int, loss: float) -> Stop | None:
        """Record the training loss of ``step``; the divergence it shows, if any."""
        if self.threshold is None:
            self.threshold = divergence_threshold(self.criterion, self.initial_loss, loss)
        if not math.isfinite(loss):
            return Stop(step, f"non-finite loss ({loss})")
        self.recent.append(loss)
        mean = sum(self.recent) / len(self.recent)
        if step > self.warmup_steps and mean > self.threshold:
            what = "loss" if self.recent.maxlen == 1 else f"mean loss of {len(self.recent)} steps"
            after = " after warmup" if self.warmup_steps else ""
            return Stop(step, f"{what} {mean:.4g} > threshold {self.threshold:.4g}{after}")
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
