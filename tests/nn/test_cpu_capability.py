"""Short trainings under different CPU capabilities: what the pin fixes and what remains.

Each case is a fresh process (torch reads its CPU variables once), training the smoke model
(RMSNorm through the C++ kernel, and LayerNorm) for a few AdamW steps; it prints the losses'
bytes and the RMSNorm kernel's output bytes on a fixed input. Under ablate's pin the process
reports AVX2 and trains exactly as one given the same variables by hand. With AVX-512 ATen
(where the CPU has it) the kernel's bytes stay the same and the loss moves only in its last
digits: ATen's softmax and attention sum in vector-width order (docs/results.md).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import pytest

from ablate.core import numerics

SCRIPT = r"""
import hashlib, json, os, sys
from ablate.core.numerics import pin_cpu_numerics
if sys.argv[1] == "pin":
    pin_cpu_numerics()
import torch
from ablate.core.load import load_experiment
from ablate.nn.fast_norms import rms_norm_cpp
from ablate.nn.sources import build_model

torch.set_num_threads(1)
experiment = load_experiment("experiments/smoke.yaml")
gen = torch.Generator().manual_seed(0)
batches = torch.randint(0, 256, (6, 8, 33), generator=gen)
losses = {}
for name, cfg in experiment.variants.items():
    model = build_model(cfg.model, 256, 0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for batch in batches:
        logits = model(batch[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch[:, 1:].flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    losses[name] = loss.item()
x = torch.randn(64, 96, generator=gen, requires_grad=True)
w = torch.rand(96, generator=gen).requires_grad_()
y = rms_norm_cpp(x, w, 1e-5)
y.backward(torch.ones_like(y))
kernel = hashlib.sha256(b"".join(t.detach().numpy().tobytes() for t in (y, x.grad, w.grad)))
print(json.dumps({"capability": torch.backends.cpu.get_cpu_capability(), "losses": losses,
                  "kernel": kernel.hexdigest()}))
"""

CLEAN = {k: v for k, v in os.environ.items() if k not in numerics.PINNED_ENV}


def _train(mode: str, **env: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", SCRIPT, mode],
        env={**CLEAN, **env},
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


@functools.cache
def _pinned() -> dict:
    """The training under ablate's pin, once for the tests that compare with it."""
    return _train("pin")


needs_avx2 = pytest.mark.skipif(
    not numerics.is_x86_64() or "avx2" not in numerics.cpu_flags(), reason="an x86-64 AVX2 CPU"
)


@pytest.mark.slow
@needs_avx2
def test_the_pin_trains_exactly_as_the_same_variables_set_by_hand() -> None:
    pinned = _pinned()
    by_hand = _train("none", **numerics.PINNED_ENV)
    assert pinned["capability"] == "AVX2"
    assert pinned == by_hand


@pytest.mark.slow
@needs_avx2
@pytest.mark.skipif("avx512f" not in numerics.cpu_flags(), reason="an AVX-512 CPU")
def test_avx512_aten_keeps_the_kernel_bytes_and_moves_only_the_last_digits() -> None:
    pinned = _pinned()
    wide = _train("none", **{**numerics.PINNED_ENV, "ATEN_CPU_CAPABILITY": "avx512"})
    assert wide["capability"] == "AVX512"
    assert wide["kernel"] == pinned["kernel"]
    for name, loss in pinned["losses"].items():
        assert abs(wide["losses"][name] - loss) < 1e-4 * loss
