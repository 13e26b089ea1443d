"""The cross-over of the tuned A/B, read as a 2×2: each variant and the baseline at both tuned
settings, the baseline's (LR, warmup) and the variant's (:func:`ablate.core.plan.
plan_crossover`), paired by seed.

The plan's primary estimand, the variant's main effect over the 2×2, is judged in the Answer
(:mod:`ablate.report.estimands`); this section gives its parts, all descriptive (95% t
intervals, no verdict): Δ = variant − baseline at each setting and each at its own (the tuned
gain), the main effect (the mean of the two settings' Δ), the setting effect (both moved from
the baseline's setting to the variant's) and the interaction (Δ at the variant's setting less
Δ at the baseline's). A tuned gain that the main effect does not carry is where each variant
sits on its LR curve: the setting effect.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ablate.report.analysis import mean_difference, scored_split
from ablate.report.load import StoredExperiment
from ablate.report.section import Section
from ablate.report.text import delta_ci, p_text

Setting = tuple[float, int]


def losses_at(frame: pd.DataFrame, variant: str, lr: float, warmup: int, metric: str) -> pd.Series:
    """``{seed: metric}`` of the variant's finished runs in ``frame`` at (``lr``, ``warmup``)."""
    mine = frame[
        (frame["variant"] == variant)
        & (frame["status"] == "finished")
        & (frame["lr"] == lr)
        & (frame["warmup_steps"] == warmup)
    ]
    return mine.set_index("seed")[metric].astype(float)


def settings_of(tuned: pd.DataFrame, variant: str) -> Setting | None:
    """The variant's tuned (LR, warmup), None without a tuned run."""
    if tuned.empty:
        return None
    mine = tuned[tuned["variant"] == variant]
    if mine.empty:
        return None
    return float(mine["lr"].iloc[0]), int(mine["warmup_steps"].iloc[0])


@dataclass(frozen=True)
class TwoByTwo:
    """Per seed, the final loss of the baseline and the variant at the baseline's tuned
    setting and at the variant's, every one finished (columns ``bb``, ``bv``, ``vb``, ``vv``:
    who, at whose setting)."""

    variant: str
    baseline: str
    at_baseline: Setting
    at_variant: Setting
    cells: pd.DataFrame

    @property
    def tuned(self) -> pd.Series:
        """Each at its own setting: the tuned gain."""
        return self.cells["vv"] - self.cells["bb"]

    @property
    def at_baseline_setting(self) -> pd.Series:
        return self.cells["vb"] - self.cells["bb"]

    @property
    def at_variant_setting(self) -> pd.Series:
        return self.cells["vv"] - self.cells["bv"]

    @property
    def main(self) -> pd.Series:
        """The variant's main effect: the mean of its Δ at the two settings."""
        return (self.at_baseline_setting + self.at_variant_setting) / 2

    @property
    def setting(self) -> pd.Series:
        """The setting's main effect: the variant's setting less the baseline's, both norms."""
        c = self.cells
        return ((c["bv"] - c["bb"]) + (c["vv"] - c["vb"])) / 2

    @property
    def interaction(self) -> pd.Series:
        """Δ at the variant's setting less Δ at the baseline's."""
        return self.at_variant_setting - self.at_baseline_setting

    def parts(self) -> dict[str, pd.Series]:
        """Every part of the 2×2 by the name the report gives it."""
        (lr_b, warm_b), (lr_v, warm_v) = self.at_baseline, self.at_variant
        return {
            "each at its own (the tuned gain)": self.tuned,
            f"both at {self.baseline}'s ({lr_b:.3g}, {warm_b})": self.at_baseline_setting,
            f"both at {self.variant}'s ({lr_v:.3g}, {warm_v})": self.at_variant_setting,
            "main effect: the mean of the two": self.main,
            f"setting effect: {self.variant}'s less {self.baseline}'s": self.setting,
            "interaction: Δ at the second less Δ at the first": self.interaction,
        }


def two_by_two(stored: StoredExperiment, variant: str) -> TwoByTwo | None:
    """The variant's 2×2 with the baseline over the seeds with all four runs finished; None
    without a cross-over (no tuned run, or both tuned at one setting)."""
    baseline = stored.manifest.variants[0]
    base, mine = settings_of(stored.tuned, baseline), settings_of(stored.tuned, variant)
    if base is None or mine is None or base == mine or stored.crossover.empty:
        return None
    runs = pd.concat([stored.tuned, stored.crossover])
    metric = f"final_{scored_split(stored.tuned)}_loss"
    cells = pd.DataFrame(
        {
            "bb": losses_at(runs, baseline, *base, metric),
            "bv": losses_at(runs, baseline, *mine, metric),
            "vb": losses_at(runs, variant, *base, metric),
            "vv": losses_at(runs, variant, *mine, metric),
        }
    ).dropna()
    return TwoByTwo(variant, baseline, base, mine, cells) if len(cells) else None


def described_row(variant: str, part: str, values: pd.Series) -> dict[str, object]:
    """One part of the 2×2 over its seeds: mean, 95% interval, p (descriptive)."""
    diff = mean_difference(values)
    return {
        "variant": variant,
        "part": part,
        "pairs": diff.n_pairs,
        "diff": diff.mean,
        "ci_low": diff.ci_low,
        "ci_high": diff.ci_high,
        "p": diff.p_value,
    }


def crossover_table(stored: StoredExperiment) -> pd.DataFrame:
    """Per variant with a 2×2: every part of it (:meth:`TwoByTwo.parts`)."""
    rows = []
    for variant in stored.manifest.variants[1:]:
        crossed = two_by_two(stored, variant)
        if crossed is not None:
            rows += [described_row(variant, p, v) for p, v in crossed.parts().items()]
    return pd.DataFrame(
        rows, columns=["variant", "part", "pairs", "diff", "ci_low", "ci_high", "p"]
    )


def crossover_section(stored: StoredExperiment) -> Section:
    """Markdown and CSV of the 2×2 (nothing without its runs)."""
    if stored.crossover.empty or stored.tuned.empty:
        return Section()
    table = crossover_table(stored)
    if table.empty:
        return Section()
    split = scored_split(stored.tuned)
    shown = pd.DataFrame(
        {
            "variant": table["variant"],
            "part of the 2×2": table["part"],
            "pairs": table["pairs"],
            f"Δ final {split} [95% CI]": [
                delta_ci(r.diff, r.ci_low, r.ci_high) for r in table.itertuples()
            ],
            "p": table["p"].map(p_text),
        }
    )
    lines = [
        "### Cross-over: the 2×2 of variant and setting",
        "",
        "Each variant also trained at the other's tuned LR and warmup on the tuned seeds, so "
        "both are measured at both settings. Δ = variant − baseline on the "
        f"{split} split, paired by seed, over the seeds with all four runs; descriptive 95% t "
        "intervals (the main effect's verdict, at the plan's level, is the Answer's).",
        "",
        shown.to_markdown(index=False),
        "",
    ]
    return Section(lines, {"crossover.csv": table})
