"""Timing a model's training step where it will train: forward, backward of the objective and
an AdamW step on real batches of its corpus, in its precision (:func:`time_steps`). The
estimate prices runs with it, the GPU-fit check measures memory over it, and ``ablate bench``
times norms with it.
"""

from __future__ import annotations

import time

import torch
from torch import nn

from ablate.core.config import RunConfig
from ablate.nn.model import next_token_objective, parameter_groups
from ablate.training.data import Corpus, batch_offsets, gather_windows

TIMED_STEPS = 5
CPU = torch.device("cpu")


def time_steps(
    model: nn.Module,
    cfg: RunConfig,
    corpus: Corpus,
    steps: int = TIMED_STEPS,
    device: torch.device = CPU,
) -> float:
    """Seconds per step (forward, backward of the objective, z-loss included, AdamW) of
    ``model`` (trained in place, on
    ``device``): the fastest of ``steps`` after a warm-up (another process on the machine
    slows some of them; none makes one faster). ``*-true`` casts the model to its dtype,
    ``*-mixed`` autocasts to it."""
    precision = cfg.train.precision
    dtype = torch.float16 if precision.startswith("16") else torch.bfloat16
    if precision.endswith("-true"):
        model.to(dtype)
    optimizer = torch.optim.AdamW(parameter_groups(model, cfg.train.weight_decay), lr=1e-4)
    seq_len, batch = cfg.model.seq_len, cfg.train.batch_size
    offsets = batch_offsets(len(corpus.train), seq_len, batch, steps + 1, seed=0)
    autocast = torch.autocast(device.type, dtype=dtype, enabled=precision.endswith("-mixed"))
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for row in offsets:
        tokens = gather_windows(corpus.train, row, seq_len).to(device)
        sync()
        start = time.perf_counter()
        with autocast:
            objective, _ = next_token_objective(model, tokens, cfg.train.z_loss)
        objective.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        times.append(time.perf_counter() - start)
    return min(times[1:])
