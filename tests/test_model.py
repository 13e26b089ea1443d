"""The decoder: structure, causality, weight tying, fair initialization across norm variants."""

from __future__ import annotations

import torch

from ablate.config import ModelConfig, NormConfig
from ablate.model import (
    build_model,
    count_parameters,
    norm_parameter_names,
    parameter_digests,
    shared_init_digest,
)
from ablate.norms import LayerNorm, RMSNorm


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
    model = build_model(_cfg(), vocab_size=50, seed=0).eval()
    idx = torch.randint(0, 50, (2, 16), generator=torch.Generator().manual_seed(0))
    logits = model(idx)
    assert logits.shape == (2, 16, 50)
    changed = idx.clone()
    changed[:, 10:] = (changed[:, 10:] + 1) % 50
    assert torch.equal(model(changed)[:, :10], logits[:, :10])
    assert not torch.allclose(model(changed)[:, 10:], logits[:, 10:])


def test_initial_loss_is_close_to_log_vocab() -> None:
    model = build_model(_cfg(), vocab_size=256, seed=0)
    batch = torch.randint(0, 256, (8, 17), generator=torch.Generator().manual_seed(1))
    assert abs(model.loss(batch).item() - torch.log(torch.tensor(256.0)).item()) < 0.1


def test_weight_tying_shares_the_embedding() -> None:
    tied = build_model(_cfg(tie_weights=True), 50, 0)
    untied = build_model(_cfg(tie_weights=False), 50, 0)
    assert tied.head.weight is tied.tok_emb.weight
    assert count_parameters(untied) - count_parameters(tied) == 50 * 32


def test_same_seed_gives_bitwise_identical_shared_parameters_across_norms() -> None:
    ln = build_model(_cfg("layernorm"), 50, seed=7)
    rms = build_model(_cfg("rmsnorm"), 50, seed=7)
    ln_params, rms_params = dict(ln.named_parameters()), dict(rms.named_parameters())
    shared = set(ln_params) & set(rms_params)
    assert set(ln_params) - shared == {n for n in norm_parameter_names(ln) if n.endswith("bias")}
    for name in shared:
        assert torch.equal(ln_params[name], rms_params[name]), name
    assert shared_init_digest(ln) == shared_init_digest(rms)
    other_seed = build_model(_cfg("layernorm"), 50, seed=8)
    assert shared_init_digest(other_seed) != shared_init_digest(ln)


def test_parameter_counts_differ_by_the_layernorm_biases() -> None:
    ln = build_model(_cfg("layernorm"), 50, 0)
    rms = build_model(_cfg("rmsnorm"), 50, 0)
    n_norms = 2 * 2 + 1  # two per block, plus the final norm
    assert count_parameters(ln) - count_parameters(rms) == n_norms * 32


def test_init_does_not_depend_on_the_global_rng() -> None:
    torch.manual_seed(1)
    a = parameter_digests(build_model(_cfg(), 50, seed=3))
    torch.manual_seed(2)
    b = parameter_digests(build_model(_cfg(), 50, seed=3))
    assert a == b


def test_placement_pre_and_post() -> None:
    pre = build_model(_cfg("rmsnorm", "pre"), 50, 0)
    post = build_model(_cfg("rmsnorm", "post"), 50, 0)
    assert isinstance(pre.norm_f, RMSNorm)
    assert isinstance(post.norm_f, torch.nn.Identity)
    # post-norm: a block's output is normalized, so its per-token mean square is ~1 (gain 1)
    x = torch.randn(2, 16, 32) * 5
    out = post.blocks[0](x)
    assert torch.allclose(out.pow(2).mean(-1), torch.ones(2, 16), atol=1e-3)
    assert not torch.allclose(pre.blocks[0](x).pow(2).mean(-1), torch.ones(2, 16), atol=1e-1)


def test_norm_kind_reaches_every_norm() -> None:
    ln = build_model(_cfg("layernorm"), 50, 0)
    norms = [m for m in ln.modules() if isinstance(m, LayerNorm | RMSNorm)]
    assert len(norms) == 5 and all(isinstance(m, LayerNorm) for m in norms)
