"""Benchmark: finished runs per hour with 1 and 2 workers, and the cost of a rerun that skips all.

Each configuration ``WxT`` (W worker processes, T torch threads each) runs the experiment's main
runs (no sweep or studies), cut to ``--steps`` steps, as a fresh ``ablate run`` process into its
own scratch results folder; the configurations run back to back. Then the last one is run
again: every run is found finished and skipped, so that time is the overhead of a rerun
(interpreter start and imports included).

    python -m ablate.bench.workers experiments/ln_vs_rms.yaml --steps 100 --configs 1x1,1x2,2x1
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from ablate.core.load import load_experiment

STUDY_SECTIONS = ("sweep", "search", "max_lr")


def main_runs_only(source: Path, dest: Path, steps: int) -> Path:
    """A copy of ``source`` without sweep or studies, each run cut to ``steps`` steps (its
    warmup to fewer steps than that)."""
    experiment = load_experiment(source)
    doc = yaml.safe_load(source.read_text(encoding="utf-8"))
    for section in STUDY_SECTIONS:
        doc.pop(section, None)
    train = doc.setdefault("train", {})
    train["tokens"] = steps * experiment.base.tokens_per_step()
    train["warmup_steps"] = min(experiment.base.train.warmup_steps, steps - 1)
    dest.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return dest


def timed_run(experiment: Path, results: Path, workers: int, threads: int) -> float:
    """Seconds of one ``ablate run`` process (reports go to a scratch folder too)."""
    command = [sys.executable, "-m", "ablate.cli", "run", str(experiment)]
    command += ["--results-dir", str(results), "--report-dir", str(results / "reports")]
    command += ["--workers", str(workers), "--threads", str(threads)]
    start = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True)
    return time.perf_counter() - start


def parse_configs(text: str) -> list[tuple[int, int]]:
    """``"1x1,2x1"`` -> [(1, 1), (2, 1)]."""
    pairs = []
    for item in text.split(","):
        workers, threads = item.lower().split("x")
        pairs.append((int(workers), int(threads)))
    return pairs


def main(argv: list[str] | None = None) -> None:
    """Print runs per hour per configuration, their ratios to the first, and the rerun time."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--configs", default="1x1,1x2,2x1", help="WORKERSxTHREADS, ...")
    args = parser.parse_args(argv)
    configs = parse_configs(args.configs)
    with tempfile.TemporaryDirectory() as scratch:
        experiment = main_runs_only(args.experiment, Path(scratch) / "bench.yaml", args.steps)
        loaded = load_experiment(experiment)
        n_runs = len(loaded.variants) * len(loaded.seeds)
        print(f"{args.experiment}: {n_runs} main runs of {args.steps} steps per configuration")
        per_hour = {}
        results = Path(scratch)
        for workers, threads in configs:
            results = Path(scratch) / f"r{workers}x{threads}"
            seconds = timed_run(experiment, results, workers, threads)
            per_hour[(workers, threads)] = n_runs * 3600 / seconds
            print(
                f"{workers} worker(s) x {threads} thread(s): {seconds:.1f} s, "
                f"{per_hour[(workers, threads)]:.0f} runs/hour"
            )
        base = configs[0]
        for config in configs[1:]:
            ratio = per_hour[config] / per_hour[base]
            print(f"{config[0]}x{config[1]} / {base[0]}x{base[1]} runs per hour: {ratio:.2f}")
        rerun = timed_run(experiment, results, *configs[-1])
        print(f"rerun of the finished experiment (all {n_runs} runs skipped): {rerun:.1f} s")


if __name__ == "__main__":
    main()
