"""A run's bits depend on its spec, not on how it was scheduled: the same run trained at 1, 2 and
4 torch threads, beside other runs or alone, and resumed after a Ctrl-C, stores the same weights,
for every norm kind, QK-norm, LLaMA-style blocks and a litgpt model (docs/results.md).

The shapes are large enough that ATen splits the work across threads (1024 rows per norm call):
at these shapes torch's own CPU LayerNorm stores other weights at each thread count, which is
why ``model.norm.impl: cpp`` exists for LayerNorm and why a run's thread count is fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from conftest import ablate_process

from ablate.cli import main
from ablate.core.load import build_run_config, load_experiment
from ablate.core.plan import RunSpec, plan_runs
from ablate.training.run import execute_run

THREADS = (1, 2, 4)
STORED = re.compile(r"\]: (finished|collapsed|diverged)")  # a run's line once it is stored
MODEL = {"d_model": 64, "n_layers": 2, "n_heads": 4, "seq_len": 64}
TRAIN_EVAL = {
    "batch_size": 16,
    "tokens": 16 * 64 * 8,  # 8 steps: the bits diverge at the first step, learning is not needed
    "lr": 3e-3,
    "warmup_steps": 2,
    "eval_interval": 4,
    "eval_batches": 2,
}
VARIANTS: dict[str, dict[str, Any]] = {
    "layernorm": {"model.norm.kind": "layernorm", "model.norm.impl": "cpp"},
    "rmsnorm": {"model.norm.kind": "rmsnorm"},
    "dyt": {"model.norm.kind": "dyt"},
    "ln_qk": {"model.norm.kind": "layernorm", "model.norm.impl": "cpp", "model.norm.qk_norm": True},
    "rms_qk": {"model.norm.kind": "rmsnorm", "model.norm.qk_norm": True},
    "llama": {
        "model.norm.kind": "rmsnorm",
        "model.position": "rope",
        "model.mlp": "swiglu",
        "model.linear_bias": False,
    },
}


def _experiment(path: Path, steps: int = 8) -> Path:
    doc = {
        "name": "bits",
        "seeds": [0],
        "data": {"source": "builtin_text"},
        "model": MODEL,
        "train": {**TRAIN_EVAL, "tokens": 16 * 64 * steps},
        "variants": VARIANTS,
    }
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


def _weights_digest(run_dir: Path) -> str:
    weights = torch.load(run_dir / "model.pt", weights_only=True)
    data = b"".join(name.encode() + t.numpy().tobytes() for name, t in weights.items())
    return hashlib.sha256(data).hexdigest()


def gemm_bits_follow_threads() -> bool:
    """Whether this CPU's GEMM (MKL under ablate's pin) gives other bits at 2 or 4 threads for
    the runs' weight gradient here, (64 x 1024) @ (1024 x 256): on some CPUs MKL's AVX2 branch
    splits the 1024-long sum over threads, and then every run's bits follow the thread count
    (docs/results.md)."""
    before = torch.get_num_threads()
    rows = torch.randn(1024, 64, generator=torch.Generator().manual_seed(0))
    cols = torch.randn(1024, 256, generator=torch.Generator().manual_seed(1))
    try:
        products = []
        for threads in THREADS:
            torch.set_num_threads(threads)
            products.append(rows.t() @ cols)
    finally:
        torch.set_num_threads(before)
    return not all(torch.equal(products[0], p) for p in products[1:])


GEMM_SPLITS = (
    "MKL's GEMM on this CPU gives other bits at 2 and 4 threads (the weight gradient's sum is "
    "split over threads), so every run's bits follow the thread count here; set "
    "MKL_CBWR=AVX2,STRICT to test the rest (docs/results.md)"
)


@pytest.fixture
def threads_restored() -> Iterator[None]:
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def _digests_at_each_thread_count(
    spec: RunSpec, root: Path, counts: tuple[int, ...] = THREADS
) -> dict[int, str]:
    found = {}
    for threads in counts:
        torch.set_num_threads(threads)
        summary = execute_run(spec, root / f"threads{threads}")
        assert summary.status == "finished"
        found[threads] = _weights_digest(root / f"threads{threads}" / spec.experiment / spec.run_id)
    return found


@pytest.fixture(scope="module")
def every_kind(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[int, str]]:
    """{run id: {threads: weights digest}} of the experiment's runs at 1, 2 and 4 threads (at 1
    alone where the GEMM's bits follow the thread count: the others cannot match there)."""
    counts = (1,) if gemm_bits_follow_threads() else THREADS
    folder = tmp_path_factory.mktemp("bits")
    before = torch.get_num_threads()
    try:
        specs = plan_runs(load_experiment(_experiment(folder / "bits.yaml")))
        return {
            s.run_id: _digests_at_each_thread_count(s, folder / s.variant, counts) for s in specs
        }
    finally:
        torch.set_num_threads(before)


@pytest.mark.trains
def test_every_kind_stores_the_same_weights_at_1_2_and_4_threads(
    every_kind: dict[str, dict[int, str]],
) -> None:
    if gemm_bits_follow_threads():
        pytest.skip(GEMM_SPLITS)
    assert len(every_kind) == len(VARIANTS)
    for run_id, digests in every_kind.items():
        assert len(set(digests.values())) == 1, f"{run_id}: {digests}"


@pytest.mark.trains
@pytest.mark.usefixtures("threads_restored")
def test_at_these_shapes_torchs_layernorm_stores_other_weights_at_other_thread_counts(
    tmp_path: Path,
) -> None:
    # the positive control: the work is split across threads at these shapes, so the equal
    # digests above are a finding; should this fail, torch's CPU LayerNorm no longer depends
    # on the thread count, and docs/results.md should say so
    path = _experiment(tmp_path / "bits.yaml")
    spec = next(s for s in plan_runs(load_experiment(path)) if s.variant == "layernorm")
    torch_kernel = spec.config.model_copy(deep=True)
    torch_kernel.model.norm.impl = "torch"
    digests = _digests_at_each_thread_count(RunSpec("bits", "ln_torch", 0, torch_kernel), tmp_path)
    assert len(set(digests.values())) > 1, digests


@pytest.mark.trains
@pytest.mark.usefixtures("threads_restored")
def test_a_litgpt_model_stores_the_same_weights_at_1_2_and_4_threads(tmp_path: Path) -> None:
    pytest.importorskip("litgpt")
    if gemm_bits_follow_threads():
        pytest.skip(GEMM_SPLITS)
    litgpt = {"name": "pythia-14m", "n_layer": 2, "n_embd": 64, "n_head": 4}
    litgpt["norm_class_name"] = "RMSNorm"
    doc = {
        "data": {"source": "builtin_text"},
        "model": {"source": "litgpt", "seq_len": 64, "litgpt": litgpt},
        "train": TRAIN_EVAL,
    }
    # litgpt's RMSNorm is elementwise ops and a per-row mean; its LayerNorm is torch's, whose
    # bits follow the thread count like ``impl: torch`` (the run's thread count is fixed)
    spec = RunSpec("bits", "litgpt", 0, build_run_config(doc, "test"))
    digests = _digests_at_each_thread_count(spec, tmp_path)
    assert len(set(digests.values())) == 1, digests


def _interrupt_after_first_finished(path: Path, root: Path, cwd: Path) -> int:
    """``ablate run`` training in its own process, Ctrl-C to its process group once a run is
    stored; returns the exit code."""
    args = ("run", str(path), "--workers", "1", "--results-dir", str(root))
    proc = ablate_process(
        *args, "--report-dir", str(cwd / "reports"), cwd=cwd, start_new_session=True
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        if STORED.search(line):
            os.killpg(proc.pid, signal.SIGINT)
            break
    proc.communicate(timeout=120)
    return proc.returncode


@pytest.mark.trains
@pytest.mark.slow
@pytest.mark.usefixtures("unrendered_figures")  # the weights are the point, not the report
def test_runs_resumed_after_ctrl_c_store_the_weights_of_runs_trained_in_one_go(
    tmp_path: Path, every_kind: dict[str, dict[int, str]]
) -> None:
    path = _experiment(tmp_path / "bits.yaml")
    root = tmp_path / "results"
    code = _interrupt_after_first_finished(path, root, tmp_path)
    summaries = [json.loads(p.read_text()) for p in (root / "bits").glob("*/summary.json")]
    finished = {s["run_id"] for s in summaries if s["status"] == "finished"}
    assert code in (130, -signal.SIGINT) and 0 < len(finished) < len(every_kind)
    again = ["run", str(path), "--workers", "1", "--results-dir", str(root)]
    assert main([*again, "--report-dir", str(tmp_path / "reports")]) == 0
    for run_id, digests in every_kind.items():  # each run trained in one go, at 1 thread
        assert _weights_digest(root / "bits" / run_id) == digests[1], run_id
