"""The 2024–26 design space in the model: the reordered placement (OLMo 2), Mix-LN, LayerNorm
Scaling, DyT's per-site alpha, logit soft-capping and z-loss; each composes with every norm kind
and block choice, keeps the matched-seed init and decodes from a cache as it runs whole."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.core.config import ModelConfig, NormConfig
from ablate.nn.convert import convert_weights
from ablate.nn.decode import generate
from ablate.nn.model import (
    build_gpt,
    next_token_loss,
    next_token_objective,
    norm_parameter_names,
    shared_init_digest,
)
from ablate.nn.norms import Norm

KINDS = ["layernorm", "rmsnorm", "dyt"]
LLAMA = {"mlp": "swiglu", "position": "rope", "linear_bias": False}
STRUCTURES = {
    "reordered": ({"placement": "reordered"}, {}),
    "mix": ({"placement": "pre", "mix_post_layers": 1}, {}),
    "depth_pre": ({"placement": "pre", "depth_scale": True}, {}),
    "depth_sandwich": ({"placement": "sandwich", "depth_scale": True}, {}),
    "softcap": ({"placement": "pre"}, {"softcap_attn": 5.0, "softcap_output": 3.0}),
}


def _cfg(kind: str = "layernorm", n_layers: int = 3, model: dict | None = None, **norm):
    norm.setdefault("placement", "pre")
    return ModelConfig(
        d_model=32,
        n_layers=n_layers,
        n_heads=4,
        seq_len=16,
        norm=NormConfig(kind=kind, impl="reference", **norm),
        **(model or {}),
    )


def _perturbed(cfg: ModelConfig) -> torch.nn.Module:
    """The model with gains and biases away from 1 and 0, so a misplaced norm shows."""
    model = build_gpt(cfg, 50, seed=3).eval()
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name in norm_parameter_names(model):
                p.add_(0.1 * torch.randn(p.shape, generator=g))
    return model


def _x() -> torch.Tensor:
    return torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("choice", [{}, LLAMA], ids=["gpt2", "llama"])
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_every_new_structure_composes_with_every_kind_and_keeps_the_shared_init(
    structure: str, kind: str, choice: dict
) -> None:
    norm, model_keys = STRUCTURES[structure]
    cfg = _cfg(kind, model={**choice, **model_keys}, **norm)
    model = build_gpt(cfg, vocab_size=50, seed=0)
    logits = model(torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0)))
    assert logits.shape == (2, 16, 50) and torch.isfinite(logits).all()
    digests = {
        shared_init_digest(build_gpt(_cfg(other, model={**choice, **model_keys}, **norm), 50, 0))
        for other in KINDS
    }
    assert digests == {shared_init_digest(model)}
    # the structure moves no shared parameter: same bits as the plain Pre-Norm model's
    assert shared_init_digest(model) == shared_init_digest(
        build_gpt(_cfg(kind, model=choice), vocab_size=50, seed=0)
    )


@torch.no_grad()
def test_reordered_normalizes_each_sublayers_output_and_keeps_a_final_norm() -> None:
    model = _perturbed(_cfg("rmsnorm", placement="reordered"))
    block, x = model.blocks[1], _x()
    h = x + block.norm_attn(block.attn(x))
    assert torch.allclose(block(x), h + block.norm_mlp(block.mlp(h)), atol=1e-6)
    assert isinstance(model.norm_f, Norm)


@torch.no_grad()
def test_mix_ln_makes_the_first_layers_post_norm_and_the_rest_pre_norm() -> None:
    model = _perturbed(_cfg("layernorm", n_layers=3, mix_post_layers=2))
    assert [b.placement for b in model.blocks] == ["post", "post", "pre"]
    x = _x()
    post = model.blocks[1]
    h = post.norm_attn(x + post.attn(x))
    assert torch.allclose(post(x), post.norm_mlp(h + post.mlp(h)), atol=1e-6)
    pre = model.blocks[2]
    h = x + pre.attn(pre.norm_attn(x))
    assert torch.allclose(pre(x), h + pre.mlp(pre.norm_mlp(h)), atol=1e-6)
    assert isinstance(model.norm_f, Norm)  # the Pre-Norm layers end in the final norm


@pytest.mark.parametrize("placement", ["pre", "sandwich"])
@torch.no_grad()
def test_layernorm_scaling_divides_each_input_norm_by_the_root_of_its_layer(
    placement: str,
) -> None:
    scaled = _perturbed(_cfg("layernorm", placement=placement, depth_scale=True))
    plain = _perturbed(_cfg("layernorm", placement=placement))
    x = _x()
    for i, block in enumerate(scaled.blocks):
        s = 1 / math.sqrt(i + 1)
        assert block.input_scale == s and plain.blocks[i].input_scale == 1.0
        out = block.norm_attn_out or (lambda t: t)
        h = x + out(block.attn(s * block.norm_attn(x)))
        out = block.norm_mlp_out or (lambda t: t)
        assert torch.allclose(block(x), h + out(block.mlp(s * block.norm_mlp(h))), atol=1e-6)
    assert torch.equal(scaled.blocks[0](x), plain.blocks[0](x))  # layer 1: 1/sqrt(1)


def test_dyt_alpha_starts_per_site_and_other_kinds_ignore_it() -> None:
    sites = {"alpha_init_attn": 0.8, "alpha_init_mlp": 0.2, "alpha_init_final": 0.3}
    model = build_gpt(_cfg("dyt", placement="sandwich", qk_norm=True, **sites), 50, seed=0)
    alphas = {n: m.alpha.item() for n, m in model.named_modules() if isinstance(m, Norm)}
    for name, alpha in alphas.items():
        site = "final" if name == "norm_f" else "mlp" if "mlp" in name else "attn"
        assert alpha == pytest.approx(sites[f"alpha_init_{site}"]), name
    assert {n.rsplit(".", 1)[-1] for n in alphas} >= {"q_norm", "k_norm", "norm_attn_out"}
    only_attn = build_gpt(_cfg("dyt", alpha_init=0.4, alpha_init_attn=0.9), 50, seed=0)
    assert only_attn.blocks[0].norm_mlp.alpha.item() == pytest.approx(0.4)
    assert only_attn.norm_f.alpha.item() == pytest.approx(0.4)
    rms = NormConfig(kind="rmsnorm", **sites)
    assert rms.as_used() == NormConfig(kind="rmsnorm").as_used()


@pytest.mark.parametrize("structure", list(STRUCTURES))
def test_cached_decoding_equals_uncached_under_every_new_structure(structure: str) -> None:
    norm, model_keys = STRUCTURES[structure]
    model = build_gpt(_cfg("rmsnorm", model=model_keys, **norm), 50, seed=0).eval()
    prompt = torch.randint(0, 50, (2, 5), generator=torch.Generator().manual_seed(3))
    cached = generate(model, prompt, new_tokens=8, cache=True)
    full = generate(model, prompt, new_tokens=8, cache=False)
    assert torch.equal(cached.tokens, full.tokens)
    torch.testing.assert_close(cached.logits, full.logits, rtol=1e-4, atol=1e-5)


@torch.no_grad()
def test_a_bias_folds_exactly_through_layernorm_scaling_and_mix_ln() -> None:
    for norm in ({"depth_scale": True}, {"mix_post_layers": 1}):
        source = _perturbed(_cfg("layernorm", **norm))
        source.norm_f.bias.zero_()  # the final norm feeds the bias-free head
        target = build_gpt(_cfg("layernorm", bias=False, **norm), 50, seed=5).eval()
        report = convert_weights(source, target, "fold")
        first = 1 if norm.get("mix_post_layers") else 0  # a Post-Norm layer's bias is dropped
        assert sorted(report["folded"]) == [
            f"blocks.{i}.{n}.bias" for i in range(first, 3) for n in ("norm_attn", "norm_mlp")
        ]
        ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(2))
        if not first:
            assert torch.allclose(target(ids), source(ids), atol=1e-5)


def test_z_loss_adds_the_mean_squared_log_normalizer_to_the_objective_only() -> None:
    model = build_gpt(_cfg(), 50, seed=0)
    batch = torch.randint(0, 50, (3, 17), generator=torch.Generator().manual_seed(4))
    objective, loss = next_token_objective(model, batch, z_loss=1e-2)
    assert torch.equal(loss, next_token_loss(model, batch))
    log_z = torch.logsumexp(model(batch[:, :-1]).float(), dim=-1)
    assert objective.item() == pytest.approx(loss.item() + 1e-2 * log_z.pow(2).mean().item())
    plain, same = next_token_objective(model, batch)
    assert plain is same and torch.equal(plain, loss)
