"""When real runs diverge: the step each diverged run of every committed ``runs.csv`` was stopped
at by the divergence rule, against its warmup, and how many runs a max-LR probe held at a step
(``max_lr.stop_step``) would have called wrongly: a **miss** is a run that diverged after the
hold (a held probe counts it as not diverged) or ended with a non-finite final val loss and no
divergence flagged (a whole probe counts that as diverged; a held one never sees the end).

Every table is read as committed, runs trained whole by every stage (curve points stopped early
and probes already held are left out: they say nothing of what came after their step). The
reference's three shards are the dense reference; the others are the committed experiments,
the divergence rule the same in all (a mean train loss over 5 steps above the threshold after
warmup, or a non-finite loss). Run::

    python -m research.divergence_steps [--hold 64] [--write docs/early-stop.md]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from research import REPO
from research.estimators import write_block

HELD = ("paused", "pruned")  # runs stopped at a step before their end, by a rule or a hold


def whole_runs(path: Path) -> pd.DataFrame:
    """The runs of one ``runs.csv`` trained to their end or stopped by the divergence rule."""
    runs = pd.read_csv(path, low_memory=False)
    return runs[~runs["status"].isin(HELD) & runs["steps"].notna()]


def source_row(name: str, runs: pd.DataFrame, hold: int) -> dict[str, object]:
    """One table's diverged runs: how many, where the rule stopped them, and the hold's misses."""
    diverged = runs[runs["status"] == "diverged"]
    after = diverged["diverged_step"] - diverged["warmup_steps"]
    final = pd.to_numeric(runs["final_val_loss"], errors="coerce").to_numpy(dtype=float)
    unflagged = int(((runs["status"] != "diverged") & ~np.isfinite(final)).sum())
    return {
        "source": name,
        "runs": len(runs),
        "past the hold": int((runs["steps"] > hold).sum()),
        "diverged": len(diverged),
        "warmups": ", ".join(str(w) for w in sorted(diverged["warmup_steps"].unique())) or "–",
        "latest step": int(diverged["diverged_step"].max()) if len(diverged) else math.nan,
        "latest after warmup": int(after.max()) if len(diverged) else math.nan,
        "at the first step after warmup": float((after <= 1).mean()) if len(diverged) else math.nan,
        "misses": int((diverged["diverged_step"] > hold).sum()) + unflagged,
    }


def table(hold: int) -> pd.DataFrame:
    """Every committed ``runs.csv`` with a diverged run, and all of them (a run two reports
    share counted once)."""
    rows = []
    frames = []
    for path in sorted(REPO.glob("reports/**/runs.csv")):
        runs = whole_runs(path)
        if (runs["status"] == "diverged").any():
            frames.append(runs)
            rows.append(
                source_row(path.parent.relative_to(REPO / "reports").as_posix(), runs, hold)
            )
    every = pd.concat(frames, ignore_index=True).drop_duplicates("run_id")  # shared runs once
    rows.append(source_row("all", every, hold))
    return pd.DataFrame(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hold", type=int, default=64, help="the step a probe is held at")
    parser.add_argument("--write", type=Path, help="a doc whose divergence-steps block to rewrite")
    args = parser.parse_args()
    text = table(args.hold).to_markdown(index=False, floatfmt=".3g")
    if args.write:
        command = f"python -m research.divergence_steps --hold {args.hold} --write "
        write_block(args.write, "divergence-steps", text, command + args.write.as_posix())
    print(text)


if __name__ == "__main__":
    main()
