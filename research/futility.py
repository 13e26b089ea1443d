"""``decide:``'s futility stop (:func:`ablate.core.sequential.futile`) replayed on the dense
reference: the 2×2 of the draws ``research.held_to_runs`` replays (the curve's bagged argmin on
each draw's curve seeds, the LRs it trains at, the cross-over on its A/B seeds and the seeds
``decide:`` adds), judged at each look by the report's rule at the primary's level, without a
futility stop and with one from each look on. Per rule: the share of draws decided and of each
word, the A/B seeds used (each a seed of the 2×2: four runs), how often the 95% interval where it
stopped holds the reference's own main effect, how often it says *differs from 0*, and the
mean half-width of its interval at the primary's level (the precision a stop gives up).

Run::

    python -m research.futility [--write docs/early-stop.md]
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from ablate.core.sequential import futile
from ablate.report.verdict import difference_estimate, seeds_to_decide
from research import REPO
from research import held_to_runs as held
from research import reference as ref
from research.estimators import command_line, write_block
from research.sequential import interval_words, primary_level


def reference_effects(
    design: Experiment, limit: int = held.DRAW_LIMIT
) -> tuple[np.ndarray, float, list[int]]:
    """Per draw (up to ``limit``) and A/B seed (added ones after), the 2×2's main effect on the
    reference's seeds 0–15, the reference's own main effect, and the seed counts ``decide:``
    looks at."""
    curves = ref.load_reference([REPO / p for p in ref.REFERENCE_RUNS])
    truth = held.reference_truth(curves, ref.BAND)
    seeds = held.seeds_of(curves)
    counts = held.decide_counts(design, len(seeds))
    n_ab = len(design.seeds)
    draws = held.disjoint_draws(seeds, len(design.curve_seeds()), n_ab, limit, counts[-1] - n_ab)
    estimator = held.OPTIMA["bagged_argmin"][1]  # the curve stage's
    replays = [held.replay(curves, d, estimator, design, truth, ref.BAND) for d in draws]
    return held.main_effects(replays), truth.main_effect, counts


def stopped_at(
    effects: np.ndarray, counts: list[int], margin: float, level: float, first: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Each draw's word and the seeds it stopped at under ``decide:``'s rule, with a futility
    stop from look ``first`` (1-based) on, or none (None): at each look a draw still open is
    judged (:func:`research.sequential.interval_words`, the report's rule) and stops where it
    is decided, or where :func:`ablate.core.sequential.futile` says its seeds left cannot."""
    words = np.full(len(effects), "inconclusive", dtype=object)
    used = np.full(len(effects), counts[-1])
    open_ = np.ones(len(effects), dtype=bool)
    for look, count in enumerate(counts, 1):
        rows = np.flatnonzero(open_)
        found = interval_words(effects[rows, :count, None], margin, level)[0][:, 0]
        words[rows] = found
        for row, word in zip(rows, found, strict=True):
            if word != "inconclusive":
                used[row], open_[row] = count, False
            elif first is not None:
                estimate = difference_estimate(effects[row, :count], level)
                if futile([seeds_to_decide(estimate, margin)], look, counts, first):
                    used[row], open_[row] = count, False
    return words, used


def scores(
    effects: np.ndarray, truth: float, counts: list[int], margin: float, first: int | None
) -> dict[str, object]:
    """One rule's row (:func:`stopped_at`) over every draw."""
    level = primary_level(len(counts))
    words, used = stopped_at(effects, counts, margin, level, first)
    covers, excludes, widths = [], [], []
    for row, count in enumerate(used):
        plain = difference_estimate(effects[row, :count], 0.95)
        at_level = difference_estimate(effects[row, :count], level)
        covers.append(plain.low <= truth <= plain.high)
        excludes.append(at_level.low > 0 or at_level.high < 0)
        widths.append((at_level.high - at_level.low) / 2)
    rule = "none" if first is None else f"from look {first} ({counts[first - 1]} seeds)"
    return {
        "futility stop": rule,
        "draws": len(effects),
        "decided": float(np.mean(words != "inconclusive")),
        "equivalent within ±m": float(np.mean(words == "equivalent")),
        "differs from 0": float(np.mean(excludes)),
        "A/B seeds, mean": float(used.mean()),
        "95% CI covers": float(np.mean(covers)),
        "half-width at the level": float(np.mean(widths)),
    }


def futility_rows(
    effects: np.ndarray, truth: float, counts: list[int], margin: float, firsts: Sequence[int]
) -> pd.DataFrame:
    """Without a futility stop, and with one from each of ``firsts`` (1-based looks)."""
    rules: list[int | None] = [None, *firsts]
    return pd.DataFrame([scores(effects, truth, counts, margin, first) for first in rules])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m research.futility")
    parser.add_argument("--experiment", type=Path, default=REPO / "experiments" / "ln_vs_rms.yaml")
    parser.add_argument("--write", type=Path, default=None, help="a doc with the marked block")
    args = parser.parse_args(argv)
    design = load_experiment(args.experiment)
    effects, truth, counts = reference_effects(design)
    assert design.decide is not None
    firsts = range(1, len(counts))
    table = futility_rows(effects, truth, counts, design.analysis.min_effect, firsts)
    text = table.to_markdown(index=False, floatfmt=".3g")
    if args.write:
        write_block(args.write, "futility", text, command_line("research.futility", argv))
    print(text)


if __name__ == "__main__":
    main()
