"""How much of a comparison's seed-to-seed spread is evaluation noise: for the runs of an
experiment trained with ``train.final_eval: split``, the paired SD of each A/B's differences
with the final val loss measured on the whole validation split (the summary's) against the same
runs' last evaluation on the ``eval_batches`` fixed windows (metrics.csv's last ``val_loss``).
The runs, their weights and their pairs are the same; only the evaluation differs.

    python -m research.eval_noise results/ln_vs_rms --out reports/bench/eval_noise.csv

(docs/results.md quotes the committed CSV).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.core.store import load_results, read_manifest
from research.calibration import PAIRED_GROUPS, paired_differences


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


def split_evaluated(folder: ExperimentFolder, runs: pd.DataFrame) -> pd.DataFrame:
    """The runs whose stored config evaluates the final val loss on the whole split."""

    def on_split(run_id: str) -> bool:
        stored = folder.run(run_id).read_config()
        return stored is not None and RunSpec.from_json(stored).config.train.final_eval == "split"

    return runs[runs["run_id"].map(on_split)]


def eval_noise_table(folder: ExperimentFolder) -> pd.DataFrame:
    """The paired SDs of ``folder``'s split-evaluated runs (empty when there are none)."""
    results = load_results(folder.path)
    runs = split_evaluated(folder, results.runs)
    if not len(runs):
        return pd.DataFrame()
    order = [v for v in read_manifest(folder).variants if v in set(runs["variant"])]
    first, second = order[:2]  # the baseline first, as the report pairs them
    table = paired_sds(runs, windows_final(results.metrics), first, second)
    return table.assign(comparison=f"{second} - {first}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.eval_noise")
    parser.add_argument("results", type=Path, help="an experiment's results folder")
    parser.add_argument("--out", type=Path, help="also write the table to this CSV file")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"{args.results}: not a results folder")
    table = eval_noise_table(ExperimentFolder(args.results))
    if table.empty:
        parser.exit(1, f"{args.results}: no run with train.final_eval: split\n")
    print(table.to_markdown(index=False, floatfmt=".4f"))
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.out, index=False)


if __name__ == "__main__":
    main()
