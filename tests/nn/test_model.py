"""The decoder: structure, causality, weight tying, fair initialization across norm variants, and
the LLaMA-style choices (SwiGLU, RoPE, no linear biases) composed with every norm."""

from __future__ import annotations

import pytest
import torch

from ablate.core.config import ModelConfig, NormConfig
from ablate.nn.model import (
    build_gpt,
    count_parameters,
    next_token_loss,
    norm_parameter_names,
    parameter_digests,
    shared_init_digest,
    swiglu_hidden,
)
from ablate.nn.norms import Norm


def _cfg(kind: str = "layernorm", placement: str = "pre", **kw) -> ModelConfig:
    return ModelConfig(
        d_model=32,
        n_layers=2,
        n_heads=4,
        seq_len=16,
        norm=NormConfig(kind=kind, placement=placement),
        **kw,
    )


def test_logits_shape_and_causality() -> None:
    model = build_gpt(_cfg(), vocab_size=50, seed=0).eval()
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    logits = model(idx)
    assert logits.shape == (2, 16, 50)
    changed = idx.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 50
    assert torch.equal(model(changed)[:, :10], logits[:, :10])
    assert not torch.allclose(model(changed)[:, 10:], logits[:, 10:])


def test_initial_loss_is_close_to_log_vocab() -> None:
    model = build_gpt(_cfg(), vocab_size=256, seed=0)
    batch = torch.randint(0, 256, (8, 17), generator=torch.Generator().manual_seed(1))
    assert abs(next_token_loss(model, batch).item() - torch.log(torch.tensor(256.0)).item()) < 0.1


def test_weight_tying_shares_the_embedding() -> None:
    tied = build_gpt(_cfg(tie_weights=True), 50, 0)
    untied = build_gpt(_cfg(tie_weights=False), 50, 0)
    assert tied.head.weight is tied.tok_emb.weight
    assert count_parameters(untied) - count_parameters(tied) == 50 * 32


def test_same_seed_gives_bitwise_identical_shared_parameters_across_norms() -> None:
    ln = build_gpt(_cfg("layernorm"), 50, seed=7)
    rms = build_gpt(_cfg("rmsnorm"), 50, seed=7)
    ln_params, rms_params = dict(ln.named_parameters()), dict(rms.named_parameters())
    shared = set(ln_params) & set(rms_params)
    assert set(ln_params) - shared == {n for n in norm_parameter_names(ln) if n.endswith("bias")}
    for name in shared:
        assert torch.equal(ln_params[name], rms_params[name]), name
    assert shared_init_digest(ln) == shared_init_digest(rms)
    other_seed = build_gpt(_cfg("layernorm"), 50, seed=8)
    assert shared_init_digest(other_seed) != shared_init_digest(ln)


def test_parameter_counts_differ_by_the_layernorm_biases() -> None:
    ln = build_gpt(_cfg("layernorm"), 50, 0)
    rms = build_gpt(_cfg("rmsnorm"), 50, 0)
    n_norms = 2 * 2 + 1  # two per block, plus the final norm
    assert count_parameters(ln) - count_parameters(rms) == n_norms * 32


def test_init_does_not_depend_on_the_global_rng() -> None:
    torch.manual_seed(1)
    a = parameter_digests(build_gpt(_cfg(), 50, seed=3))
    torch.manual_seed(2)
    b = parameter_digests(build_gpt(_cfg(), 50, seed=3))
    assert a == b


def test_placement_pre_and_post() -> None:
    pre = build_gpt(_cfg("rmsnorm", "pre"), 50, 0)
    post = build_gpt(_cfg("rmsnorm", "post"), 50, 0)
    assert isinstance(pre.norm_f, Norm) and pre.norm_f.kind == "rmsnorm"
    assert isinstance(post.norm_f, torch.nn.Identity)
    # post-norm: a block's output is normalized, so its per-token mean square is ~1 (gain 1)
    x = torch.randn(2, 16, 32) * 5
    out = post.blocks[0](x)
    assert torch.allclose(out.pow(2).mean(-1), torch.ones(2, 16), atol=1e-3)
    assert not torch.allclose(pre.blocks[0](x).pow(2).mean(-1), torch.ones(2, 16), atol=1e-1)


def test_norm_kind_reaches_every_norm() -> None:
    ln = build_gpt(_cfg("layernorm"), 50, 0)
    norms = [m for m in ln.modules() if isinstance(m, Norm)]
    assert len(norms) == 5 and all(m.kind == "layernorm" for m in norms)


def _placed(placement: str, kind: str = "layernorm", n_layers: int = 2, **norm) -> torch.nn.Module:
    cfg = ModelConfig(
        d_model=32,
        n_layers=n_layers,
        n_heads=4,
        seq_len=16,
        norm=NormConfig(kind=kind, placement=placement, **norm),
    )
    model = build_gpt(cfg, 50, seed=3).eval()
    with torch.no_grad():  # non-trivial gains and biases, so a misplaced norm shows
        for name, p in model.named_parameters():
            if name in norm_parameter_names(model):
                p.add_(0.1 * torch.randn(p.shape, generator=torch.Generator().manual_seed(1)))
    return model


def _x() -> torch.Tensor:
    return torch.randn(2, 16, 32, generator=torch.Generator().manual_seed(5))


@torch.no_grad()
def test_pre_norm_block_and_final_norm() -> None:
    model = _placed("pre")
    block, x = model.blocks[0], _x()
    h = x + block.attn(block.norm_attn(x))
    assert torch.allclose(block(x), h + block.mlp(block.norm_mlp(h)), atol=1e-6)
    assert isinstance(model.norm_f, Norm) and model.norm_f.kind == "layernorm"


@torch.no_grad()
def test_post_norm_ends_each_block_with_its_norm_and_has_no_final_norm() -> None:
    model = _placed("post", "rmsnorm")
    block, x = model.blocks[0], _x()
    h = block.norm_attn(x + block.attn(x))
    assert torch.allclose(block(x), block.norm_mlp(h + block.mlp(h)), atol=1e-6)
    assert isinstance(model.norm_f, torch.nn.Identity)
    assert block.norm_attn_out is None and block.norm_mlp_out is None


@torch.no_grad()
def test_sandwich_normalizes_both_input_and_output_of_each_sublayer() -> None:
    model = _placed("sandwich")
    block, x = model.blocks[0], _x()
    h = x + block.norm_attn_out(block.attn(block.norm_attn(x)))
    expected = h + block.norm_mlp_out(block.mlp(block.norm_mlp(h)))
    assert torch.allclose(block(x), expected, atol=1e-6)
    assert len([n for n in norm_parameter_names(model) if n.endswith("weight")]) == 4 * 2 + 1


@torch.no_grad()
def test_deepnorm_alpha_and_beta_follow_the_formula_for_the_layer_count() -> None:
    from ablate.nn.model import _init_std, deepnorm_alpha, deepnorm_beta, name_seed

    for n in (2, 6, 12):
        assert deepnorm_alpha(n) == (2 * n) ** 0.25 and deepnorm_beta(n) == (8 * n) ** -0.25
    model = _placed("deepnorm", n_layers=6)
    block, x = model.blocks[0], _x()
    alpha = (2 * 6) ** 0.25
    assert block.alpha == alpha
    h = block.norm_attn(alpha * x + block.attn(x))
    assert torch.allclose(block(x), block.norm_mlp(alpha * h + block.mlp(h)), atol=1e-6)
    # init: value rows of qkv, attn.proj and both MLP matrices scaled by beta; q, k rows not
    beta, std = (8 * 6) ** -0.25, model.cfg.init_std
    fresh = build_gpt(model.cfg, 50, seed=3)
    for name, p in fresh.named_parameters():
        if not name.startswith("blocks.1.") or not name.endswith("weight") or "norm" in name:
            continue
        g = torch.Generator().manual_seed(name_seed(3, name))
        sample = torch.randn(p.shape, generator=g)
        if name.endswith("qkv.weight"):
            assert torch.equal(p[:64], sample[:64] * std)
            assert torch.allclose(p[64:], sample[64:] * std * beta, rtol=1e-6, atol=0)
        else:
            assert torch.allclose(p, sample * std * beta, rtol=1e-6, atol=0), name
            assert _init_std(name, model.cfg) == std * beta


@torch.no_grad()
def test_no_norm_baseline_has_no_norm_anywhere() -> None:
    model = _placed("none")
    assert norm_parameter_names(model) == set()
    block, x = model.blocks[0], _x()
    h = x + block.attn(x)
    assert torch.allclose(block(x), h + block.mlp(h), atol=1e-6)


@torch.no_grad()
def test_qk_norm_normalizes_queries_and_keys_per_head() -> None:
    model = _placed("pre", "rmsnorm", qk_norm=True)
    attn, x = model.blocks[0].attn, _x()
    assert attn.q_norm.kind == "rmsnorm" and attn.q_norm.dim == 8
    q, k, v = attn.qkv(x).split(32, dim=2)
    q, k, v = (z.view(2, 16, 4, 8).transpose(1, 2) for z in (q, k, v))
    q, k = attn.q_norm(q), attn.k_norm(k)
    y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    expected = attn.proj(y.transpose(1, 2).reshape(2, 16, 32))
    assert torch.allclose(attn(x), expected, atol=1e-6)
    plain = _placed("pre", "rmsnorm")
    assert plain.blocks[0].attn.q_norm is None
    assert count_parameters(model) - count_parameters(plain) == 2 * 2 * 8  # 2 layers x q, k gains


def test_every_kind_fits_every_placement_with_shared_init_across_kinds() -> None:
    for placement in ("pre", "post", "sandwich", "deepnorm"):
        digests = {
            shared_init_digest(build_gpt(_cfg(kind, placement), 50, seed=4))
            for kind in ("layernorm", "rmsnorm", "dyt")
        }
        assert len(digests) == 1, placement


LLAMA = {"mlp": "swiglu", "position": "rope", "linear_bias": False}


@pytest.mark.parametrize("d_model", [64, 96, 128, 256, 768])
@pytest.mark.parametrize("bias", [True, False])
def test_swiglu_holds_the_gelu_mlps_parameters_within_one_percent(d_model: int, bias: bool) -> None:
    def mlp_params(mlp: str) -> int:
        cfg = ModelConfig(
            d_model=d_model, n_layers=1, n_heads=4, seq_len=8, mlp=mlp, linear_bias=bias
        )
        return count_parameters(build_gpt(cfg, 64, seed=0).blocks[0].mlp)

    gelu, swiglu = mlp_params("gelu"), mlp_params("swiglu")
    assert gelu == 2 * d_model * 4 * d_model + (5 * d_model if bias else 0)
    hidden = swiglu_hidden(4 * d_model)
    assert swiglu == 3 * d_model * hidden + (2 * hidden + d_model if bias else 0)
    assert abs(swiglu / gelu - 1) < 0.01


def test_swiglu_is_silu_gate_times_up() -> None:
    model = build_gpt(_cfg(mlp="swiglu"), vocab_size=50, seed=0)
    mlp = model.blocks[0].mlp
    x = torch.randn(3, 32, generator=torch.Generator().manual_seed(1))
    hidden = swiglu_hidden(4 * 32)
    gate = x @ mlp.fc.weight[:hidden].T + mlp.fc.bias[:hidden]
    up = x @ mlp.fc.weight[hidden:].T + mlp.fc.bias[hidden:]
    expected = (gate * torch.sigmoid(gate) * up) @ mlp.proj.weight.T + mlp.proj.bias
    assert torch.allclose(mlp(x), expected, atol=1e-5)


@pytest.mark.parametrize("choice", [{}, {"mlp": "swiglu"}, {"position": "rope"}, LLAMA])
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm", "dyt"])
@pytest.mark.parametrize("placement", ["pre", "post", "sandwich", "deepnorm", "none"])
def test_every_block_choice_composes_with_every_norm_and_placement(
    choice: dict, kind: str, placement: str
) -> None:
    cfg = _cfg(kind, placement, **choice)
    model = build_gpt(cfg, vocab_size=50, seed=0)
    assert (model.pos_emb is None) == (cfg.position == "rope")
    ids = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    logits = model(ids)
    assert logits.shape == (2, 16, 50) and torch.isfinite(logits).all()
    other = "rmsnorm" if kind == "layernorm" else "layernorm"
    assert shared_init_digest(model) == shared_init_digest(
        build_gpt(_cfg(other, placement, **choice), vocab_size=50, seed=0)
    )


def test_without_linear_biases_only_the_norms_may_have_one() -> None:
    rms = build_gpt(_cfg("rmsnorm", **LLAMA), vocab_size=50, seed=0)
    assert [n for n, _ in rms.named_parameters() if n.endswith("bias")] == []
    ln = build_gpt(_cfg("layernorm", **LLAMA), vocab_size=50, seed=0)
    biases = {n for n, _ in ln.named_parameters() if n.endswith("bias")}
    assert biases and biases <= norm_parameter_names(ln)
