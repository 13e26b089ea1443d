"""Decoding: the KV cache gives the same tokens and logits as running the whole sequence, for
every norm kind and placement, with rotary or learned positions and QK-norm; chunks after a
prefix attend causally; sampling is seeded."""

from __future__ import annotations

import pytest
import torch

from ablate.core.config import ModelConfig, NormConfig
from ablate.nn.attention import KVCache
from ablate.nn.decode import generate
from ablate.nn.model import build_gpt

KINDS = ["layernorm", "rmsnorm", "dyt"]
PLACEMENTS = ["pre", "post", "sandwich", "deepnorm", "none"]


def _model(kind: str = "rmsnorm", placement: str = "pre", qk_norm: bool = False, **kw: object):
    norm = NormConfig(kind=kind, placement=placement, qk_norm=qk_norm, impl="reference")
    cfg = ModelConfig(d_model=32, n_layers=2, n_heads=4, seq_len=24, norm=norm, **kw)
    return build_gpt(cfg, vocab_size=40, seed=0).eval()


def _prompt(batch: int = 2, length: int = 6) -> torch.Tensor:
    return torch.randint(0, 40, (batch, length), generator=torch.Generator().manual_seed(3))


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("kind", KINDS)
def test_cached_decoding_equals_uncached(kind: str, placement: str) -> None:
    model = _model(kind, placement)
    cached = generate(model, _prompt(), new_tokens=12, cache=True)
    full = generate(model, _prompt(), new_tokens=12, cache=False)
    assert torch.equal(cached.tokens, full.tokens)
    assert cached.logits.shape == (2, 12, 40)
    torch.testing.assert_close(cached.logits, full.logits, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "extra",
    [
        {"position": "rope"},
        {"position": "rope", "mlp": "swiglu", "linear_bias": False},
        {"qk_norm": True},
        {"qk_norm": True, "position": "rope"},
    ],
)
def test_cached_decoding_equals_uncached_with_rope_and_qk_norm(extra: dict) -> None:
    model = _model("rmsnorm", "pre", **extra)
    cached = generate(model, _prompt(), new_tokens=10, cache=True)
    full = generate(model, _prompt(), new_tokens=10, cache=False)
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.logits, full.logits, rtol=1e-4, atol=1e-5)


def test_a_chunk_after_cached_positions_attends_causally() -> None:
    model = _model("layernorm", "pre", position="rope")
    ids = _prompt(length=10)
    with torch.no_grad():
        whole = model(ids)
        cache = KVCache(model.cfg, 2, torch.device("cpu"), torch.float32)
        first, rest = model(ids[:, :4], cache), model(ids[:, 4:], cache)
    torch.testing.assert_close(torch.cat((first, rest), dim=1), whole, rtol=1e-4, atol=1e-5)
    assert cache.length == 10


def test_sampling_is_seeded_and_greedy_is_the_argmax() -> None:
    model = _model()
    a = generate(model, _prompt(), 8, temperature=1.0, seed=5)
    b = generate(model, _prompt(), 8, temperature=1.0, seed=5)
    c = generate(model, _prompt(), 8, temperature=1.0, seed=6)
    assert torch.equal(a.tokens, b.tokens) and not torch.equal(a.tokens, c.tokens)
    greedy = generate(model, _prompt(), 8)
    assert torch.equal(greedy.tokens[:, 6:], greedy.logits.argmax(-1))


def test_decoding_stops_at_the_models_positions() -> None:
    with pytest.raises(ValueError, match="> model.seq_len 24"):
        generate(_model(), _prompt(length=20), new_tokens=5)
