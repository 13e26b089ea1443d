"""``ablate bench``: norm-kernel time and bandwidth, end-to-end step time, throughput, memory, MFU.

Two parts, both printed as tables and written as CSV (plus a figure) to ``--out``:

1. **Kernels.** Every LayerNorm and RMSNorm implementation the project has (``torch``,
   ``reference``, ``cpp`` for both norms on CPU, and each norm's reference formula under
   ``torch.compile`` unless ``--no-compile``) across hidden sizes, token counts and dtypes:
   forward and forward+backward time (``torch.utils.benchmark``'s blocked autorange, median)
   and effective bandwidth = nominal bytes moved / time, where forward moves x in and y out
   (2·N·D elements) and forward+backward adds the gradient in, x again and dx out (5·N·D).
   ``rms/ln`` is each RMSNorm row's fwd+bwd time over ``torch`` LayerNorm's at the same shape.
   Each case is measured in ``--rounds`` rounds (all implementations in turn, then again) and
   the table keeps the median round, so slow drift of a shared machine hits every row alike.
2. **Steps** (``--experiment FILE``): per variant, step time (forward, backward, AdamW) on the
   file's model and batches, tokens/s, peak memory and MFU against the machine's matmul peak
   measured in the same process (a square matmul in the step's dtype). FLOPs per token follow
   nanoGPT / PaLM: 6·parameters + 12·layers·seq_len·d_model.

Runs on CPU, and on CUDA when ``--device cuda`` (or ``auto`` finds one).

    ablate bench --dims 128,1024,4096 --experiment experiments/ln_vs_rms.yaml
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
import torch.utils.benchmark as benchmark
from matplotlib.figure import Figure
from rich.console import Console
from torch import nn

from ablate.core import folders
from ablate.core.config import NormConfig, RunConfig
from ablate.core.experiment import Experiment
from ablate.nn.anatomy import blocks_of, width_of
from ablate.nn.fast_norms import available, cpp_unavailable_reason
from ablate.nn.model import count_parameters
from ablate.nn.norms import build_norm, used_impls
from ablate.nn.sources import build_model
from ablate.report.figures import legend_outside, readable_log_ticks
from ablate.training.data import load_corpus
from ablate.training.memory import read_peak_memory, reset_peak_memory
from ablate.training.timing import time_steps

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}
IMPLS = {"layernorm": ("torch", "reference", "cpp"), "rmsnorm": ("torch", "reference", "cpp")}
Kernel = Callable[[torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class KernelCase:
    """One shape and dtype on one device."""

    tokens: int
    dim: int
    dtype: str
    device: torch.device


def _median_s(fn: Callable[[], object], threads: int, min_run_time: float) -> float:
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    return timer.blocked_autorange(min_run_time=min_run_time).median


def norm_kernel(kind: str, impl: str, dim: int, device: torch.device, compiled: bool) -> Kernel:
    """The norm as a function of its input; ``compiled`` wraps the reference in torch.compile."""
    cfg = NormConfig(kind=kind, impl="reference" if compiled else impl)
    norm = build_norm(cfg, dim).to(device)
    if compiled:
        torch.compiler.reset()  # every shape its own graph, never the recompile limit's eager
        return torch.compile(norm.reference, dynamic=False)
    return norm


def time_kernel(
    kernel: Kernel, case: KernelCase, threads: int, min_run_time: float
) -> tuple[float, float]:
    """(forward s, forward+backward s) of ``kernel`` on a (tokens, dim) input."""
    dtype = DTYPES[case.dtype]
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(case.tokens, case.dim, generator=gen).to(case.device, dtype)
    grad = torch.randn(case.tokens, case.dim, generator=gen).to(case.device, dtype)
    xg = x.clone().requires_grad_()

    def forward() -> None:
        with torch.no_grad():
            kernel(x)

    def forward_backward() -> None:
        kernel(xg).backward(grad)

    forward_backward()  # warm-up (and compilation)
    sync = torch.cuda.synchronize if case.device.type == "cuda" else (lambda: None)
    sync()
    return (
        _median_s(forward, threads, min_run_time),
        _median_s(forward_backward, threads, min_run_time),
    )


def kernel_rows(
    case: KernelCase, threads: int, compile_too: bool, min_run_time: float
) -> list[dict[str, object]]:
    """One row per implementation of both norms at ``case``."""
    rows = []
    element = torch.finfo(DTYPES[case.dtype]).bits // 8
    elements = case.tokens * case.dim
    for kind, impls in IMPLS.items():
        names = [*impls, "compiled"] if compile_too else list(impls)
        for name in names:
            row: dict[str, object] = {"kind": kind, "impl": name, **case.__dict__}
            row["device"] = case.device.type
            if name == "cpp" and not available("cpp", case.device):
                rows.append({**row, "error": cpp_unavailable_reason() or "CPU only"})
                continue
            try:
                kernel = norm_kernel(kind, name, case.dim, case.device, name == "compiled")
                fwd, both = time_kernel(kernel, case, threads, min_run_time)
            except Exception as exc:  # e.g. torch.compile without a compiler: a row, not a crash
                rows.append({**row, "error": f"{type(exc).__name__}: {str(exc)[:120]}"})
                continue
            rows.append(
                {
                    **row,
                    "fwd_ms": 1000 * fwd,
                    "fwd_bwd_ms": 1000 * both,
                    "fwd_gbps": 2 * elements * element / fwd / 1e9,
                    "fwd_bwd_gbps": 5 * elements * element / both / 1e9,
                    "error": None,
                }
            )
    return rows


def kernel_benchmark(
    cases: list[KernelCase],
    threads: int,
    compile_too: bool,
    min_run_time: float,
    rounds: int,
    progress: Callable[[KernelCase], None] = lambda case: None,
) -> pd.DataFrame:
    """Every case measured in ``rounds`` rounds, as :func:`kernel_table`."""
    rows = []
    for case in cases:
        progress(case)
        for _ in range(rounds):
            rows += kernel_rows(case, threads, compile_too, min_run_time)
    return kernel_table(rows)


def kernel_table(rows: list[dict[str, object]]) -> pd.DataFrame:
    """Median over rounds per implementation and case, with ``vs_ln_torch``: fwd+bwd time
    over torch LayerNorm's at the same shape."""
    keys = ["tokens", "dim", "dtype", "device"]
    raw = pd.DataFrame(rows)
    measured = ["fwd_ms", "fwd_bwd_ms", "fwd_gbps", "fwd_bwd_gbps"]
    raw[measured] = raw.reindex(columns=measured).astype(float)
    grouped = raw.groupby(["kind", "impl", *keys], sort=False, dropna=False)
    frame = grouped[measured].median().join(grouped.size().rename("rounds"))
    frame = frame.join(grouped["error"].first()).reset_index()
    ln = frame[(frame["kind"] == "layernorm") & (frame["impl"] == "torch")]
    ln = ln[[*keys, "fwd_bwd_ms"]].rename(columns={"fwd_bwd_ms": "ln_fwd_bwd_ms"})
    frame = frame.merge(ln, on=keys, how="left")
    frame["vs_ln_torch"] = frame["fwd_bwd_ms"] / frame["ln_fwd_bwd_ms"]
    return frame.drop(columns="ln_fwd_bwd_ms")


def matmul_peak_flops(device: torch.device, dtype: torch.dtype, threads: int) -> float:
    """FLOP/s of a 2048³ matmul in ``dtype``: the machine's practical peak for MFU."""
    n = 2048
    a = torch.randn(n, n, device=device, dtype=dtype)
    b = torch.randn(n, n, device=device, dtype=dtype)
    seconds = _median_s(lambda: torch.mm(a, b), threads, 0.5)
    return 2 * n**3 / seconds


def flops_per_token(model: nn.Module, seq_len: int) -> float:
    """Training FLOPs per token: 6·N + 12·L·T·D (nanoGPT's estimate_mfu, PaLM appendix B),
    L the blocks and D the residual width of a model from any source."""
    n_layers = len(blocks_of(model)[1])
    return 6 * count_parameters(model) + 12 * n_layers * seq_len * width_of(model)


def time_training_steps(
    cfg: RunConfig, seed: int, device: torch.device, steps: int
) -> dict[str, object]:
    """Median step time, tokens/s, peak memory and the norm kernels of one variant."""
    corpus = load_corpus(cfg.data, cfg.model.seq_len)
    model = build_model(cfg.model, corpus.vocab_size, seed).to(device)
    reset_peak_memory(device)
    step_s = time_steps(model, cfg, corpus, steps, device)
    return {
        "step_ms": 1000 * step_s,
        "tokens_per_s": cfg.tokens_per_step() / step_s,
        "peak_memory_mb": read_peak_memory(device)[0],
        "flops_per_token": flops_per_token(model, cfg.model.seq_len),
        "norm_impl": ",".join(used_impls(model)),
        "n_params": count_parameters(model),
    }


def step_table(
    experiment: Experiment, device: torch.device, steps: int, threads: int, repeats: int
) -> pd.DataFrame:
    """Per variant, alternating over ``repeats`` rounds: step time, tokens/s, memory, MFU."""
    rows = []
    peaks = {}
    for _ in range(repeats):
        for name, cfg in experiment.variants.items():
            cfg = cfg.model_copy(deep=True)
            cfg.runtime.accelerator = device.type
            row = time_training_steps(cfg, experiment.seeds[0], device, steps)
            dtype = torch.float32 if cfg.train.precision == "32" else torch.bfloat16
            if dtype not in peaks:
                peaks[dtype] = matmul_peak_flops(device, dtype, threads)
            achieved = float(row["flops_per_token"]) * float(row["tokens_per_s"])
            rows.append(
                {
                    "variant": name,
                    **row,
                    "matmul_peak_gflops": peaks[dtype] / 1e9,
                    "mfu": achieved / peaks[dtype],
                }
            )
    frame = pd.DataFrame(rows)
    numeric = ["step_ms", "tokens_per_s", "peak_memory_mb", "mfu", "matmul_peak_gflops"]
    summary = frame.groupby("variant", sort=False)[numeric].median().reset_index()
    firsts = frame.groupby("variant", sort=False)[["norm_impl", "n_params"]].first()
    return summary.merge(firsts.reset_index(), on="variant").assign(repeats=repeats)


def ratio_figure(table: pd.DataFrame, path: Path) -> Path:
    """RMSNorm fwd+bwd time over torch LayerNorm's against hidden size, per impl and dtype."""
    dtypes = sorted(table["dtype"].unique())
    fig = Figure(figsize=(5.5 * len(dtypes), 4.2))
    axes = fig.subplots(1, len(dtypes), squeeze=False)[0]
    for ax, dtype in zip(axes, dtypes, strict=True):
        mine = table[(table["dtype"] == dtype) & table["vs_ln_torch"].notna()]
        for (kind, impl), line in mine.groupby(["kind", "impl"]):
            style = "-" if kind == "rmsnorm" else "--"
            line = line.groupby("dim")["vs_ln_torch"].median()
            ax.plot(line.index, line.values, style, marker="o", label=f"{kind} {impl}")
        ax.axhline(1.0, color="grey", linewidth=1)
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        readable_log_ticks(ax, "y")  # ratios near 1: plain numbers, not 6×10⁻¹
        ax.set_xlabel("hidden size")
        ax.set_ylabel("fwd+bwd time / torch LayerNorm's")
        ax.set_title(f"{dtype}: norm kernels (lower is faster)")
        ax.grid(alpha=0.3, which="both")
    legend_outside(axes[-1])  # one legend for the dtypes' panels, off the markers
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def write_outputs(out: Path, kernels: pd.DataFrame, steps: pd.DataFrame | None) -> list[Path]:
    """kernels.csv, steps.csv and kernels.png in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    written = [out / "kernels.csv", ratio_figure(kernels, out / "kernels.png")]
    folders.write_frame_atomic(out / "kernels.csv", kernels)
    if steps is not None:
        folders.write_frame_atomic(out / "steps.csv", steps)
        written.append(out / "steps.csv")
    return written


@dataclass(frozen=True)
class BenchSettings:
    """What ``ablate bench`` measures: kernel shapes and dtypes, step rounds, where it writes."""

    dims: list[int]
    tokens: list[int]
    dtypes: list[str]
    steps: int
    repeats: int
    rounds: int
    min_run_time: float
    compile: bool
    out: Path


def run_benchmarks(
    experiment: Experiment | None,
    device: torch.device,
    threads: int,
    settings: BenchSettings,
    console: Console,
) -> list[Path]:
    """The step table of ``experiment``'s variants (first: the process's memory is not yet
    grown by the large kernels), then every kernel case; tables printed, files written."""
    console.print(f"device {device.type}, torch {torch.__version__}, {threads} thread(s)")
    steps = None
    if experiment is not None:
        console.print(f"training steps: {experiment.name}, {settings.repeats} round(s)")
        steps = step_table(experiment, device, settings.steps, threads, settings.repeats)
        console.print(steps.to_markdown(index=False, floatfmt=".4g"), markup=False, highlight=False)
    cases = [
        KernelCase(n, dim, dt, device)
        for dt in settings.dtypes
        for n in settings.tokens
        for dim in settings.dims
    ]
    kernels = kernel_benchmark(
        cases,
        threads,
        settings.compile,
        settings.min_run_time,
        settings.rounds,
        lambda c: console.print(f"kernels: {c.dtype} {c.tokens} x {c.dim}", highlight=False),
    )
    shown = kernels.drop(columns=["device", "error"]).dropna(subset=["fwd_bwd_ms"])
    console.print(shown.to_markdown(index=False, floatfmt=".3g"), markup=False, highlight=False)
    for row in kernels[kernels["error"].notna()].itertuples():
        console.print(f"unavailable: {row.kind} {row.impl}: {row.error}", markup=False)
    return write_outputs(settings.out, kernels, steps)
