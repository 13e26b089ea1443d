"""Benchmark: tokens/s of the Lightning runner against a plain PyTorch loop, back to back.

Both train the same model from the same initial weights on the same batches with the same
optimizer, schedule and clipping, and evaluate once at the end; the plain loop is the
nanoGPT-style hand-written loop the runner must keep up with. Each repetition times one of each,
alternating, and the script prints every pair and the median ratio (runner / plain; 1.0 = no
overhead) together with the final train losses, which should agree.

    python -m ablate.bench.runner experiments/ln_vs_rms.yaml --steps 100 --repeats 3
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
import torch

from ablate.core.folders import ExperimentFolder
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec
from ablate.nn.model import next_token_loss, parameter_groups
from ablate.training.data import gather_windows
from ablate.training.prepare import prepare
from ablate.training.run import execute_run
from ablate.training.task import lr_factor


def plain_loop(spec: RunSpec) -> tuple[float, float]:
    """(seconds, final train loss) of a hand-written loop over the runner's model and batches."""
    start = time.perf_counter()
    prepared = prepare(spec)
    cfg, model = spec.config.train, prepared.model
    seq_len = spec.config.model.seq_len
    optimizer = torch.optim.AdamW(
        parameter_groups(model, cfg.weight_decay),
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.adam_eps,
    )
    max_norm = cfg.grad_clip if cfg.grad_clip is not None else math.inf
    loss_value = math.nan
    for step, offsets in enumerate(prepared.train_offsets):
        factor = lr_factor(step, cfg.warmup_steps, prepared.steps, cfg.schedule, cfg.min_lr_ratio)
        for group in optimizer.param_groups:
            group["lr"] = cfg.lr * factor
        loss = next_token_loss(model, gather_windows(prepared.corpus.train, offsets, seq_len))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        loss_value = loss.item()
    model.eval()
    with torch.no_grad():
        for offsets in prepared.val_offsets:
            next_token_loss(model, gather_windows(prepared.corpus.val, offsets, seq_len)).item()
    return time.perf_counter() - start, loss_value


def runner(spec: RunSpec) -> tuple[float, float]:
    """(seconds, final train loss) of :func:`ablate.training.run.execute_run`, files and all."""
    with tempfile.TemporaryDirectory() as root:
        start = time.perf_counter()
        execute_run(spec, Path(root))
        elapsed = time.perf_counter() - start
        run = ExperimentFolder.of(Path(root), spec.experiment).run(spec.run_id)
        metrics = pd.read_csv(run.metrics)
    return elapsed, float(metrics["train_loss"].iloc[-1])


def benchmark_spec(path: Path, steps: int) -> RunSpec:
    """The experiment's first variant, cut to ``steps`` steps with one evaluation at the end."""
    experiment = load_experiment(path)
    variant, config = next(iter(experiment.variants.items()))
    config = config.model_copy(deep=True)
    config.train.tokens = steps * config.tokens_per_step()
    config.train.eval_interval = steps
    return RunSpec(experiment.name, variant, experiment.seeds[0], config)


def benchmark_arguments(description: str, steps: int) -> argparse.ArgumentParser:
    """The options every runner benchmark takes: the file, steps, repeats and threads."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--steps", type=int, default=steps)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    return parser


def main(argv: list[str] | None = None) -> None:
    """Print runner and plain-loop tokens/s for each repetition and the median ratio."""
    args = benchmark_arguments(__doc__.splitlines()[0], steps=100).parse_args(argv)
    torch.set_num_threads(args.threads)
    spec = benchmark_spec(args.experiment, args.steps)
    tokens = spec.config.steps() * spec.config.tokens_per_step()
    print(
        f"{spec.experiment}/{spec.variant}: {spec.config.steps()} steps, {tokens} tokens, "
        f"{args.threads} thread(s), torch {torch.__version__}"
    )
    plain_loop(spec)  # warm-up: first-touch allocations, lazy imports
    ratios = []
    for rep in range(args.repeats):
        t_run, loss_run = runner(spec)
        t_plain, loss_plain = plain_loop(spec)
        ratios.append(t_plain / t_run)
        print(
            f"rep {rep}: runner {tokens / t_run:,.0f} tok/s ({t_run:.2f}s, loss {loss_run:.4f}) | "
            f"plain {tokens / t_plain:,.0f} tok/s ({t_plain:.2f}s, loss {loss_plain:.4f}) | "
            f"ratio {ratios[-1]:.3f}"
        )
    print(f"runner / plain tokens/s, median of {args.repeats}: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
