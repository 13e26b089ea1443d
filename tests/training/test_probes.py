"""The model probes equal a direct computation, count non-finite values, follow their schedule and
never change training."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import tiny_config

from ablate.core.config import ModelConfig
from ablate.core.plan import RunSpec
from ablate.nn.model import GPT, build_gpt, next_token_loss
from ablate.nn.sources import build_model
from ablate.training.probes import ModelProbe
from ablate.training.run import execute_run

REPO = Path(__file__).resolve().parents[2]


def _probe_step(model: GPT, batch: torch.Tensor, probe: ModelProbe) -> None:
    """One forward/backward with the probe attached, as the Trainer drives it."""
    probe.start(model, 1)
    model.zero_grad()
    next_token_loss(model, batch).backward()
    probe.gradients(model)
    probe.finish()


def _model_and_batch() -> tuple[GPT, torch.Tensor]:
    cfg = tiny_config(**{"model.n_layers": 2}).model
    model = build_gpt(cfg, vocab_size=50, seed=0)
    batch = torch.randint(0, 50, (3, cfg.seq_len + 1), generator=torch.Generator().manual_seed(1))
    return model, batch


def _value(rows: list, quantity: str, site: str) -> float:
    found = [r[4] for r in rows if r[1] == quantity and r[2] == site]
    assert len(found) == 1, (quantity, site, found)
    return found[0]


def test_probe_values_equal_direct_computation() -> None:
    model, batch = _model_and_batch()
    probe = ModelProbe(interval=1)
    _probe_step(model, batch, probe)
    # direct: run the model by hand, keeping every intermediate
    with torch.no_grad():
        idx = batch[:, :-1]
        x = model.tok_emb(idx) + model.pos_emb(torch.arange(idx.shape[1]))
        for i, block in enumerate(model.blocks):
            assert _value(probe.rows, "norm_in_rms", f"blocks.{i}.norm_attn") == pytest.approx(
                float(x.pow(2).mean().sqrt()), rel=1e-5
            )
            h = block.norm_attn(x)
            assert _value(probe.rows, "norm_rms", f"blocks.{i}.norm_attn") == pytest.approx(
                float(h.pow(2).mean().sqrt()), rel=1e-5
            )
            q, k, _ = block.attn.qkv(h).split(16, dim=2)
            q = q.view(3, -1, 2, 8).transpose(1, 2)
            k = k.view(3, -1, 2, 8).transpose(1, 2)
            scores = q @ k.transpose(-1, -2) / math.sqrt(8)
            causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
            expected = float(scores.masked_fill(~causal, -math.inf).max())
            assert _value(probe.rows, "attn_logit_max", f"blocks.{i}.attn") == pytest.approx(
                expected, rel=1e-5
            )
            x = block(x)
            assert _value(probe.rows, "resid_rms", f"blocks.{i}") == pytest.approx(
                float(x.pow(2).mean().sqrt()), rel=1e-5
            )
            s2 = x.pow(2).mean(dim=(0, 1))  # each feature's mean square over all positions
            assert _value(probe.rows, "resid_kurtosis", f"blocks.{i}") == pytest.approx(
                float(s2.pow(2).mean() / s2.mean().pow(2)), rel=1e-5
            )
            grads = torch.cat([p.grad.flatten() for p in block.parameters()])
            assert _value(probe.rows, "grad_norm", f"blocks.{i}") == pytest.approx(
                float(grads.norm()), rel=1e-5
            )
        logits = model.head(model.norm_f(x))
        assert _value(probe.rows, "logit_max_abs", "head") == pytest.approx(
            float(logits.abs().max()), rel=1e-5
        )
        assert _value(probe.rows, "logsumexp_mean", "head") == pytest.approx(
            float(torch.logsumexp(logits, -1).mean()), rel=1e-5
        )
    assert all(r[4] == 0 for r in probe.rows if r[1].startswith("nonfinite"))
    assert probe.probe_steps == 1 and probe.nonfinite == {"activations": 0, "grads": 0}


def test_feature_kurtosis_is_one_for_alike_features_and_grows_with_an_outlier() -> None:
    from ablate.training.probes import feature_kurtosis

    g = torch.Generator().manual_seed(0)
    signs = torch.randint(0, 2, (4, 32, 64), generator=g).float() * 2 - 1
    assert float(feature_kurtosis(signs)) == pytest.approx(1.0)  # every feature's RMS is 1
    outlier = signs.clone()
    outlier[..., 0] *= 10.0  # one feature of 64 with 10x the RMS: (1e4 + 63)/64 / ((163)/64)^2
    assert float(feature_kurtosis(outlier)) == pytest.approx((1e4 + 63) * 64 / 163**2)


def test_non_finite_values_are_counted() -> None:
    model, batch = _model_and_batch()
    with torch.no_grad():
        model.blocks[1].mlp.fc.weight[0, :3] = math.inf  # one hidden unit overflows
    probe = ModelProbe(interval=1)
    _probe_step(model, batch, probe)
    counts = {(q, s): v for _, q, s, _, v in probe.rows if q.startswith("nonfinite") and v > 0}
    assert ("nonfinite_activations", "blocks.0") not in counts  # before the bad weight
    assert counts[("nonfinite_activations", "blocks.1")] > 0
    assert counts[("nonfinite_activations", "head")] > 0


def test_probe_schedule_first_every_interval_and_last() -> None:
    probe = ModelProbe(interval=25)
    assert [s for s in range(1, 101) if probe.due(s, 90)] == [1, 25, 50, 75, 90, 100]
    assert not any(ModelProbe(interval=0).due(s, 10) for s in range(1, 11))


@pytest.mark.trains
def test_probes_do_not_change_training(tmp_path: Path) -> None:
    losses = {}
    for interval in (0, 1):
        spec = RunSpec("p", "ln", 0, tiny_config(**{"train.probes.interval": interval}))
        summary = execute_run(spec, tmp_path)
        metrics = pd.read_csv(tmp_path / "p" / spec.run_id / "metrics.csv")
        losses[interval] = metrics["train_loss"].tolist()
        probes = pd.read_csv(tmp_path / "p" / spec.run_id / "probes.csv")
        assert summary.probe_steps == (20 if interval else 0) == probes["step"].nunique()
    assert losses[0] == losses[1]  # bitwise: the hooks only read


def test_attention_probe_can_be_switched_off() -> None:
    model, batch = _model_and_batch()
    probe = ModelProbe(interval=1, attention=False)
    _probe_step(model, batch, probe)
    quantities = {r[1] for r in probe.rows}
    assert "attn_logit_max" not in quantities and "resid_rms" in quantities


def test_attention_probe_sees_the_normalized_queries_and_keys() -> None:
    from ablate.core.config import ModelConfig, NormConfig
    from ablate.nn.model import build_gpt

    cfg = ModelConfig(
        d_model=16, n_layers=1, n_heads=2, seq_len=8, norm=NormConfig(kind="rmsnorm", qk_norm=True)
    )
    model = build_gpt(cfg, 32, seed=0)
    with torch.no_grad():
        model.blocks[0].attn.q_norm.weight.fill_(3.0)  # scales every logit by 3
    batch = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(0))
    probe = ModelProbe(interval=1)
    _probe_step(model, batch, probe)
    with torch.no_grad():
        x = model.tok_emb(batch[:, :-1]) + model.pos_emb(torch.arange(8))
        q, k, _ = model.blocks[0].attn.qkv(model.blocks[0].norm_attn(x)).split(16, dim=2)
        q, k = (z.view(2, 8, 2, 8).transpose(1, 2) for z in (q, k))  # (B, H, T, d_head)

        def rms_normalized(z: torch.Tensor, gain: float) -> torch.Tensor:  # by the formula
            return gain * z / torch.sqrt(z.pow(2).mean(-1, keepdim=True) + 1e-5)

        q, k = rms_normalized(q, 3.0), rms_normalized(k, 1.0)
        scores = q @ k.transpose(-1, -2) / math.sqrt(8)
        causal = torch.ones(8, 8, dtype=torch.bool).tril()
        expected = float(scores.masked_fill(~causal, -math.inf).max())
    assert _value(probe.rows, "attn_logit_max", "blocks.0.attn") == pytest.approx(
        expected, rel=1e-5
    )
    # q and k are RMS-normalized per head: |q.k| <= 3 * d_head / sqrt(d_head)
    assert 0 < expected <= 3 * math.sqrt(8) + 1e-4


def test_the_attention_probe_sees_rotated_queries_and_keys_in_a_llama_style_block() -> None:
    from ablate.core.config import ModelConfig, NormConfig

    cfg = ModelConfig(
        d_model=16,
        n_layers=1,
        n_heads=2,
        seq_len=8,
        mlp="swiglu",
        position="rope",
        linear_bias=False,
        norm=NormConfig(kind="rmsnorm"),
    )
    model = build_gpt(cfg, 32, seed=0)
    batch = torch.randint(0, 32, (2, 9), generator=torch.Generator().manual_seed(0))
    probe = ModelProbe(interval=1)
    _probe_step(model, batch, probe)
    with torch.no_grad():
        x = model.tok_emb(batch[:, :-1])  # no position embedding: rope
        q, k, _ = model.blocks[0].attn.qkv(model.blocks[0].norm_attn(x)).split(16, dim=2)
        q, k = (z.view(2, 8, 2, 8).transpose(1, 2) for z in (q, k))
        # the rotation by the formula: pairs (i, i + 4) turned by position x 10000^(-i/4)
        angle = torch.arange(8.0)[:, None] * 10000.0 ** (-torch.arange(0.0, 8, 2) / 8)

        def rotated(z: torch.Tensor) -> torch.Tensor:
            a, b = z[..., :4], z[..., 4:]
            return torch.cat(
                (a * angle.cos() - b * angle.sin(), a * angle.sin() + b * angle.cos()), -1
            )

        scores = rotated(q) @ rotated(k).transpose(-1, -2) / math.sqrt(8)
        causal = torch.ones(8, 8, dtype=torch.bool).tril()
        expected = float(scores.masked_fill(~causal, -math.inf).max())
    assert _value(probe.rows, "attn_logit_max", "blocks.0.attn") == pytest.approx(
        expected, rel=1e-5
    )
    assert _value(probe.rows, "grad_norm", "embedding") > 0  # the token embedding alone


def _sites(rows: list) -> set[tuple[str, str, int]]:
    return {(quantity, site, layer) for _, quantity, site, layer, _ in rows}


def test_the_probes_attach_to_a_litgpt_model() -> None:
    pytest.importorskip("litgpt")
    litgpt = {"name": "pythia-14m", "n_layer": 2, "n_embd": 32, "n_head": 4}
    cfg = ModelConfig(source="litgpt", seq_len=16, litgpt={**litgpt, "norm_class_name": "RMSNorm"})
    model = build_model(cfg, 50, seed=0)
    _, batch = _model_and_batch()
    probe = ModelProbe(interval=1)
    _probe_step(model, batch, probe)
    sites = _sites(probe.rows)
    for i in range(2):
        block = f"transformer.h.{i}"
        assert {("resid_rms", block, i), ("grad_norm", block, i)} <= sites
        assert ("attn_logit_max", f"{block}.attn", i) in sites  # litgpt's sdpa method
        for norm in ("norm_1", "norm_2"):
            assert {
                ("norm_in_rms", f"{block}.{norm}", i),
                ("norm_rms", f"{block}.{norm}", i),
            } <= sites
    assert {("norm_rms", "transformer.ln_f", 2), ("grad_norm", "embedding", -1)} <= sites
    assert {("logit_max_abs", "head", -1), ("logsumexp_mean", "head", -1)} <= sites
    with torch.no_grad():  # pythia has no position embedding: block 0's first norm sees wte
        x = model.transformer.wte(batch[:, :-1])
        logits = model(batch[:, :-1])
    assert _value(probe.rows, "norm_in_rms", "transformer.h.0.norm_1") == pytest.approx(
        float(x.pow(2).mean().sqrt()), rel=1e-5
    )
    assert _value(probe.rows, "logit_max_abs", "head") == pytest.approx(
        float(logits.abs().max()), rel=1e-5
    )


def test_the_probes_attach_to_a_users_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(REPO)
    cfg = ModelConfig(
        source="python",
        factory="experiments.own_model:build",
        d_model=16,
        n_layers=2,
        n_heads=2,
        seq_len=16,
    )
    model = build_model(cfg, 50, seed=0)
    _, batch = _model_and_batch()
    probe = ModelProbe(interval=1)
    _probe_step(model, batch, probe)
    sites = _sites(probe.rows)
    assert {("attn_logit_max", "layers.1.attn", 1), ("norm_in_rms", "layers.1.norm", 1)} <= sites
    assert {
        ("norm_rms", "norm", 2),
        ("grad_norm", "layers.0", 0),
        ("grad_norm", "embedding", -1),
    } <= sites
