"""Benchmark: throughput of the default model with ``runtime.runs_per_device`` runs on one GPU.

The default model is launch-bound on a large GPU (1.4% MFU on an H200), so several runs side by
side on one device should train more runs per hour. For each count asked for (``--per-device``,
default 1, 4 and 8), the file's first variant trains ``--runs`` seeds (default 8) at
``--fraction`` of its token budget on CUDA, with no study stage, in a fresh results folder,
through the local executor (one worker per slot, each seeing its GPU). Prints per count: wall
time, runs per minute, tokens per second and the ratio to one run per device, and whether every
run's final validation loss equals the one-per-device run's (a GPU's kernels may not repeat bit
for bit; the figure says whether they did). Needs a CUDA device.

    python -m ablate.bench.runs_per_device experiments/ln_vs_rms.yaml
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from ablate.core.plan import plan_runs

STAGES = ("sweep", "search", "curve", "max_lr", "decide", "convert", "scale")


def packing_settings(per_device: int, runs: int, tokens: int) -> list[str]:
    """The ``--set`` settings of one count: its seeds, budget, CUDA and no study stage."""
    seeds = ",".join(str(s) for s in range(runs))
    return [
        f"seeds=[{seeds}]",
        f"train.tokens={tokens}",
        "runtime.accelerator=cuda",
        f"runtime.runs_per_device={per_device}",
        *(f"{stage}=null" for stage in STAGES),
    ]


def first_variant_only(experiment: Experiment) -> Experiment:
    """The experiment with its first variant alone."""
    name = next(iter(experiment.variants))
    return experiment.model_copy(update={"variants": {name: experiment.variants[name]}})


@dataclass(frozen=True)
class Packed:
    """One count's measurement."""

    per_device: int
    runs: int
    wall_s: float
    tokens: int
    final_losses: tuple[float | None, ...]  # by seed

    def row(self, alone: Packed) -> str:
        same = "equal" if self.final_losses == alone.final_losses else "other"
        return (
            f"{self.per_device:>2} per device: {self.wall_s:7.1f} s, "
            f"{60 * self.runs / self.wall_s:6.2f} runs/min, {self.tokens / self.wall_s:9.0f} "
            f"tokens/s, {alone.wall_s / self.wall_s:4.2f}x one per device; final losses {same}"
        )


def measure(path: Path, per_device: int, runs: int, fraction: float) -> Packed:
    """Train ``runs`` seeds of the file's first variant at ``per_device`` runs per GPU."""
    from ablate.launch.execute import execute

    budget = load_experiment(path).base.train.tokens
    tokens = max(1, int(budget * fraction))
    settings = packing_settings(per_device, runs, tokens)
    experiment = first_variant_only(load_experiment(path, settings=settings))
    specs = plan_runs(experiment)
    with tempfile.TemporaryDirectory(prefix="ablate-packed-") as folder:
        began = time.perf_counter()
        records = execute(specs, Path(folder))
        wall = time.perf_counter() - began
    by_seed = sorted(records, key=lambda r: r.seed)
    trained = sum(r.tokens or 0 for r in by_seed)
    return Packed(per_device, len(specs), wall, trained, tuple(r.final_val_loss for r in by_seed))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--per-device", default="1,4,8", help="counts, comma-separated")
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--fraction", type=float, default=0.25, help="of train.tokens")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("ablate.bench.runs_per_device: error: no CUDA device is available", file=sys.stderr)
        return 2
    counts = [int(c) for c in args.per_device.split(",")]
    found = [measure(args.experiment, c, args.runs, args.fraction) for c in counts]
    print(f"GPU: {torch.cuda.get_device_name(0)}; {args.runs} runs of {args.experiment.name}")
    for packed in found:
        print(packed.row(found[0]), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
