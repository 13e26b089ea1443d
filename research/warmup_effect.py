"""How far the warmup moves the loss, against the seed noise: every committed warmup study (a
TPE study of ``curve.warmup_trials``, or the ``curve.warmup_grid``'s warmups, per variant at its
curve's optimum LR, each trial the same curve seeds) read from a ``runs.csv``: the 6-trial TPE
studies of the protocol before 2026-12-07 (``reports/earlier_protocol``) and the grids of the
one after it (``reports/earlier_protocol/warmup_grid``), before the warmup was declared.

For each trial, its gap above the study's best trial, paired by seed (mean and SD of the
per-seed differences), and whether the gap exceeds ``min_effect`` (0.02 nats, the default
experiment's margin). The table answers how fine the warmup search needs to be: which warmups,
as a share of the run, cost more than ``min_effect`` against the best, and which stay within
the seed noise of it.

Run::

    python -m research.warmup_effect [--write docs/early-stop.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ablate.core.experiment import MIN_EFFECT
from research import REPO
from research.estimators import write_block

WARMUP_REPORTS = {  # the committed warmup studies: the folders of their runs.csv
    "ln_vs_rms, TPE": "reports/earlier_protocol/ln_vs_rms",
    "llama_style, TPE": "reports/earlier_protocol/llama_style",
    "ln_vs_rms, grid": "reports/earlier_protocol/warmup_grid/ln_vs_rms",
    "llama_style, grid": "reports/earlier_protocol/warmup_grid/llama_style",
}


def trial_gaps(runs: pd.DataFrame) -> pd.DataFrame:
    """Per variant and warmup trial: the warmup as a share of the run, the mean final val loss,
    the paired gap above the variant's best trial, its SD and standard error over the seeds."""
    rows = []
    for variant, mine in runs[runs["group"] == "warmup"].groupby("variant"):
        table = mine.pivot_table(index="warmup_steps", columns="seed", values="final_val_loss")
        best = table.mean(axis=1).idxmin()
        steps = int(mine["planned_steps"].max())
        for warmup, row in table.iterrows():
            paired = row - table.loc[best]
            sd = float(paired.std(ddof=1)) if warmup != best else 0.0
            rows.append(
                {
                    "variant": variant,
                    "warmup": int(warmup),
                    "share_of_run": warmup / steps,
                    "mean_loss": float(row.mean()),
                    "gap": float(paired.mean()),
                    "paired_sd": sd,
                    "beyond_min_effect": bool(paired.mean() > MIN_EFFECT),
                }
            )
    return pd.DataFrame(rows)


def every_study() -> pd.DataFrame:
    """Every committed warmup study's trials, by source."""
    frames = []
    for source, folder in WARMUP_REPORTS.items():
        found = trial_gaps(pd.read_csv(REPO / folder / "runs.csv"))
        frames.append(found.assign(source=source))
    columns = ["source", "variant", "warmup", "share_of_run", "mean_loss", "gap", "paired_sd"]
    return pd.concat(frames, ignore_index=True)[[*columns, "beyond_min_effect"]]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="a doc whose warmup-effect block to rewrite")
    args = parser.parse_args()
    text = every_study().to_markdown(index=False, floatfmt=".3g")
    if args.write:
        command = "python -m research.warmup_effect --write " + args.write.as_posix()
        write_block(args.write, "warmup-effect", text, command)
    print(text)


if __name__ == "__main__":
    main()
