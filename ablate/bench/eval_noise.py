"""How much of a comparison's seed-to-seed spread is evaluation noise: for the runs of an
experiment trained with ``train.final_eval: split``, the paired SD of each A/B's differences
with the final val loss measured on the whole validation split (the summary's) against the same
runs' last evaluation on the ``eval_batches`` fixed windows (metrics.csv's last ``val_loss``).
The runs, their weights and their pairs are the same; only the evaluation differs.

    python -m ablate.bench.eval_noise results/ln_vs_rms
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ablate.bench.calibration import PAIRED_GROUPS, paired_differences
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.core.store import load_results


def windows_final(metrics: pd.DataFrame) -> pd.Series:
    """Each run's last evaluation on the fixed windows, by run id."""
    evaluated = metrics.dropna(subset=["val_loss"]).sort_values("step")
    return evaluated.groupby("run_id")["val_loss"].last()


def paired_sds(runs: pd.DataFrame, windows: pd.Series, first: str, second: str) -> pd.DataFrame:
    """Per A/B group: its pairs and the paired SD of ``second`` − ``first`` on the whole split
    and on the windows, and their ratio."""
    on_windows = runs.assign(final_val_loss=runs["run_id"].map(windows))
    rows = []
    for group in PAIRED_GROUPS:
        split = paired_differences(runs[runs["group"] == group], ["seed"], first, second)
        fixed = paired_differences(
            on_windows[on_windows["group"] == group], ["seed"], first, second
        )
        if len(split) < 2:
            continue
        sd_split, sd_windows = float(split.std(ddof=1)), float(fixed.std(ddof=1))
        rows.append(
            {
                "group": group,
                "pairs": len(split),
                "paired_sd_split": sd_split,
                "paired_sd_windows": sd_windows,
                "ratio": sd_split / sd_windows,
            }
        )
    return pd.DataFrame(rows)


def split_evaluated(exp_dir: Path, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs whose stored config evaluates the final val loss on the whole split."""

    def on_split(run_id: str) -> bool:
        stored = ExperimentFolder(exp_dir).run(run_id).read_config()
        return stored is not None and RunSpec.from_json(stored).config.train.final_eval == "split"

    return runs[runs["run_id"].map(on_split)]


def eval_noise_text(exp_dir: Path) -> str:
    """The table for a results folder, or why there is none."""
    results = load_results(exp_dir)
    runs = split_evaluated(exp_dir, results.runs)
    if not len(runs):
        return f"{exp_dir}: no run with train.final_eval: split"
    first, second = list(dict.fromkeys(runs["variant"]))[:2]
    table = paired_sds(runs, windows_final(results.metrics), first, second)
    return f"{second} − {first}, paired SD (nats)\n" + table.to_markdown(
        index=False, floatfmt=".4f"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m ablate.bench.eval_noise")
    parser.add_argument("results", type=Path, help="an experiment's results folder")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"{args.results}: not a results folder")
    print(eval_noise_text(args.results))


if __name__ == "__main__":
    main()
