"""A model of your own that takes ablate's norms: ``model.factory: experiments.own_model:build``.

A parallel-block decoder (GPT-J / PaLM style: x + attn(norm(x)) + mlp(norm(x)), one norm per
block), written without ablate's model code. ablate calls :func:`build` with the run's model
config, the vocabulary size and ``make_norm(dim)``, which builds the norm the variant asks for
(``model.norm.kind``, ``eps``, ``bias``, ...). The attention offers ``heads(x) -> (q, k, v)``,
so ablate's probes can record its attention logits. ablate initializes every parameter by name
from the run seed after this returns.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ablate.core.config import ModelConfig


class Attention(nn.Module):
    """Causal multi-head attention; ``heads`` is the hook ablate's attention probe uses."""

    def __init__(self, d_model: int, n_heads: int) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)

    def heads(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)
        return tuple(z.view(b, t, self.n_heads, -1).transpose(1, 2) for z in (q, k, v))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.heads(x)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(y.transpose(1, 2).flatten(2))


class ParallelBlock(nn.Module):
    """x + attn(norm(x)) + mlp(norm(x))."""

    def __init__(self, cfg: ModelConfig, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm
        self.attn = Attention(cfg.d_model, cfg.n_heads)
        width = cfg.d_ff or 4 * cfg.d_model
        self.mlp = nn.Sequential(
            nn.Linear(cfg.d_model, width), nn.GELU(), nn.Linear(width, cfg.d_model)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        return x + self.attn(h) + self.mlp(h)


class ParallelDecoder(nn.Module):
    """Token and position embeddings, parallel blocks, a final norm and the LM head."""

    def __init__(
        self, cfg: ModelConfig, vocab_size: int, make_norm: Callable[[int], nn.Module]
    ) -> None:
        super().__init__()
        self.tok = nn.Embedding(vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.seq_len, cfg.d_model)
        self.layers = nn.ModuleList(
            ParallelBlock(cfg, make_norm(cfg.d_model)) for _ in range(cfg.n_layers)
        )
        self.norm = make_norm(cfg.d_model)
        self.out = nn.Linear(cfg.d_model, vocab_size, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
        for layer in self.layers:
            x = layer(x)
        return self.out(self.norm(x))


def build(cfg: ModelConfig, vocab_size: int, make_norm: Callable[[int], nn.Module]) -> nn.Module:
    """The factory ablate calls (``model.factory: experiments.own_model:build``)."""
    return ParallelDecoder(cfg, vocab_size, make_norm)
