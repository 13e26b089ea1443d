"""The benchmark on tiny shapes: every implementation timed, ratios and bandwidth consistent."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch
from conftest import write_experiment

from ablate.bench.speed import KernelCase, flops_per_token, kernel_rows, kernel_table, step_table
from ablate.cli import main
from ablate.core.load import load_experiment
from ablate.nn.model import build_gpt


def test_kernel_rows_cover_every_implementation() -> None:
    case = KernelCase(tokens=64, dim=32, dtype="fp32", device=torch.device("cpu"))
    table = kernel_table(kernel_rows(case, threads=1, compile_too=False, min_run_time=0.01))
    assert set(zip(table["kind"], table["impl"], strict=True)) == {
        ("layernorm", "torch"),
        ("layernorm", "reference"),
        ("layernorm", "cpp"),
        ("rmsnorm", "torch"),
        ("rmsnorm", "reference"),
        ("rmsnorm", "cpp"),
    }
    assert table["error"].isna().all() and (table["fwd_bwd_ms"] > 0).all()
    ln = table[(table["kind"] == "layernorm") & (table["impl"] == "torch")].iloc[0]
    assert ln["vs_ln_torch"] == 1.0
    cpp = table[(table["kind"] == "rmsnorm") & (table["impl"] == "cpp")].iloc[0]
    assert cpp["vs_ln_torch"] == pytest.approx(cpp["fwd_bwd_ms"] / ln["fwd_bwd_ms"])
    assert cpp["fwd_bwd_gbps"] == pytest.approx(5 * 64 * 32 * 4 / (cpp["fwd_bwd_ms"] / 1e3) / 1e9)


def test_flops_per_token_follows_the_nanogpt_formula(tiny_experiment: Path) -> None:
    cfg = next(iter(load_experiment(tiny_experiment).variants.values()))
    model = build_gpt(cfg.model, 256, 0)
    params = sum(p.numel() for p in model.parameters())
    assert flops_per_token(model, 16) == 6 * params + 12 * 1 * 16 * 16


def test_step_table_times_every_variant(tiny_experiment: Path) -> None:
    steps = step_table(load_experiment(tiny_experiment), torch.device("cpu"), 3, 1, 1)
    assert list(steps["variant"]) == ["layernorm", "rmsnorm"]
    assert list(steps["norm_impl"]) == ["torch", "cpp"]
    assert (steps["step_ms"] > 0).all() and (steps["mfu"] > 0).all() and (steps["mfu"] < 1).all()
    assert (steps["peak_memory_mb"] > 50).all()


@pytest.mark.slow
def test_cli_bench_writes_its_files_and_rejects_bad_lists(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    experiment = write_experiment(tmp_path / "t.yaml")
    args = ["bench", "--dims", "16,32", "--tokens", "32", "--dtypes", "bf16", "--no-compile"]
    args += ["--min-run-time", "0.01", "--steps", "2", "--repeats", "1", "--threads", "1"]
    assert main([*args, "--experiment", str(experiment), "--out", str(tmp_path / "b")]) == 0
    kernels = pd.read_csv(tmp_path / "b" / "kernels.csv")
    assert len(kernels) == 12 and set(kernels["dim"]) == {16, 32}  # 6 impls x 2 dims
    assert (tmp_path / "b" / "kernels.png").stat().st_size > 10_000
    assert len(pd.read_csv(tmp_path / "b" / "steps.csv")) == 2
    assert main(["bench", "--dims", "16,x"]) == 2
    assert "--dims: '16,x' is not a comma-separated list" in capsys.readouterr().err
    assert main(["bench", "--dtypes", "fp8"]) == 2
