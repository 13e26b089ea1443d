"""Attention: rotary positions depend only on offsets, and soft-capped scores are the formula
(the cache's decoding is tested with the model, tests/nn/test_decode.py)."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.core.config import ModelConfig, NormConfig
from ablate.nn.attention import Rotary
from ablate.nn.model import build_gpt


def _model(**model: object) -> torch.nn.Module:
    norm = NormConfig(kind="layernorm", impl="reference")
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=4, seq_len=16, norm=norm, **model)
    return build_gpt(cfg, 50, seed=3).eval()


def _x() -> torch.Tensor:
    return torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(5))


def test_rope_scores_depend_only_on_the_relative_position() -> None:
    rotary = Rotary(head_dim=8, max_len=40)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(8, generator=g), torch.randn(8, generator=g)

    def score(m: int, n: int) -> float:
        x = torch.zeros(1, 1, 40, 8)
        x[0, 0, m], x[0, 0, n] = q, k
        r = rotary(x)[0, 0]
        return float(r[m] @ r[n])

    assert score(5, 2) == pytest.approx(score(25, 22), abs=1e-4)  # same offset, shifted
    assert score(5, 2) == pytest.approx(score(33, 30), abs=1e-4)
    assert abs(score(5, 2) - score(5, 3)) > 1e-3  # another offset, another score
    x = torch.randn(1, 2, 40, 8, generator=g)
    assert torch.equal(rotary(x)[..., 0, :], x[..., 0, :])  # position 0: no rotation
    assert torch.allclose(rotary(x).norm(dim=-1), x.norm(dim=-1), atol=1e-5)  # a rotation


@torch.no_grad()
def test_soft_capping_bounds_the_logits_and_equals_the_formula() -> None:
    capped = _model(softcap_attn=2.0, softcap_output=0.05)
    ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    assert capped(ids).abs().max() <= 0.05  # tanh saturates to exactly 1 in fp32
    attn, x = capped.blocks[0].attn, _x()
    q, k, v = attn.heads(x)
    scores = 2.0 * torch.tanh((q @ k.transpose(-2, -1) / math.sqrt(8)) / 2.0)
    scores = scores.masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), -math.inf)
    y = (scores.softmax(-1) @ v).transpose(1, 2).reshape(2, 16, 32)
    assert torch.allclose(attn(x), attn.proj(y), atol=1e-6)
    # a cap far above the logits changes nothing beyond rounding
    wide = _model(softcap_attn=1e4, softcap_output=1e4)
    plain = _model()
    assert torch.allclose(wide(ids), plain(ids), atol=1e-5)
