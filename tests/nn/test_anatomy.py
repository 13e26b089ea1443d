"""The generic probe sites are found in ablate's model, a litgpt model and a user's model, and an
attention hook sees the queries and keys the dot product uses, then comes off cleanly."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch import nn

from ablate.core.config import ModelConfig
from ablate.nn.anatomy import blocks_of, embeddings_of, hook_attention, width_of
from ablate.nn.model import build_gpt
from ablate.nn.sources import build_model

REPO = Path(__file__).resolve().parents[2]


def _litgpt(**fields: object) -> nn.Module:
    pytest.importorskip("litgpt")
    litgpt = {"name": "pythia-14m", "n_layer": 3, "n_embd": 32, "n_head": 4, **fields}
    return build_model(ModelConfig(source="litgpt", seq_len=8, litgpt=litgpt), 40, seed=0)


def _own(monkeypatch: pytest.MonkeyPatch) -> nn.Module:
    monkeypatch.chdir(REPO)
    cfg = ModelConfig(
        source="python", factory="experiments.own_model:build", d_model=32, n_layers=3, seq_len=8
    )
    return build_model(cfg, 40, seed=0)


def test_blocks_embeddings_and_width_of_ablates_model() -> None:
    model = build_gpt(ModelConfig(d_model=32, n_layers=3, seq_len=8), 40, seed=0)
    assert blocks_of(model) == ("blocks", model.blocks)
    assert embeddings_of(model) == [model.tok_emb, model.pos_emb]
    assert width_of(model) == 32


def test_blocks_embeddings_and_width_of_a_litgpt_model() -> None:
    model = _litgpt()
    assert blocks_of(model) == ("transformer.h", model.transformer.h)
    assert embeddings_of(model) == [model.transformer.wte]
    assert width_of(model) == 32


def test_blocks_embeddings_and_width_of_a_users_model(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _own(monkeypatch)
    assert blocks_of(model) == ("layers", model.layers)
    assert embeddings_of(model) == [model.tok, model.pos]


def test_a_model_without_a_block_list_is_refused() -> None:
    with pytest.raises(ValueError, match="has no nn.ModuleList of blocks"):
        blocks_of(nn.Sequential(nn.Embedding(4, 4), nn.Linear(4, 4)))


def _seen_by_hook(model: nn.Module, block: nn.Module) -> list[tuple[torch.Tensor, ...]]:
    seen: list[tuple[torch.Tensor, ...]] = []
    handle = hook_attention(block, lambda q, k: seen.append((q, k)))
    assert handle is not None
    model(torch.arange(8).view(1, 8))
    handle.remove()
    model(torch.arange(8).view(1, 8))  # off again: nothing more is recorded
    return seen


def test_the_sdpa_hook_sees_litgpts_grouped_queries_and_keys() -> None:
    model = _litgpt(name="Llama-3.2-1B", n_head=4, n_query_groups=2, intermediate_size=64)
    attn = model.transformer.h[1].attn
    [(q, k)] = _seen_by_hook(model, model.transformer.h[1])
    # 4 query heads, 2 key groups that litgpt repeats for its dot product: the hook sees them so
    assert q.shape == k.shape == (1, 4, 8, 8)
    assert torch.equal(k[:, 0], k[:, 1]) and not torch.equal(k[:, 1], k[:, 2])
    assert "scaled_dot_product_attention" not in attn.__dict__  # the class's method is back


def test_the_heads_hook_sees_a_users_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    model = _own(monkeypatch)
    [(q, k)] = _seen_by_hook(model, model.layers[0])
    expected_q, expected_k, _ = model.layers[0].attn.heads(model.layers[0].norm(_stream(model)))
    assert torch.equal(q, expected_q) and torch.equal(k, expected_k)


def _stream(model: nn.Module) -> torch.Tensor:
    idx = torch.arange(8).view(1, 8)
    return model.tok(idx) + model.pos(idx[0])


def test_a_block_without_an_exposed_attention_gets_no_hook() -> None:
    block = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    assert hook_attention(block, lambda q, k: None) is None
