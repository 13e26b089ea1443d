"""Where the LR optimum lies at the warmup the tuned runs train at.

The default experiments choose each norm's LR on its curve at the file's warmup (20 steps) and
train the tuned runs at the warmup the file declares (``curve.warmup_steps``: 64): a choice one
coordinate at a time, right only where the optimum does not move with the warmup. Two sets of
real runs, both committed in ``reports/warmup64``, measure whether it moves:

- **the dense reference's slice at both warmups**: seeds 0–3, both norms, every 2^(1/4) of the LR
  from 2^-11 to 2^-6 at warmup 20 (``reports/reference_curves``) and the same runs at warmup 64
  (``reports/warmup64/curves``), and at warmup 64 on seeds 13–16 too. Per norm and slice: the
  optimum (the lattice LR of the lowest seed-mean final val loss, what the curve selects on),
  the final test loss there and at the LR the default experiment trained at with its LR chosen
  at warmup 20
  (``reports/earlier_protocol/lr_at_warmup_20``), and the difference, paired by seed with its
  95% t interval;
- **that protocol's tuned runs walked upwards at their own warmup**: its five 2×2 seeds, each
  norm from its tuned run in 2^(1/4) steps at warmup 64 (``reports/warmup64/walks``).
  Per norm and LR: the final test loss minus the tuned run's, paired by seed, with its 95% t
  interval; and at every LR both norms reached, RMSNorm's minus LayerNorm's (the comparison at
  matched settings, at LRs the tuned runs did not train at);
- **the LRs chosen at the declared warmup, on seeds nothing chose them on**: the same slice at
  warmup 64 on seeds 13–16 (``reports/warmup64/curves_seeds_13_16``), which neither the
  default's curve (seeds 3–6) nor its 2×2 (0–2, 7–12) trains: per norm, the LR the default
  experiment now trains at against those seeds' optimum, in lattice steps and in test loss.

Run::

    python -m research.lr_at_warmup [--write docs/early-stop.md]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.report.analysis import mean_difference
from research import REPO
from research.estimators import write_block
from research.reference import Curves, load_reference, optimum

UNSEEN = REPO / "reports/warmup64/curves_seeds_13_16/runs.csv"  # no stage of the default's
CURVES = {  # the reference's slice: (warmup, its seeds) -> its runs.csv
    (20, "0–3"): REPO / "reports/reference_curves/runs.csv",
    (64, "0–3"): REPO / "reports/warmup64/curves/runs.csv",
    (64, "13–16"): UNSEEN,
}
WALKS = REPO / "reports/warmup64/walks/runs.csv"
DEFAULT_RUNS = REPO / "reports/earlier_protocol/lr_at_warmup_20/ln_vs_rms/runs.csv"  # chosen at 20
CHOSEN_RUNS = REPO / "reports/ln_vs_rms/runs.csv"  # the LRs chosen at the declared warmup


def paired(differences: np.ndarray) -> tuple[float, float, float]:
    """The mean of per-seed ``differences`` and its 95% t interval (NaN ends under 2 seeds), as
    the report computes a paired difference (:func:`ablate.report.analysis.mean_difference`)."""
    found = mean_difference(pd.Series(differences))
    return found.mean, found.ci_low, found.ci_high


def interval_text(mean: float, low: float, high: float) -> str:
    """``-0.0512 [-0.0601, -0.0423]``."""
    return f"{mean:+.4f} [{low:+.4f}, {high:+.4f}]"


def lattice_step(lr: float) -> int:
    """The LR's exponent on the 2^(1/4) lattice: 2^(k/4)."""
    return round(math.log2(lr) * 4)


def optimum_rows(
    curves: dict[tuple[int, str], dict[str, Curves]], trained: dict[str, float]
) -> pd.DataFrame:
    """Per norm and (warmup, seeds): the curve's optimum, the test loss there and at
    ``trained`` (the default's tuned LR of that norm, a lattice point), and trained's minus
    the optimum's, paired by seed."""
    rows = []
    for (warmup, seeds), by_variant in curves.items():
        for variant, curve in sorted(by_variant.items()):
            best = optimum(curve)
            at_best = curve.test[curve.row(best)]
            at_trained = curve.test[curve.row(curve.nearest(trained[variant]))]
            rows.append(
                {
                    "variant": variant,
                    "warmup": warmup,
                    "seeds": seeds,
                    "optimum": f"{best:.3g} (2^({lattice_step(best)}/4))",
                    "test loss there": round(float(np.mean(at_best)), 4),
                    "trained at": f"{trained[variant]:.3g}",
                    "test loss at it": round(float(np.mean(at_trained)), 4),
                    "trained at − optimum, paired [95%]": interval_text(
                        *paired(at_trained - at_best)
                    ),
                }
            )
    return pd.DataFrame(rows)


def walk_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """Per norm and LR walked: the final test loss minus the tuned run's, paired by seed (the
    seeds both have), with its mean and 95% t interval. LRs are read as lattice points: in
    these runs a tuned run's LR is rounded to 12 digits (as ``trained_lr`` gave it then), so
    the walk's start at the same point is another run, with the same losses."""
    rows = []
    runs = runs.assign(step=runs["lr"].map(lattice_step))
    for variant, mine in runs.groupby("variant", sort=False):
        start = lattice_step(float(mine.loc[mine["group"] == "tuned", "lr"].iloc[0]))
        by_seed = mine.pivot_table(
            index="step", columns="seed", values="final_test_loss", aggfunc="first"
        )
        tuned = by_seed.loc[start]
        for step, losses in by_seed[by_seed.index >= start].iterrows():
            both = losses.notna() & tuned.notna()
            differences = (losses[both] - tuned[both]).to_numpy(dtype=float)
            rows.append(
                {
                    "variant": variant,
                    "LR": f"{2.0 ** (step / 4):.3g}",
                    "octaves above the tuned LR": (step - start) / 4,
                    "seeds": int(both.sum()),
                    "test loss": round(float(losses[both].mean()), 4),
                    "− the tuned run's, paired [95%]": interval_text(*paired(differences)),
                }
            )
    return pd.DataFrame(rows)


def norm_rows(runs: pd.DataFrame) -> pd.DataFrame:
    """At every lattice LR both norms were walked to: the second norm's final test loss minus
    the first's, paired by seed, with its 95% t interval (the cross-over's comparison at
    matched settings, at LRs the tuned runs did not train at)."""
    runs = runs.assign(step=runs["lr"].map(lattice_step))
    table = runs.pivot_table(
        index="step", columns=["variant", "seed"], values="final_test_loss", aggfunc="first"
    )
    first, second = list(dict.fromkeys(runs["variant"]))
    rows = []
    for step, losses in table.iterrows():
        differences = (losses[second] - losses[first]).dropna().to_numpy(dtype=float)
        if len(differences):
            rows.append(
                {
                    "LR": f"{2.0 ** (step / 4):.3g}",
                    "seeds": len(differences),
                    f"{second} − {first}, paired [95%]": interval_text(*paired(differences)),
                }
            )
    return pd.DataFrame(rows)


def trained_lrs(path: Path = DEFAULT_RUNS) -> dict[str, float]:
    """Each norm's LR in the tuned runs of ``path`` (default: the protocol that chose it at
    warmup 20)."""
    runs = pd.read_csv(path, low_memory=False)
    tuned = runs[runs["group"] == "tuned"]
    return {str(v): float(rows["lr"].iloc[0]) for v, rows in tuned.groupby("variant", sort=False)}


def chosen_rows(unseen: dict[str, Curves], chosen: dict[str, float]) -> pd.DataFrame:
    """Per norm, on seeds no stage of the protocol trained: the LR ``chosen`` (at the declared
    warmup) against those seeds' optimum, lattice steps apart and in test loss, paired."""
    rows = []
    for variant, curve in sorted(unseen.items()):
        best = optimum(curve)
        at = curve.nearest(chosen[variant])
        gap = curve.test[curve.row(at)] - curve.test[curve.row(best)]
        rows.append(
            {
                "variant": variant,
                "seeds": ", ".join(str(s) for s in curve.seeds),
                "chosen": f"{at:.3g}",
                "their optimum": f"{best:.3g}",
                "steps apart": lattice_step(at) - lattice_step(best),
                "chosen − optimum, test, paired [95%]": interval_text(*paired(gap)),
            }
        )
    return pd.DataFrame(rows)


def tables() -> str:
    """The four tables as markdown, the curves' first."""
    curves = {warmup: load_reference(path) for warmup, path in CURVES.items()}
    walks = pd.read_csv(WALKS, low_memory=False)
    return "\n\n".join(
        [
            optimum_rows(curves, trained_lrs()).to_markdown(index=False),
            walk_rows(walks).to_markdown(index=False),
            norm_rows(walks).to_markdown(index=False),
            chosen_rows(load_reference(UNSEEN), trained_lrs(CHOSEN_RUNS)).to_markdown(index=False),
        ]
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, help="a doc whose lr-at-warmup block to rewrite")
    args = parser.parse_args()
    text = tables()
    if args.write:
        command = "python -m research.lr_at_warmup --write " + args.write.as_posix()
        write_block(args.write, "lr-at-warmup", text, command)
    print(text)


if __name__ == "__main__":
    main()
