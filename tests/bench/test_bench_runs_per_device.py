"""The runs-per-device benchmark's runs and its figures' wording (the timing needs a GPU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from ablate.bench.runs_per_device import Packed, first_variant_only, main, packing_settings
from ablate.core.load import load_experiment
from ablate.core.plan import plan_runs

LN_VS_RMS = Path(__file__).resolve().parents[2] / "experiments" / "ln_vs_rms.yaml"


def test_each_count_trains_the_same_seeds_of_one_variant_on_cuda_with_no_study() -> None:
    settings = packing_settings(4, runs=8, tokens=65536)
    experiment = first_variant_only(load_experiment(LN_VS_RMS, settings=settings))
    assert list(experiment.variants) == ["layernorm"] and experiment.seeds == list(range(8))
    assert experiment.max_lr is None and experiment.curve is None and experiment.search is None
    runtime = experiment.variants["layernorm"].runtime
    assert (runtime.accelerator, runtime.runs_per_device) == ("cuda", 4)
    specs = plan_runs(experiment)
    assert len(specs) == 8 and {s.config.train.tokens for s in specs} == {65536}
    one = first_variant_only(load_experiment(LN_VS_RMS, settings=packing_settings(1, 8, 65536)))
    assert [s.run_id for s in plan_runs(one)] == [s.run_id for s in specs]  # the same runs


def test_a_count_is_shown_against_one_run_per_device() -> None:
    alone = Packed(1, 8, 80.0, 8 * 4096, (3.1, 3.2))
    four = Packed(4, 8, 32.0, 8 * 4096, (3.1, 3.2))
    assert four.row(alone) == (
        " 4 per device:    32.0 s,  15.00 runs/min,      1024 tokens/s, 2.50x one per "
        "device; final losses equal"
    )
    assert Packed(8, 8, 20.0, 1, (3.1, 3.3)).row(alone).endswith("final losses other")


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has a GPU: the bench runs")
def test_without_a_gpu_it_says_so_and_exits_2(capsys: pytest.CaptureFixture) -> None:
    assert main([str(LN_VS_RMS)]) == 2
    assert "no CUDA device is available" in capsys.readouterr().err
