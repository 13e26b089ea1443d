"""Inference speed per variant (``ablate bench --inference``): prefill, decode TPOT, memory, the
norm's share of decode time, in fp32, bf16 and int8.

Each variant's model is built as it trains (ablate's own model; seed 0), with the final weights
of its stored main run of the first seed when ``--results-dir`` holds them, else fresh weights
of the same shapes (speed does not depend on the values). Per precision mode — ``fp32``,
``bf16`` (the model cast to bf16) and ``int8`` (its linear layers dynamically quantized to int8
by ``torch.ao``; CPU only) — batch size and prompt length:

- **prefill**: the prompt through the model once, filling the KV cache; tokens/s = B·T0 / time;
- **decode**: ``new_tokens`` single-token steps against the cache (:mod:`ablate.nn.decode`);
  TPOT = their time / ``new_tokens``, in ms;
- **norm share**: one decode pass under ``torch.profiler``, each norm's forward inside a
  ``record_function``: the norms' CPU time over the whole pass's on a CPU; on a GPU the device
  time of the kernels the norms launched over that of all the pass's kernels;
- **peak memory**: the CUDA allocator's peak, or the process's peak resident set on a CPU.

Rounds alternate the variants (every variant once per round) and the medians and the min–max
over rounds are reported. :func:`quantized_loss` gives the val loss of a model and of its int8
copy, so the quantization's cost in quality is stated beside its speed. With ``--results-dir``
the table is also stored beside the experiment's runs, and ``ablate report`` adds an Inference
section (:mod:`ablate.report.inference`).
"""

from __future__ import annotations

import copy
import statistics
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from rich.console import Console
from torch import nn
from torch.autograd import DeviceType
from torch.autograd.profiler_util import FunctionEvent
from torch.profiler import ProfilerActivity, profile, record_function

from ablate.core import folders
from ablate.core.config import ModelConfig
from ablate.core.experiment import Experiment
from ablate.core.folders import INFERENCE_TABLE, ExperimentFolder
from ablate.core.plan import plan_runs
from ablate.nn.attention import KVCache
from ablate.nn.model import GPT, build_gpt, next_token_loss
from ablate.nn.norms import is_norm
from ablate.report.inference import inference_summary
from ablate.training.data import Corpus, eval_offsets, gather_windows, load_corpus
from ablate.training.memory import read_peak_memory, reset_peak_memory

MODES = ("fp32", "bf16", "int8")
NORM_LABEL = "ablate.norm"  # the profiler's name for time spent inside a norm's forward


@dataclass(frozen=True)
class InferenceSettings:
    """What ``ablate bench --inference`` measures."""

    batches: tuple[int, ...] = (1, 8)
    prompts: tuple[int, ...] = (16, 32)
    new_tokens: int = 16
    modes: tuple[str, ...] = MODES
    rounds: int = 3


def prepared(model: GPT, mode: str) -> nn.Module:
    """A copy of ``model`` in ``mode``: fp32 as is, bf16 cast, int8 dynamically quantized."""
    model = copy.deepcopy(model).eval()
    if mode == "bf16":
        return model.to(torch.bfloat16)
    if mode == "int8":
        with warnings.catch_warnings():  # torch points to torchao, which ablate does not need
            warnings.simplefilter("ignore", DeprecationWarning)
            warnings.simplefilter("ignore", UserWarning)
            return torch.ao.quantization.quantize_dynamic(model, {nn.Linear}, dtype=torch.qint8)
    return model


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def activation_dtype(mode: str) -> torch.dtype:
    """What the KV cache holds in ``mode``: bf16 for the bf16 model, else fp32 (int8 quantizes
    the weights only)."""
    return torch.bfloat16 if mode == "bf16" else torch.float32


@torch.no_grad()
def time_inference(
    model: nn.Module, shape: ModelConfig, prompt: torch.Tensor, new_tokens: int, mode: str
) -> tuple[float, float]:
    """(prefill seconds, decode seconds per token) of one prompt and ``new_tokens`` greedy steps
    with the KV cache; ``shape`` is the model's config (a quantized copy keeps it)."""
    device = prompt.device
    cache = KVCache(shape, prompt.shape[0], device, activation_dtype(mode))
    _sync(device)
    start = time.perf_counter()
    logits = model(prompt, cache)
    _sync(device)
    prefill = time.perf_counter() - start
    next_ids = logits[:, -1].argmax(-1, keepdim=True)
    start = time.perf_counter()
    for _ in range(new_tokens):
        next_ids = model(next_ids, cache)[:, -1].argmax(-1, keepdim=True)
    _sync(device)
    return prefill, (time.perf_counter() - start) / new_tokens


@contextmanager
def norms_labelled(model: nn.Module) -> Iterator[None]:
    """Every norm's forward inside ``record_function(NORM_LABEL)`` while the block runs."""
    opened: list[record_function] = []

    def enter(_module: nn.Module, _inputs: object) -> None:
        opened.append(record_function(NORM_LABEL).__enter__())

    def leave(_module: nn.Module, _inputs: object, _output: object) -> None:
        opened.pop().__exit__(None, None, None)

    handles = []
    for module in model.modules():
        if is_norm(module):
            handles += [
                module.register_forward_pre_hook(enter),
                module.register_forward_hook(leave),
            ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def norm_share(
    model: nn.Module, shape: ModelConfig, prompt: torch.Tensor, new_tokens: int, mode: str
) -> float:
    """The norms' share of one prefill-and-decode pass, from ``torch.profiler``: of its CPU time
    on a CPU, of its kernels' device time on a GPU (where CPU time is mostly launch overhead)."""
    activities = [ProfilerActivity.CPU]
    if prompt.device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with norms_labelled(model), profile(activities=activities) as prof:
        with record_function("ablate.decode"):
            time_inference(model, shape, prompt, new_tokens, mode)
    return labelled_share(prof.events(), on_device=prompt.device.type == "cuda")


def labelled_share(events: Iterable[FunctionEvent], on_device: bool) -> float:
    """Time inside ``NORM_LABEL`` ranges over time inside the ``ablate.decode`` range: CPU time,
    or (``on_device``) the device time of the kernels each range launched. Only the CPU-side
    ranges count (a GPU-side copy of a range would count its kernels twice)."""
    totals = {NORM_LABEL: 0.0, "ablate.decode": 0.0}
    for event in events:
        if event.name in totals and event.device_type == DeviceType.CPU:
            totals[event.name] += event.device_time_total if on_device else event.cpu_time_total
    whole = totals["ablate.decode"]
    return totals[NORM_LABEL] / whole if whole else float("nan")


def variant_model(experiment: Experiment, variant: str, vocab: int, root: Path | None) -> GPT:
    """The variant's model: its stored first-seed main run's final weights if ``root`` has
    them, else fresh ones (seed 0)."""
    model = build_gpt(experiment.variants[variant].model, vocab, seed=0)
    if root is None:
        return model
    spec = next(s for s in plan_runs(experiment) if s.variant == variant)
    run = ExperimentFolder.of(root, experiment.name).run(spec.run_id)
    if run.weights.is_file():
        model.load_state_dict(torch.load(run.weights, map_location="cpu", weights_only=True))
    return model


def variant_models(experiment: Experiment, root: Path | None) -> tuple[Corpus, dict[str, GPT]]:
    """The experiment's corpus (its variants share it) and every variant's model
    (:func:`variant_model`)."""
    first = next(iter(experiment.variants.values()))
    corpus = load_corpus(first.data, first.model.seq_len)
    models = {v: variant_model(experiment, v, corpus.vocab_size, root) for v in experiment.variants}
    return corpus, models


@torch.no_grad()
def quantized_loss(model: GPT, corpus: Corpus, batches: int = 8) -> tuple[float, float]:
    """(val loss of ``model``, of its int8 copy) over the first ``batches`` val windows."""
    seq_len = model.cfg.seq_len
    offsets = eval_offsets(len(corpus.val), seq_len, 8, batches)
    int8 = prepared(model, "int8")

    def loss(m: nn.Module) -> float:
        values = [
            float(next_token_loss(m, gather_windows(corpus.val, o, seq_len))) for o in offsets
        ]
        return statistics.fmean(values)

    return loss(model.eval()), loss(int8)


def inference_table(
    experiment: Experiment,
    device: torch.device,
    settings: InferenceSettings,
    root: Path | None = None,
    say: Callable[[str], None] = print,
) -> pd.DataFrame:
    """One row per variant x mode x batch x prompt length: medians and ranges over rounds."""
    modes = [m for m in settings.modes if not (m == "int8" and device.type != "cpu")]
    corpus, models = variant_models(experiment, root)
    generator = torch.Generator().manual_seed(0)
    rows = []
    for mode in modes:
        ready = {v: prepared(m, mode).to(device) for v, m in models.items()}
        for batch in settings.batches:
            for length in settings.prompts:
                prompt = torch.randint(0, corpus.vocab_size, (batch, length), generator=generator)
                prompt = prompt.to(device)
                say(f"inference: {mode} batch {batch} prompt {length}")
                shapes = {v: m.cfg for v, m in models.items()}
                rows += _cell(ready, shapes, prompt, mode, settings, device)
    return pd.DataFrame(rows)


def _cell(
    ready: dict[str, nn.Module],
    shapes: dict[str, ModelConfig],
    prompt: torch.Tensor,
    mode: str,
    settings: InferenceSettings,
    device: torch.device,
) -> list[dict[str, object]]:
    """Every variant at one mode, batch and prompt: rounds alternate the variants."""
    times: dict[str, list[tuple[float, float]]] = {v: [] for v in ready}
    for v, model in ready.items():  # warm-up, untimed
        time_inference(model, shapes[v], prompt, 2, mode)
    for _ in range(settings.rounds):
        for v, model in ready.items():
            times[v].append(time_inference(model, shapes[v], prompt, settings.new_tokens, mode))
    rows = []
    for v, model in ready.items():
        reset_peak_memory(device)
        time_inference(model, shapes[v], prompt, settings.new_tokens, mode)
        peak, memory_kind = read_peak_memory(device)
        prefill = [prompt.numel() / p for p, _ in times[v]]
        tpot = [1000 * d for _, d in times[v]]
        rows.append(
            {
                "variant": v,
                "mode": mode,
                "batch": prompt.shape[0],
                "prompt": prompt.shape[1],
                "new_tokens": settings.new_tokens,
                "prefill_tokens_per_s": statistics.median(prefill),
                "prefill_min": min(prefill),
                "prefill_max": max(prefill),
                "tpot_ms": statistics.median(tpot),
                "tpot_ms_min": min(tpot),
                "tpot_ms_max": max(tpot),
                "norm_share": norm_share(model, shapes[v], prompt, settings.new_tokens, mode),
                "peak_memory_mb": peak,
                "memory_kind": memory_kind,
                "rounds": settings.rounds,
            }
        )
    return rows


def int8_quality(experiment: Experiment, root: Path | None) -> list[str]:
    """Per variant, the val loss of its model and of the int8 copy (:func:`quantized_loss`)."""
    corpus, models = variant_models(experiment, root)
    lines = []
    for variant, model in models.items():
        fp32, int8 = quantized_loss(model, corpus)
        lines.append(
            f"int8 val loss, {variant}: {int8:.4f} vs fp32 {fp32:.4f} ({int8 - fp32:+.4f})"
        )
    return lines


def run_inference(
    experiment: Experiment,
    device: torch.device,
    settings: InferenceSettings,
    root: Path | None,
    out: Path,
    console: Console,
) -> Path:
    """Measure, print the table and the summary lines, write ``inference.csv`` under ``out``."""
    console.print(
        f"inference: {experiment.name} on {device.type}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} thread(s), {settings.rounds} round(s)"
    )
    say = lambda text: console.print(text, highlight=False)  # noqa: E731
    table = inference_table(experiment, device, settings, root, say)
    shown = table.drop(columns=["memory_kind", "rounds", "new_tokens"])
    console.print(shown.to_markdown(index=False, floatfmt=".4g"), markup=False, highlight=False)
    for line in inference_summary(table, next(iter(experiment.variants))):
        console.print(line, markup=False, highlight=False)
    for line in int8_quality(experiment, root):
        console.print(line, markup=False, highlight=False)
    path = out / INFERENCE_TABLE
    folders.write_frame_atomic(path, table)
    if root is not None:  # beside the runs, where the report finds it
        folders.write_frame_atomic(ExperimentFolder.of(root, experiment.name).inference, table)
    return path
