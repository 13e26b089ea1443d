"""The GPU script's parts that a CPU machine can check: the derived experiment and the refusal."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import REPO

from ablate.core.load import load_experiment
from ablate.gpu_check import gpu_experiment, main


def test_gpu_experiment_is_the_smoke_file_on_cuda_in_bf16(tmp_path: Path) -> None:
    path = gpu_experiment(REPO / "experiments" / "smoke.yaml", tmp_path / "g.yaml")
    gpu, cpu = load_experiment(path), load_experiment(REPO / "experiments" / "smoke.yaml")
    assert gpu.name == "smoke_gpu" and list(gpu.variants) == list(cpu.variants)
    for name, config in gpu.variants.items():
        assert config.runtime.accelerator == "cuda" and config.train.precision == "bf16-mixed"
        assert config.model == cpu.variants[name].model
    assert gpu.sweep == cpu.sweep and gpu.search == cpu.search and gpu.max_lr == cpu.max_lr


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a CPU machine")
def test_without_cuda_it_refuses_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--out", str(tmp_path / "gpu")]) == 2
    assert capsys.readouterr().err.strip() == "ablate.gpu_check: error: no CUDA device is available"
    assert not (tmp_path / "gpu").exists()


def test_it_runs_the_smoke_file_the_bench_and_the_inference_bench(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With CUDA (faked) and the commands recorded: three commands on CUDA, worst exit wins."""
    calls: list[list[str]] = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda _index: "fake")
    monkeypatch.setattr(
        "ablate.gpu_check.ablate_main", lambda argv: calls.append(argv) or len(calls) - 1
    )
    assert main(["--out", str(tmp_path)]) == 2
    assert [argv[:2] for argv in calls] == [
        ["run", str(tmp_path / "smoke_gpu.yaml")],
        ["bench", "--device"],
        ["bench", "--inference"],
    ]
    assert calls[2][2:4] == ["--device", "cuda"] and calls[2][-1] == str(tmp_path / "inference")
