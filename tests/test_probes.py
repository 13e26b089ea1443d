"""The divergence criterion on constructed losses; the model probes against direct computation;
the search's pruner as an early stop."""

from __future__ import annotations

import math
from pathlib import Path

import optuna
import pandas as pd
import pytest
import torch
from conftest import tiny_config

from ablate.core.config import StabilityConfig
from ablate.core.plan import RunSpec
from ablate.core.store import is_done
from ablate.nn.model import GPT, build_model
from ablate.training.callbacks import DivergenceMonitor, TrialPruner
from ablate.training.probes import ModelProbe
from ablate.training.run import execute_run


def _monitor(warmup: int, **criterion: object) -> DivergenceMonitor:
    """A monitor with an explicit threshold (default 5.0) and a window of 1 unless given."""
    settings = {"threshold": 5.0, "window": 1, **criterion}
    return DivergenceMonitor(StabilityConfig(**settings), math.log(256), warmup)


def test_non_finite_loss_diverges_at_any_step() -> None:
    monitor = _monitor(10)
    assert monitor.check(2, math.nan).reason.startswith("non-finite")
    assert monitor.check(3, math.inf).step == 3


def test_threshold_applies_only_after_warmup() -> None:
    monitor = _monitor(10)
    assert monitor.check(10, 9.0) is None
    found = monitor.check(11, 9.0)
    assert found is not None and found.step == 11 and "> threshold 5" in found.reason
    assert monitor.check(50, 4.9) is None


def test_threshold_from_the_first_step_when_after_warmup_is_off() -> None:
    monitor = _monitor(10, after_warmup=False)
    assert monitor.check(1, 6.0) is not None


def test_default_threshold_is_the_start_loss_plus_the_margin() -> None:
    l0 = math.log(256)
    above = DivergenceMonitor(StabilityConfig(window=1), l0, warmup_steps=0)
    assert above.check(1, 5.558) is None  # an untrained model a little above ln(256)
    assert above.threshold == pytest.approx(5.558 + 0.5)
    assert above.check(2, 6.0) is None and above.check(3, 6.1).step == 3
    below = DivergenceMonitor(StabilityConfig(window=1, divergence_margin=0.2), l0, 0)
    below.check(1, 5.0)  # a first loss under ln(V): the threshold starts from ln(V)
    assert below.threshold == pytest.approx(l0 + 0.2)


def test_windowed_threshold_ignores_a_one_batch_spike_but_not_a_blow_up() -> None:
    monitor = _monitor(2, window=5)
    for step, loss in enumerate([5.5, 4.0, 3.5, 3.4, 3.3], start=1):
        assert monitor.check(step, loss) is None
    assert monitor.check(6, 10.0) is None  # mean of the last 5: (3.5+3.4+3.3+10+...)/5 < 5
    assert monitor.check(7, 3.2) is None
    blow_up = _monitor(2, window=5)
    losses = [5.5, 4.0, 3.5, 6.0, 8.0]  # the mean of these five is 5.4
    stops = [blow_up.check(step, loss) for step, loss in enumerate(losses, start=1)]
    assert stops[:4] == [None] * 4
    assert stops[4] is not None and stops[4].step == 5 and "mean loss of 5 steps" in stops[4].reason


def _probe_step(model: GPT, batch: torch.Tensor, probe: ModelProbe) -> None:
    """One forward/backward with the probe attached, as the Trainer drives it."""
    probe.start(model, 1)
    model.zero_grad()
    model.loss(batch).backward()
    probe.gradients(model)
    probe.finish()


def _model_and_batch() -> tuple[GPT, torch.Tensor]:
    cfg = tiny_config(**{"model.n_layers": 2}).model
    model = build_model(cfg, vocab_size=50, seed=0)
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


def test_probes_do_not_change_training(tmp_path: Path) -> None:
    losses = {}
    for interval in (0, 1):
        spec = RunSpec("p", "ln", 0, tiny_config(**{"train.probes.interval": interval}))
        summary = execute_run(spec, tmp_path)
        metrics = pd.read_csv(tmp_path / "p" / spec.run_id / "metrics.csv")
        losses[interval] = metrics["train_loss"].tolist()
        probes = pd.read_csv(tmp_path / "p" / spec.run_id / "probes.csv")
        assert summary["probe_steps"] == (20 if interval else 0) == probes["step"].nunique()
    assert losses[0] == losses[1]  # bitwise: the hooks only read


def test_peak_memory_is_per_run_on_cpu() -> None:
    from ablate.training.memory import read_peak_rss_mb, reset_peak_rss

    block = torch.ones(64 * 2**20, dtype=torch.float32)  # 256 MiB, touched
    high = read_peak_rss_mb()
    del block
    assert reset_peak_rss()
    low = read_peak_rss_mb()
    assert high is not None and low is not None and high - low > 200


def test_attention_probe_can_be_switched_off() -> None:
    model, batch = _model_and_batch()
    probe = ModelProbe(interval=1, attention=False)
    _probe_step(model, batch, probe)
    quantities = {r[1] for r in probe.rows}
    assert "attn_logit_max" not in quantities and "resid_rms" in quantities


def test_attention_probe_sees_the_normalized_queries_and_keys() -> None:
    from ablate.core.config import ModelConfig, NormConfig
    from ablate.nn.model import build_model

    cfg = ModelConfig(
        d_model=16, n_layers=1, n_heads=2, seq_len=8, norm=NormConfig(kind="rmsnorm", qk_norm=True)
    )
    model = build_model(cfg, 32, seed=0)
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


def test_pruner_stops_a_poor_trial_as_a_stored_result(tmp_path: Path) -> None:
    study = optuna.create_study(pruner=optuna.pruners.MedianPruner(n_startup_trials=1))
    good = study.ask()
    for step in (10, 20):
        good.report(1.0, step)  # a trial far better than a 20-step tiny model can do
    study.tell(good, 1.0)
    trial = study.ask()
    spec = RunSpec("tiny", "layernorm", 0, tiny_config(), group="search")
    summary = execute_run(spec, tmp_path, stoppers=[TrialPruner(trial)])
    assert summary["status"] == "pruned" and summary["steps"] == 10
    assert summary["stopped_reason"] == "pruned by Optuna at step 10"
    assert summary["stable"] is None and summary["diverged_step"] is None
    assert is_done(tmp_path / "tiny" / spec.run_id)  # a result: reused, not retrained
