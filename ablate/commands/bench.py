"""``ablate bench``: the norm kernels' speed and memory, or a stored experiment's inference."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from ablate.commands.common import EXIT_OK, UsageError, positive

if TYPE_CHECKING:
    from rich.console import Console

    from ablate.core.experiment import Experiment


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise UsageError(f"{flag}: {text!r}: give integers >= 1")
    return values


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    """Kernel and step benchmarks; tables printed, CSVs and a figure written."""
    import torch

    from ablate.bench.speed import DTYPES, BenchSettings, run_benchmarks
    from ablate.core.load import load_experiment

    dims, tokens = _int_list(args.dims, "--dims"), _int_list(args.tokens, "--tokens")
    dtypes = [d for d in args.dtypes.split(",") if d]
    if not dtypes or set(dtypes) - set(DTYPES):
        raise UsageError(f"--dtypes: {args.dtypes!r}; allowed: {', '.join(DTYPES)}")
    positive(args.threads, "--threads")
    positive(args.steps, "--steps")
    positive(args.repeats, "--repeats")
    positive(args.rounds, "--rounds")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    experiment = None if str(args.experiment) == "none" else load_experiment(args.experiment)
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    if args.inference:
        return _bench_inference(args, experiment, device, console)
    settings = BenchSettings(
        dims,
        tokens,
        dtypes,
        args.steps,
        args.repeats,
        args.rounds,
        args.min_run_time,
        not args.no_compile,
        args.out,
    )
    for path in run_benchmarks(experiment, device, threads, settings, console):
        console.print(f"wrote {path}")
    return EXIT_OK


def _bench_inference(
    args: argparse.Namespace, experiment: Experiment | None, device: Any, console: Console
) -> int:
    """``ablate bench --inference``: the inference table of the experiment's variants."""
    from ablate.bench.inference import InferenceSettings, run_inference

    if experiment is None:
        raise UsageError("--inference: needs an --experiment whose variants to decode with")
    positive(args.new_tokens, "--new-tokens")
    settings = InferenceSettings(
        tuple(_int_list(args.batches, "--batches")),
        tuple(_int_list(args.prompts, "--prompts")),
        args.new_tokens,
        rounds=args.repeats,
    )
    for name, cfg in experiment.variants.items():
        if cfg.model.source != "ablate":
            raise UsageError(
                f"--inference: variant {name} is a model.source: {cfg.model.source} model; "
                "the KV-cache decoding path is ablate's own model's"
            )
        longest = max(settings.prompts) + settings.new_tokens
        if longest > cfg.model.seq_len:
            raise UsageError(
                f"--prompts/--new-tokens: {longest} positions > model.seq_len "
                f"{cfg.model.seq_len} of variant {name}"
            )
    path = run_inference(experiment, device, settings, args.results_dir, args.out, console)
    console.print(f"wrote {path}")
    return EXIT_OK
