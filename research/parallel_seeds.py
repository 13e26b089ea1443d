"""Benchmark: what bracketing ``max_lr.parallel_seeds`` seeds at once costs and gives, on the
simulator.

A round of the max-LR stage obtains one probe per seed of a wave; where the seeds' runs go side
by side (GPUs, Slurm slots) a round costs the wall time of one probe. Each replication draws
edges with the per-seed jitter of the committed ln_vs_rms report
(:func:`research.max_lr_replications.max_lr_truth`); the file's first variant is bracketed
with k = 1 and each k asked for (``--parallel``), in folders of their own, on
``--replications`` truths (20). Prints per k: the median rounds and
probes per variant, the share of seeds whose bracket holds their own true edge, and the median
distance of the variant's boundary from its true median edge, in lattice steps.

    python -m research.parallel_seeds experiments/ln_vs_rms.yaml --parallel 2,5
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from ablate.core.simulate import true_edge
from ablate.launch.execute import Obtained, Request, SayFn
from ablate.launch.max_lr import run_max_lr
from ablate.launch.simulator import SimulatedExecutor
from research.max_lr_replications import max_lr_truth, median_edge, probe_config, probed_edge


class RoundCounter(SimulatedExecutor):
    """The simulator, recording the runs each round (``obtain_all`` call) of a stage asked for
    at once."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.rounds: list[int] = []

    def obtain_all(self, requests: list[Request], say: SayFn = print) -> list[Obtained]:
        self.rounds.append(len(requests))
        return super().obtain_all(requests, say)


@dataclass(frozen=True)
class Bracketed:
    """One variant's max-LR stage on one replication's truth."""

    rounds: int
    probes: int
    seeds_holding: int  # seeds whose bracket holds their own true edge
    seeds: int
    steps_off: float  # |log2(boundary / true median edge)| in lattice steps


def bracket(design: Experiment, replication: int, at_once: int) -> Bracketed:
    """The first variant's max-LR stage with ``at_once`` seeds a wave, on the replication's
    truth."""
    assert design.max_lr is not None
    cfg = design.max_lr.model_copy(update={"parallel_seeds": at_once})
    truth = max_lr_truth(design.model_copy(update={"max_lr": cfg}), replication)
    variant = next(iter(truth.variants))
    with tempfile.TemporaryDirectory(prefix="ablate-seeds-") as folder:
        executor = RoundCounter(Path(folder) / "results")
        url = f"journal:{Path(folder) / 'studies.log'}"
        found = run_max_lr(truth, variant, executor, url, None, say=lambda _: None)
    config = probe_config(truth, variant)
    bounds, boundary = probed_edge(found)
    holding = sum(
        b.last_stable is not None
        and b.first_unstable is not None
        and b.last_stable <= true_edge(config, variant, b.seed) < b.first_unstable
        for b in bounds
    )
    off = (
        abs(math.log2(boundary.value / median_edge(truth, variant))) * cfg.per_octave
        if boundary is not None
        else math.inf
    )
    return Bracketed(len(executor.rounds), len(found.probes), holding, len(bounds), off)


def share_holding(found: list[Bracketed]) -> float:
    """The share of the replications' seeds whose bracket holds their edge."""
    return sum(b.seeds_holding for b in found) / sum(b.seeds for b in found)


def summary_line(at_once: int, found: list[Bracketed]) -> str:
    """One k's figures over the replications."""
    held = share_holding(found)
    return (
        f"k={at_once}: rounds {statistics.median(b.rounds for b in found):g}, "
        f"probes {statistics.median(b.probes for b in found):g}, "
        f"seeds bracketing their edge {held:.1%}, "
        f"boundary off the true median {statistics.median(b.steps_off for b in found):.2f} steps"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--parallel", default="2", help="the k to compare with 1, comma-separated")
    parser.add_argument("--replications", type=int, default=20)
    args = parser.parse_args(argv)
    design = load_experiment(args.experiment, "simulate")
    if design.max_lr is None:
        parser.error(f"{args.experiment}: has no max_lr section to bracket")
    for at_once in [1, *(int(k) for k in args.parallel.split(","))]:
        found = [bracket(design, r, at_once) for r in range(args.replications)]
        print(summary_line(at_once, found), flush=True)


if __name__ == "__main__":
    main()
