"""Benchmark: wall time of one search study shared by 1, 2, 4, ... ``ablate search`` processes.

Each configuration gets a fresh copy of the experiment's first variant with only its
``search:`` section (``--trials`` trials of ``--steps`` steps, no pruning), renamed so that its
study is new in the storage, and a scratch results folder; the processes are started together
and the configurations run back to back. Prints wall time, trials completed (a study may end
one or two over ``n_trials`` when workers start together) and the speed-up over the first.
Point ``--storage`` at PostgreSQL to measure a many-machine set-up on one machine.

    python -m ablate.bench.search experiments/smoke.yaml --storage postgresql://... \\
        --workers 1,2,4 --trials 8 --steps 3000
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import optuna
import yaml

from ablate.core.load import load_experiment
from ablate.launch.storage import open_storage, study_name

OTHER_SECTIONS = ("grid", "sweep", "max_lr", "convert", "storage")


def search_only(source: Path, dest: Path, name: str, trials: int, steps: int) -> Path:
    """A copy of ``source``: its first variant, a ``search:`` of ``trials`` x ``steps`` steps."""
    experiment = load_experiment(source)
    doc = yaml.safe_load(source.read_text(encoding="utf-8"))
    for section in OTHER_SECTIONS:
        doc.pop(section, None)
    first = next(iter(experiment.variants))
    doc["name"] = name
    doc["variants"] = {first: doc.get("variants", {}).get(first, {})}
    per_step = experiment.variants[first].tokens_per_step()
    search = doc.get("search") or {}
    doc["search"] = {**search, "n_trials": trials, "pruner": "none", "tokens": steps * per_step}
    dest.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return dest


def timed_search(experiment: Path, results: Path, storage: str, workers: int) -> float:
    """Seconds until all of ``workers`` single-worker ``ablate search`` processes are done."""
    command = [sys.executable, "-m", "ablate.cli", "search", str(experiment), "--storage"]
    command += [storage, "--results-dir", str(results), "--workers", "1", "--threads", "1"]
    start = time.perf_counter()
    procs = [subprocess.Popen(command, stdout=subprocess.DEVNULL) for _ in range(workers)]
    if any(p.wait() != 0 for p in procs):
        raise SystemExit(f"an ablate search process failed: {' '.join(command)}")
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    """Print wall time and completed trials per worker count, and the speed-ups."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("experiment", type=Path)
    parser.add_argument("--storage", required=True, help="Optuna storage URL shared by all")
    parser.add_argument("--workers", default="1,2,4", help="worker counts, e.g. 1,2,4")
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--steps", type=int, default=3000)
    args = parser.parse_args(argv)
    counts = [int(w) for w in args.workers.split(",")]
    stamp = time.strftime("%Y%m%d%H%M%S")
    seconds: dict[int, float] = {}
    with tempfile.TemporaryDirectory() as scratch:
        for workers in counts:
            name = f"bench_search_{stamp}_{workers}w"
            path = search_only(
                args.experiment, Path(scratch) / f"{name}.yaml", name, args.trials, args.steps
            )
            seconds[workers] = timed_search(path, Path(scratch) / name, args.storage, workers)
            experiment = load_experiment(path)
            variant = next(iter(experiment.variants))
            study = optuna.load_study(
                study_name=study_name(experiment, variant, "search"),
                storage=open_storage(args.storage),
            )
            done = len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
            print(
                f"{workers} worker(s): {seconds[workers]:.1f} s, {done} of {args.trials} "
                f"trials requested completed ({args.steps} steps each)",
                flush=True,
            )
    for workers in counts[1:]:
        speedup = seconds[counts[0]] / seconds[workers]
        print(f"{workers} / {counts[0]} worker(s) speed-up: {speedup:.2f}")


if __name__ == "__main__":
    main()
