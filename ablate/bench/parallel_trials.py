"""Benchmark: how many rounds a search with ``search.parallel_trials`` k needs, on the simulator.

A round of k trials costs the wall time of one trial where k workers (GPUs, Slurm slots) run
them side by side, so the question is whether k trials proposed together (TPE's constant liar:
a round's later trials do not see its earlier ones' results) find as good a point in 1/k of the
rounds. For each sampler seed, the file's first variant is searched on the simulator with
k = 1 and with each k asked for, ``--trials`` trials each, in folders of their own; a search
*reaches* the sequential one when its best stable value is within one run's noise
(``runtime.simulate.run_sd``) of the sequential search's final best on the same seed. Prints
per k: the seeds that reach it, the median round at which they do, against the rounds of the
whole search, and the median gap of the final best to the sequential one.

    python -m ablate.bench.parallel_trials experiments/smoke.yaml --parallel 2,4 --trials 16
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

from optuna.trial import TrialState

from ablate.core.load import load_experiment
from ablate.launch.search import run_search
from ablate.launch.simulator import SimulatedExecutor


def best_by_round(path: Path, parallel: int, seed: int, trials: int) -> tuple[list[float], float]:
    """The best stable value after each round of a search of ``path``'s first variant with
    ``parallel`` trials a round, and the run noise of the simulator's truth."""
    settings = [
        f"search.parallel_trials={parallel}",
        f"search.sampler_seed={seed}",
        f"search.n_trials={trials}",
        "search.pruner=none",
    ]
    experiment = load_experiment(path, "simulate", settings=settings)
    variant = next(iter(experiment.variants))
    with tempfile.TemporaryDirectory(prefix="ablate-parallel-") as folder:
        url = f"journal:{Path(folder) / 'studies.log'}"
        executor = SimulatedExecutor(Path(folder) / "results")
        study = run_search(experiment, variant, executor, url, say=lambda _: None)
        done = sorted(
            study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)),
            key=lambda t: t.number,
        )
    best, found = float("inf"), []
    for start in range(0, trials, parallel):
        for trial in done[start : start + parallel]:
            if trial.user_attrs.get("stable") and trial.value is not None:
                best = min(best, trial.value)
        found.append(best)
    return found, experiment.base.runtime.simulate.run_sd


@dataclass(frozen=True)
class Reached:
    """One k over the seeds: how many seeds reached the sequential best within noise, the
    median round they did, the rounds a search has, and the final best's median gap."""

    parallel: int
    reached: int
    seeds: int
    median_round: float | None
    rounds: int
    median_gap: float


def compare(path: Path, parallel: list[int], seeds: int, trials: int) -> list[Reached]:
    """Each k against the sequential search on the same sampler seeds."""
    sequential = {seed: best_by_round(path, 1, seed, trials) for seed in range(seeds)}
    rows = []
    for k in [1, *parallel]:
        at, gaps = [], []
        for seed, (reference, noise) in sequential.items():
            found = reference if k == 1 else best_by_round(path, k, seed, trials)[0]
            target = reference[-1] + noise
            hit = next((i + 1 for i, best in enumerate(found) if best <= target), None)
            if hit is not None:
                at.append(hit)
            gaps.append(found[-1] - reference[-1])
        rounds = -(-trials // k)
        median = statistics.median(at) if at else None
        rows.append(Reached(k, len(at), seeds, median, rounds, statistics.median(gaps)))
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--parallel", default="2,4", help="the k to compare with k = 1")
    parser.add_argument("--seeds", type=int, default=20, help="sampler seeds")
    parser.add_argument("--trials", type=int, default=16, help="trials of each search")
    args = parser.parse_args(argv)
    parallel = [int(k) for k in args.parallel.split(",")]
    print(f"{args.experiment}: {args.trials} trials, {args.seeds} sampler seeds, simulator")
    print("k  reached  median round  rounds  median final gap")
    for row in compare(args.experiment, parallel, args.seeds, args.trials):
        median = f"{row.median_round:g}" if row.median_round is not None else "-"
        print(
            f"{row.parallel:<2} {row.reached:>3}/{row.seeds:<4} {median:>12} {row.rounds:>7} "
            f"{row.median_gap:>+17.4f}"
        )


if __name__ == "__main__":
    main()
