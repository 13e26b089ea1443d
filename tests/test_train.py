"""The learning-rate schedule and the optimizer's parameter groups."""

from __future__ import annotations

import pytest

from ablate.config import ModelConfig
from ablate.model import build_model, parameter_groups
from ablate.train import lr_factor


def test_warmup_is_linear_then_cosine_decays_to_the_floor() -> None:
    f = [lr_factor(s, warmup=4, total=14, schedule="cosine", min_ratio=0.1) for s in range(15)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]
    assert f[4] == pytest.approx(1.0)
    assert f[9] == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the decay
    assert f[14] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(f[4:], f[5:], strict=False))


def test_constant_schedule_and_no_warmup() -> None:
    assert [lr_factor(s, 2, 10, "constant", 0.1) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert lr_factor(0, 0, 10, "cosine", 0.0) == pytest.approx(1.0)


def test_decay_groups_split_matrices_from_vectors() -> None:
    model = build_model(ModelConfig(d_model=16, n_layers=1, n_heads=2, seq_len=8), 20, 0)
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(
        p.dim() < 2 for p in no_decay["params"]
    )
    n = sum(p.numel() for g in (decay, no_decay) for p in g["params"])
    assert n == sum(p.numel() for p in model.parameters())
