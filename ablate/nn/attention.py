"""Causal self-attention and what it needs: rotary positions, the KV cache of decoding and
logit soft-capping.

:class:`CausalSelfAttention` exposes ``heads(x) -> (q, k, v)``, the queries and keys as the dot
product sees them (after QK-norm and rotary), which the attention-logit probe reads
(:mod:`ablate.nn.anatomy`).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from ablate.core.config import ModelConfig
from ablate.nn.norms import build_norm

ROPE_BASE = 10000.0  # rotary frequencies: base ** (-2i / d_head), as in LLaMA


def softcap(x: torch.Tensor, cap: float | None) -> torch.Tensor:
    """``cap * tanh(x / cap)`` (Gemma 2's logit soft-capping); ``x`` itself without a cap."""
    return x if cap is None else cap * torch.tanh(x / cap)


class Rotary(nn.Module):
    """Rotary position embedding (Su et al. 2021; LLaMA's rotate-half form): feature pairs
    (i, i + d/2) of each head are rotated by position x frequency, frequencies
    ``ROPE_BASE ** (-2i / d)``, so q.k depends on positions only through their difference.
    The angles are buffers, not parameters (nothing to initialize or store)."""

    def __init__(self, head_dim: int, max_len: int) -> None:
        super().__init__()
        freqs = ROPE_BASE ** (-torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
        angles = torch.outer(torch.arange(max_len, dtype=torch.float64), freqs)  # (T, d/2)
        self.register_buffer("cos", angles.cos().float(), persistent=False)
        self.register_buffer("sin", angles.sin().float(), persistent=False)

    def forward(self, x: torch.Tensor, start: int = 0) -> torch.Tensor:
        """``x`` (B, H, T, d_head) rotated at positions ``start`` .. ``start`` + T - 1."""
        t, half = x.shape[-2], x.shape[-1] // 2
        cos, sin = self.cos[start : start + t].to(x.dtype), self.sin[start : start + t].to(x.dtype)
        first, second = x[..., :half], x[..., half:]
        return torch.cat((first * cos - second * sin, first * sin + second * cos), dim=-1)


class KVCache:
    """Every layer's keys and values for decoding, (layers, B, H, capacity, d_head), filled up
    to ``length`` positions (the same for every layer). :meth:`ablate.nn.model.GPT.forward`
    with a cache attends to what it holds and appends the new positions."""

    def __init__(
        self, cfg: ModelConfig, batch: int, device: torch.device, dtype: torch.dtype
    ) -> None:
        shape = (cfg.n_layers, batch, cfg.n_heads, cfg.seq_len, cfg.d_model // cfg.n_heads)
        self.keys = torch.zeros(shape, device=device, dtype=dtype)
        self.values = torch.zeros(shape, device=device, dtype=dtype)
        self.length = 0

    def extend(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Store ``layer``'s new keys and values after the cached ones; all of them."""
        end = self.length + k.shape[2]
        if end > self.keys.shape[3]:
            raise ValueError(f"decoding past model.seq_len ({self.keys.shape[3]} positions)")
        self.keys[layer, :, :, self.length : end] = k
        self.values[layer, :, :, self.length : end] = v
        return self.keys[layer, :, :, :end], self.values[layer, :, :, :end]


class CausalSelfAttention(nn.Module):
    """Multi-head causal self-attention through ``scaled_dot_product_attention``.

    With ``model.norm.qk_norm`` the queries and keys are normalized per head (``q_norm``,
    ``k_norm``, over d_head features) before the dot product (Wortsman et al. 2023); with
    ``model.position: rope`` they are then rotated by position (:class:`Rotary`). With
    ``model.softcap_attn`` the scores are computed here and soft-capped before the softmax
    (:func:`softcap`); otherwise ``scaled_dot_product_attention`` computes them.
    """

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model, bias=cfg.linear_bias)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model, bias=cfg.linear_bias)
        self.dropout = cfg.dropout
        self.cap = cfg.softcap_attn
        head = cfg.d_model // cfg.n_heads
        self.q_norm = build_norm(cfg.norm, head, "attn") if cfg.norm.qk_norm else None
        self.k_norm = build_norm(cfg.norm, head, "attn") if cfg.norm.qk_norm else None
        self.rotary = Rotary(head, cfg.seq_len) if cfg.position == "rope" else None

    def heads(
        self, x: torch.Tensor, start: int = 0
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys (normalized under qk_norm, rotated under rope at positions from
        ``start``) and values, each (B, H, T, d_head): what the dot product sees."""
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, dim=2)  # 3 x (B, T, D)
        q, k, v = (z.view(b, t, self.n_heads, d // self.n_heads).transpose(1, 2) for z in (q, k, v))
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        if self.rotary is not None:
            q, k = self.rotary(q, start), self.rotary(k, start)
        return q, k, v

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0
    ) -> torch.Tensor:
        """Attention over ``x`` (B, T, D); with a ``cache``, ``x`` holds the positions after the
        cached ones, which are attended to as well."""
        b, t, d = x.shape
        start = cache.length if cache is not None else 0
        q, k, v = self.heads(x, start)
        mask = None
        if cache is not None:
            k, v = cache.extend(layer, k, v)
            if start and t > 1:  # a chunk after cached positions: each sees those and its past
                mask = torch.ones(t, start + t, dtype=torch.bool, device=x.device).tril(start)
        dropout = self.dropout if self.training else 0.0
        causal = start == 0 and t > 1
        if self.cap is not None:
            if causal:
                mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = self.capped(q, k, v, mask, dropout)
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=causal
            )
        return self.proj(y.transpose(1, 2).reshape(b, t, d))  # (B, T, D)

    def capped(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        mask: torch.Tensor | None,
        dropout: float,
    ) -> torch.Tensor:
        """Attention with soft-capped scores: softmax(cap tanh(q.k / sqrt(d) / cap)) v, where
        ``mask`` (T, S) allows a pair (all pairs without one)."""
        scores = softcap(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), self.cap)
        if mask is not None:
            scores = scores.masked_fill(~mask, -math.inf)
        weights = F.dropout(scores.softmax(dim=-1), dropout, self.training)
        return weights @ v
