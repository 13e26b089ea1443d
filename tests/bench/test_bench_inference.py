"""The inference bench: prefill and TPOT per variant, mode, batch and prompt; the norm's share
from the profiler; int8 decoding stays within a stated loss tolerance of fp32."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent

from ablate.bench.inference import (
    InferenceSettings,
    inference_summary,
    inference_table,
    labelled_share,
    norm_share,
    prepared,
    quantized_loss,
)
from ablate.cli import main
from ablate.core.config import ModelConfig, NormConfig
from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.nn.decode import generate
from ablate.nn.model import build_gpt, next_token_loss, parameter_groups
from ablate.training.data import batch_offsets, gather_windows, load_corpus

INT8_TOLERANCE = 0.05  # nats: int8 weights may cost at most this much val loss here
SMALL = InferenceSettings(batches=(2,), prompts=(4,), new_tokens=3, rounds=1)


def test_every_variant_mode_batch_and_prompt_has_its_figures(tiny_experiment: Path) -> None:
    experiment = load_experiment(tiny_experiment)
    table = inference_table(experiment, torch.device("cpu"), SMALL, say=lambda _: None)
    assert len(table) == 2 * 3  # variants x modes
    assert set(table["mode"]) == {"fp32", "bf16", "int8"}
    for column in ("prefill_tokens_per_s", "tpot_ms", "peak_memory_mb"):
        assert (table[column] > 0).all(), column
    assert ((table["norm_share"] > 0) & (table["norm_share"] < 1)).all()
    assert (table["tpot_ms_min"] <= table["tpot_ms"]).all()
    lines = inference_summary(table, "layernorm")
    assert len(lines) == 3 and all("rmsnorm/layernorm TPOT" in line for line in lines)


def test_the_norm_share_is_zero_without_norms_and_large_with_slow_ones() -> None:
    prompt = torch.randint(0, 40, (1, 4), generator=torch.Generator().manual_seed(0))
    shares = {}
    for placement in ("none", "pre"):
        model_cfg = ModelConfig(
            d_model=32, n_layers=2, n_heads=2, seq_len=16, norm=NormConfig(placement=placement)
        )
        model = build_gpt(model_cfg, 40, seed=0).eval()
        shares[placement] = norm_share(model, model_cfg, prompt, 3, "fp32")
    assert shares["none"] == 0 and shares["pre"] > 0


def _range(name: str, start: int, end: int, kernel_us: int = 0, **kw: object) -> FunctionEvent:
    event = FunctionEvent(0, name, 0, start, end, use_device="cuda", **kw)
    if kernel_us:
        event.append_kernel(f"{name}_kernel", 0, kernel_us)
    return event


def test_on_a_gpu_the_share_is_of_kernel_time_not_of_launch_time() -> None:
    """A decode pass whose norm took 60 of 100 us on the CPU (launching) but launched 10 of
    the 50 us of kernel time: on a GPU the share is 0.2, counted once (the GPU-side copy of the
    norm's range is left out); on a CPU it is 0.6."""
    decode = _range("ablate.decode", 0, 100)
    norm = _range("ablate.norm", 10, 70, kernel_us=10)
    matmul = _range("aten::mm", 70, 90, kernel_us=40)
    for child in (norm, matmul):
        decode.append_cpu_child(child)
    gpu_copy = _range("ablate.norm", 200, 210, device_type=DeviceType.CUDA)
    events = [decode, norm, matmul, gpu_copy]
    assert labelled_share(events, on_device=True) == pytest.approx(10 / 50)
    assert labelled_share(events, on_device=False) == pytest.approx(60 / 100)
    assert math.isnan(labelled_share([norm], on_device=False))


def _trained(tiny_experiment: Path):
    """The tiny model after 150 AdamW steps in a plain loop (no Trainer), and its corpus."""
    cfg = next(iter(load_experiment(tiny_experiment).variants.values()))
    corpus = load_corpus(cfg.data, cfg.model.seq_len)
    model = build_gpt(cfg.model, corpus.vocab_size, seed=0)
    optimizer = torch.optim.AdamW(parameter_groups(model, 0.1), lr=3e-3)
    for row in batch_offsets(len(corpus.train), cfg.model.seq_len, 8, 150, seed=0):
        next_token_loss(model, gather_windows(corpus.train, row, cfg.model.seq_len)).backward()
        optimizer.step()
        optimizer.zero_grad()
    return model, corpus


def test_int8_decoding_runs_and_stays_within_the_stated_tolerance(tiny_experiment: Path) -> None:
    model, corpus = _trained(tiny_experiment)
    fp32, int8 = quantized_loss(model, corpus)
    assert fp32 < math.log(corpus.vocab_size) - 1.0  # it learned: the check means something
    assert abs(int8 - fp32) < INT8_TOLERANCE, (fp32, int8)
    prompt = gather_windows(corpus.val, torch.tensor([0]), 4)[:, :4]
    decoded = generate(prepared(model, "int8"), prompt, new_tokens=8)
    assert decoded.tokens.shape == (1, 12)


def test_cli_writes_the_inference_table_and_stores_it_beside_the_runs(
    tiny_experiment: Path, tmp_path: Path
) -> None:
    args = ["bench", "--inference", "--experiment", str(tiny_experiment), "--out"]
    code = main(
        [*args, str(tmp_path / "bench"), "--batches", "1", "--prompts", "4", "--new-tokens", "2"]
        + ["--repeats", "1", "--device", "cpu", "--results-dir", str(tmp_path / "results")]
    )
    assert code == 0
    table = pd.read_csv(tmp_path / "bench" / "inference.csv")
    assert set(table["variant"]) == {"layernorm", "rmsnorm"} and len(table) == 6
    stored = ExperimentFolder.of(tmp_path / "results", "tiny").read_inference()
    pd.testing.assert_frame_equal(stored, table)


def test_inference_needs_an_experiment(capsys: pytest.CaptureFixture) -> None:
    assert main(["bench", "--inference", "--experiment", "none"]) == 2
    assert "needs an --experiment" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--prompts", "12", "--new-tokens", "8"], "20 positions > model.seq_len 16"),
        (["--batches", "0"], "--batches"),
    ],
)
def test_inference_arguments_are_checked(
    tiny_experiment: Path, extra: list[str], message: str, capsys: pytest.CaptureFixture
) -> None:
    args = ["bench", "--inference", "--experiment", str(tiny_experiment), *extra]
    assert main(args) == 2
    assert message in capsys.readouterr().err


def test_inference_refuses_models_from_other_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = tmp_path / "own.yaml"
    path.write_text(
        "seeds: [0]\ndata: {source: builtin_text}\n"
        "model: {source: python, factory: 'experiments.own_model:build', seq_len: 64}\n"
        "train: {batch_size: 4, tokens: 640, warmup_steps: 1}\nvariants: {base: {}}\n"
    )
    assert main(["bench", "--inference", "--experiment", str(path)]) == 2
    assert "the KV-cache decoding path is ablate's own model's" in capsys.readouterr().err
