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
