"""Checkpoint conversion: what is copied, folded and dropped, and that folding is exact."""

from __future__ import annotations

import pytest
import torch

from ablate.core.config import ModelConfig, NormConfig
from ablate.nn.convert import ConversionError, convert_weights
from ablate.nn.model import GPT, build_gpt, next_token_loss, norm_parameter_names


def _model(kind: str, placement: str = "pre", seed: int = 0, **norm) -> GPT:
    cfg = ModelConfig(
        d_model=16,
        n_layers=2,
        n_heads=2,
        seq_len=8,
        norm=NormConfig(kind=kind, placement=placement, **norm),
    )
    return build_gpt(cfg, 32, seed=seed).eval()


@torch.no_grad()
def _trained_looking(model: GPT) -> GPT:
    """Random gains and biases (a trained checkpoint's are not 1 and 0)."""
    g = torch.Generator().manual_seed(9)
    for name, p in model.named_parameters():
        if name in norm_parameter_names(model):
            p.copy_(1.0 + 0.3 * torch.randn(p.shape, generator=g))
    return model


def _batch() -> torch.Tensor:
    return torch.randint(0, 32, (3, 9), generator=torch.Generator().manual_seed(2))


@torch.no_grad()
def test_folding_a_bias_into_the_next_linear_layer_is_exact() -> None:
    source = _trained_looking(_model("layernorm"))
    source.norm_f.bias.zero_()  # the final norm feeds the bias-free head: not foldable
    target = _model("layernorm", bias=False, seed=5)
    report = convert_weights(source, target, "fold")
    assert sorted(report["folded"]) == [
        f"blocks.{i}.{n}.bias" for i in range(2) for n in ("norm_attn", "norm_mlp")
    ]
    assert report["dropped"] == ["norm_f.bias"]
    batch = _batch()
    assert torch.allclose(target(batch[:, :-1]), source(batch[:, :-1]), atol=1e-5)
    qkv = source.blocks[0].attn.qkv
    expected = qkv.bias + qkv.weight @ source.blocks[0].norm_attn.bias
    assert torch.allclose(target.blocks[0].attn.qkv.bias, expected, atol=1e-6)


@torch.no_grad()
def test_layernorm_to_rmsnorm_copies_gains_and_every_other_parameter() -> None:
    source = _trained_looking(_model("layernorm"))
    target = _model("rmsnorm", seed=5)
    report = convert_weights(source, target, "fold")
    src, tgt = dict(source.named_parameters()), dict(target.named_parameters())
    for name, p in tgt.items():
        if name.endswith("qkv.bias") or name.endswith("fc.bias"):
            assert not torch.equal(p, src[name])  # folded biases changed them
        else:
            assert torch.equal(p, src[name]), name
    assert set(report["copied"]) == set(tgt)  # RMSNorm has no bias: nothing else is new
    batch = _batch()
    jump = float(next_token_loss(target, batch)) - float(next_token_loss(source, batch))
    assert jump != 0.0  # the mean subtraction is not mappable: the swap changes the model


@torch.no_grad()
def test_drop_mapping_and_post_norm_drop_every_bias() -> None:
    source = _trained_looking(_model("layernorm"))
    report = convert_weights(source, _model("rmsnorm"), "drop")
    assert report["folded"] == [] and len(report["dropped"]) == 2 * 2 + 1
    post = _trained_looking(_model("layernorm", "post"))
    report = convert_weights(post, _model("rmsnorm", "post"), "fold")
    assert report["folded"] == [] and len(report["dropped"]) == 2 * 2  # norms feed the residual


@torch.no_grad()
def test_a_target_bias_is_copied_and_dyt_alpha_is_reported_dropped() -> None:
    source = _trained_looking(_model("layernorm"))
    target = _model("rmsnorm", bias=True)
    report = convert_weights(source, target, "fold")
    assert report["folded"] == [] and report["dropped"] == []
    assert torch.equal(target.blocks[1].norm_mlp.bias, source.blocks[1].norm_mlp.bias)
    dyt = _trained_looking(_model("dyt"))
    report = convert_weights(dyt, _model("layernorm"), "fold")
    assert sum(n.endswith(".alpha") for n in report["dropped"]) == 2 * 2 + 1


def test_models_with_other_norms_or_bad_mapping_are_refused() -> None:
    with pytest.raises(ConversionError, match="placement or qk_norm"):
        convert_weights(_model("layernorm"), _model("rmsnorm", "sandwich"))
    with pytest.raises(ConversionError, match="placement or qk_norm"):
        convert_weights(_model("layernorm"), _model("rmsnorm", qk_norm=True))
    with pytest.raises(ConversionError, match="bias mapping 'keep'"):
        convert_weights(_model("layernorm"), _model("rmsnorm"), "keep")
