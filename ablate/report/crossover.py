"""The cross-over of the tuned A/B: every tuned Δ measured again with both variants at one
setting, the baseline's tuned (LR, warmup) and the variant's (:func:`ablate.core.plan.
plan_crossover`), so a tuned difference that comes from where each variant was placed on its
LR curve, not from the variant, shows as one that depends on the LR.

Per variant, three Δ (variant − baseline) in the final loss on the comparison's split, paired
by seed: each at its own tuned settings (the tuned A/B, judged in the summary with the
report's other comparisons), both at the baseline's, both at the variant's. The shared
settings each get their 95% t interval and the verdict word at α (:func:`ablate.report.
verdict.verdict`: different, equivalent within ``min_effect``, or inconclusive). The Δ holds
at a shared setting when the two give the same word (for *different*, with the same sign);
where they do not, it **depends on the LR**, and so does a tuned *different* that the two do
not both find with its sign (:func:`crossover_claim`, the summary's word).
"""

from __future__ import annotations

import pandas as pd

from ablate.core.experiment import MIN_EFFECT
from ablate.core.sequential import ALPHA
from ablate.report.analysis import mean_difference, scored_split
from ablate.report.load import StoredExperiment
from ablate.report.section import Section
from ablate.report.text import delta_ci, p_text
from ablate.report.verdict import verdict

DEPENDS = "depends on the LR"


def losses_at(frame: pd.DataFrame, variant: str, lr: float, warmup: int, metric: str) -> pd.Series:
    """``{seed: metric}`` of the variant's finished runs in ``frame`` at (``lr``, ``warmup``)."""
    mine = frame[
        (frame["variant"] == variant)
        & (frame["status"] == "finished")
        & (frame["lr"] == lr)
        & (frame["warmup_steps"] == warmup)
    ]
    return mine.set_index("seed")[metric].astype(float)


def settings_of(tuned: pd.DataFrame, variant: str) -> tuple[float, int] | None:
    """The variant's tuned (LR, warmup), None without a tuned run."""
    mine = tuned[tuned["variant"] == variant]
    if mine.empty:
        return None
    return float(mine["lr"].iloc[0]), int(mine["warmup_steps"].iloc[0])


def judged_row(
    variant: str, where: str, a: pd.Series, b: pd.Series, min_effect: float
) -> dict[str, object]:
    """Δ = a − b over the seeds both have, its interval, p and verdict word."""
    seeds = a.index.intersection(b.index)
    diff = mean_difference(a[seeds] - b[seeds])
    found = verdict((a[seeds] - b[seeds]).to_numpy(), min_effect, diff.p_value, 1, ALPHA)
    return {
        "variant": variant,
        "setting": where,
        "pairs": diff.n_pairs,
        "diff": diff.mean,
        "ci_low": diff.ci_low,
        "ci_high": diff.ci_high,
        "p": diff.p_value,
        "verdict": found.word if found else "no verdict",
    }


def crossover_table(stored: StoredExperiment, min_effect: float) -> pd.DataFrame:
    """Per variant and setting (own, the baseline's, the variant's): Δ and its verdict."""
    variants = stored.manifest["variants"]
    baseline, runs = variants[0], pd.concat([stored.tuned, stored.crossover])
    metric = f"final_{scored_split(stored.tuned)}_loss"
    base = settings_of(stored.tuned, baseline)
    rows = []
    for variant in variants[1:]:
        mine = settings_of(stored.tuned, variant)
        if base is None or mine is None:
            continue
        own = (losses_at(runs, variant, *mine, metric), losses_at(runs, baseline, *base, metric))
        mine_row = judged_row(variant, "each at its own", *own, min_effect)
        rows.append({**mine_row, "verdict": "the summary's"})  # judged there, in its family
        for who, (lr, warmup) in ((baseline, base), (variant, mine)):
            a = losses_at(runs, variant, lr, warmup, metric)
            b = losses_at(runs, baseline, lr, warmup, metric)
            where = f"both at {who}'s ({lr:.3g}, {warmup})"
            rows.append(judged_row(variant, where, a, b, min_effect))
    return pd.DataFrame(rows)


def crossover_word(rows: pd.DataFrame) -> str:
    """One variant's answer at a shared setting: the common verdict of its two shared
    settings, or :data:`DEPENDS`."""
    shared = rows[rows["setting"] != "each at its own"]
    if len(shared) < 2 or (shared["pairs"] < 2).any():
        return "no verdict"
    first, second = shared["verdict"].iloc[0], shared["verdict"].iloc[1]
    signs = set((shared["diff"] > 0).tolist())
    if first != second or (first == "different" and len(signs) > 1):
        return DEPENDS
    return str(first)


def crossover_claim(rows: pd.DataFrame, tuned_word: str, tuned_diff: float) -> str:
    """The cross-over's answer on one variant's tuned Δ (its verdict ``tuned_word``, its mean
    ``tuned_diff``): :func:`crossover_word`, except that a tuned *different* that the two shared
    settings do not both find, with its sign, is :data:`DEPENDS`: where each variant sits on
    its LR curve made it."""
    word = crossover_word(rows)
    if tuned_word != "different" or word == "no verdict":
        return word
    shared = rows[rows["setting"] != "each at its own"]
    same_sign = bool(((shared["diff"] > 0) == (tuned_diff > 0)).all())
    return word if word == "different" and same_sign else DEPENDS


def crossover_lines(table: pd.DataFrame, baseline: str) -> list[str]:
    """Each variant's cross-over answer in words."""
    lines = []
    for variant, rows in table.groupby("variant", sort=False):
        word = crossover_word(rows)
        held = (
            f"**{DEPENDS}**: the two shared settings disagree, so the tuned Δ is not a "
            "property of the variant alone"
            if word == DEPENDS
            else f"at both shared settings: **{word}**"
        )
        lines.append(f"- {variant} − {baseline}, cross-over: {held}.")
    return lines


def crossover_section(stored: StoredExperiment) -> Section:
    """Markdown and CSV of the cross-over (nothing without its runs)."""
    if stored.crossover.empty or stored.tuned.empty:
        return Section()
    min_effect = stored.manifest.get("min_effect", MIN_EFFECT)
    table = crossover_table(stored, min_effect)
    if table.empty:
        return Section()
    split = scored_split(stored.tuned)
    baseline = stored.manifest["variants"][0]
    shown = pd.DataFrame(
        {
            "variant": table["variant"],
            "setting (LR, warmup)": table["setting"],
            "pairs": table["pairs"],
            f"Δ final {split} [95% CI]": [
                delta_ci(r.diff, r.ci_low, r.ci_high) for r in table.itertuples()
            ],
            "p": table["p"].map(p_text),
            "verdict": table["verdict"],
        }
    )
    lines = [
        "### Cross-over: the tuned Δ at one shared setting",
        "",
        "Each variant also trained at the other's tuned LR and warmup on the tuned seeds, so "
        "each difference is measured with both at one setting, the baseline's and the "
        f"variant's, beside each at its own (Δ = variant − baseline on the {split} split, "
        f"paired by seed, 95% t interval; verdict at α {ALPHA:g}, equivalence within "
        f"±{min_effect:g}).",
        "",
        *crossover_lines(table, baseline),
        "",
        shown.to_markdown(index=False),
        "",
    ]
    return Section(lines, {"crossover.csv": table})
