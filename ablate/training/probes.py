"""The model probes: a look inside the model every ``train.probes.interval`` steps.

:class:`ModelProbe` (a Lightning callback) records, at the first step, every interval and the
last step: per-layer RMS of the residual stream and its feature kurtosis (outlier features), of
every norm's input and output, per-layer gradient norm before clipping, each layer's largest
attention logit, output-logit statistics and non-finite counts, as long rows (step, quantity,
site, layer, value). Forward hooks exist only during a probe step, so the other steps run the
bare model. The sites are found the same way in a model of any source (:mod:`ablate.nn.anatomy`);
the attention logit only where the model exposes its queries and keys.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import partial

import lightning as L
import torch
from torch import nn

from ablate.nn.anatomy import Removable, blocks_of, embeddings_of, hook_attention
from ablate.nn.norms import is_norm
from ablate.training.callbacks import Resumable
from ablate.training.loggers import log_metrics
from ablate.training.task import LanguageModelTask

ProbeRow = tuple[int, str, str, int, float]  # step, quantity, site, layer, value


MODEL_LAYER = -1  # the layer of model-wide quantities (embedding, counts)


def layer_of(site: str, n_layers: int, blocks: str = "blocks") -> int:
    """Block index of a module name (``blocks.2.norm_mlp`` -> 2, with ``blocks`` the name of the
    model's block list: ``transformer.h`` in litgpt); ``n_layers`` for the rest."""
    found = re.match(rf"{re.escape(blocks)}\.(\d+)\b", site)
    return int(found.group(1)) if found else n_layers


def _rms(x: torch.Tensor) -> torch.Tensor:
    return x.detach().float().pow(2).mean().sqrt()


def feature_kurtosis(x: torch.Tensor) -> torch.Tensor:
    """Kurtosis of the features' RMS: mean(s⁴) / mean(s²)², s_j the RMS of feature j (the last
    dimension) over every other position (He et al. 2024, "Understanding and Minimising Outlier
    Features"). 1 when all features are alike; it grows as a few features carry the signal."""
    s2 = x.detach().float().flatten(0, -2).pow(2).mean(dim=0)
    return s2.pow(2).mean() / s2.mean().pow(2)


def _nonfinite(x: torch.Tensor) -> torch.Tensor:
    return (~torch.isfinite(x.detach())).sum()


def max_causal_logit(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Largest pre-softmax attention logit q.k/sqrt(d_head) over allowed (causal) pairs.

    ``q`` and ``k`` are (B, H, T, d_head), as the attention uses them (after any QK-norm and
    rotary); grouped keys (fewer heads than ``q``, GQA) are repeated to match. Computed in fp32
    one sequence at a time, so the (H, T, T) score matrix of a single sequence is the peak memory.
    """
    if k.shape[1] != q.shape[1]:
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
    t, head = q.shape[2], q.shape[3]
    allowed = torch.ones(t, t, dtype=torch.bool, device=q.device).tril()
    best = torch.full((), -math.inf, device=q.device)
    with torch.autocast(q.device.type, enabled=False):
        for q_row, k_row in zip(q.detach().float(), k.detach().float(), strict=True):
            scores = q_row @ k_row.transpose(1, 2) / math.sqrt(head)  # (H, T, T)
            best = torch.maximum(best, scores.masked_fill(~allowed, -math.inf).max())
    return best


class ModelProbe(Resumable):
    """Looks inside the model at the first step, every ``interval`` steps and the last step.

    Quantities: ``resid_rms`` and ``resid_kurtosis`` (block output, :func:`feature_kurtosis`),
    ``norm_in_rms`` and ``norm_rms`` (each norm's
    input and output), ``grad_norm`` (each block's and the embeddings' gradient before
    clipping), ``attn_logit_max`` (each block whose attention exposes q and k), ``logit_max_abs``,
    ``logit_std`` and ``logsumexp_mean`` (the model's output logits), ``nonfinite_activations``
    and ``nonfinite_grads`` (counts at the probe step).
    """

    resumed = ("rows", "probe_steps", "nonfinite")

    def __init__(self, interval: int, attention: bool = True) -> None:
        self.interval = interval
        self.attention = attention
        self.rows: list[ProbeRow] = []
        self.probe_steps = 0
        self.nonfinite = {"activations": 0, "grads": 0}
        self._pending: list[tuple[str, str, int, torch.Tensor]] = []
        self._handles: list[Removable] = []
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

    def start(self, model: nn.Module, step: int) -> None:
        """Hook the model for one probe step (its forward pass records the activations)."""
        self._step = step
        prefix, blocks = blocks_of(model)
        for i, block in enumerate(blocks):
            self._hook(block, partial(self._block, f"{prefix}.{i}", i))
            attention = partial(self._attention, f"{prefix}.{i}.attn", i)
            handle = hook_attention(block, attention) if self.attention else None
            if handle is not None:
                self._handles.append(handle)
        for name, module in model.named_modules():
            if is_norm(module):
                layer = layer_of(name, len(blocks), prefix)
                self._handles.append(module.register_forward_hook(partial(self._norm, name, layer)))
        self._hook(model, self._logits)

    def _block(self, site: str, layer: int, out: object) -> None:
        self._activation("resid_rms", site, layer, out)
        if isinstance(out, torch.Tensor):
            self._add("resid_kurtosis", site, layer, feature_kurtosis(out))

    def _activation(self, quantity: str, site: str, layer: int, out: object) -> None:
        if isinstance(out, torch.Tensor):
            self._add(quantity, site, layer, _rms(out))
            self._add("nonfinite_activations", site, layer, _nonfinite(out))

    def _norm(
        self, site: str, layer: int, _module: nn.Module, inputs: tuple[object, ...], out: object
    ) -> None:
        if inputs and isinstance(inputs[0], torch.Tensor):
            self._add("norm_in_rms", site, layer, _rms(inputs[0]))
        self._activation("norm_rms", site, layer, out)

    def _attention(self, site: str, layer: int, q: torch.Tensor, k: torch.Tensor) -> None:
        self._add("attn_logit_max", site, layer, max_causal_logit(q, k))

    def _logits(self, logits: torch.Tensor) -> None:
        z = logits.detach().float()
        with torch.autocast(z.device.type, enabled=False):
            self._add("logit_max_abs", "head", MODEL_LAYER, z.abs().max())
            self._add("logit_std", "head", MODEL_LAYER, z.std())
            self._add("logsumexp_mean", "head", MODEL_LAYER, torch.logsumexp(z, -1).mean())
        self._add("nonfinite_activations", "head", MODEL_LAYER, _nonfinite(z))

    def gradients(self, model: nn.Module) -> None:
        """Record the gradient norms and non-finite gradients (call after backward)."""
        prefix, blocks = blocks_of(model)
        groups = {f"{prefix}.{i}": (i, list(b.parameters())) for i, b in enumerate(blocks)}
        groups["embedding"] = (MODEL_LAYER, [e.weight for e in embeddings_of(model)])
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
