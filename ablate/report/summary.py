"""The report's written summary: every sentence with the number behind it and its uncertainty.

Leads with the tuned comparison when there is a search (the factors' main effects in a grid),
gives each paired comparison its verdict (different, equivalent within ±``analysis.min_effect``
or inconclusive with the seeds it would need: :mod:`ablate.report.verdict`) from its own paired
differences, Holm-adjusts p-values when there are several comparisons, names unstable runs,
and gives the max stable LRs (:mod:`ablate.report.boundaries`). With ``decide:`` every verdict
is at one look's level and the summary says how many seeds the leading comparison took and why
it stopped; :func:`leading_verdicts` is what the pipeline's ``decide`` stage stops on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ablate.core.experiment import MIN_EFFECT
from ablate.core.sequential import ALPHA, look_alpha
from ablate.core.simulate import SIMULATED_IMPL
from ablate.report import boundaries, usable
from ablate.report.analysis import (
    holm,
    matched_differences,
    scored_split,
    t_interval,
    variant_table,
)
from ablate.report.crossover import DEPENDS, crossover_claim, crossover_table, crossover_word
from ablate.report.factorial import Design, level_text
from ablate.report.load import StoredExperiment
from ablate.report.text import p_text, signed
from ablate.report.verdict import Verdict, verdict

NOT_QUALITY = "not a quality comparison"
NO_VERDICT = "no verdict"


@dataclass(frozen=True)
class Judging:
    """What every comparison of a report is judged by."""

    min_effect: float
    family: int  # comparisons in the report
    alpha: float  # the level: α, or one look's with ``decide:``


def judging(manifest: dict, table: pd.DataFrame, tuned: pd.DataFrame | None) -> Judging:
    """The report's smallest effect, family and level (:func:`look_level`)."""
    min_effect = manifest.get("min_effect", MIN_EFFECT)  # stored before it was kept
    return Judging(min_effect, comparisons(table, tuned), look_level(manifest))


def look_level(manifest: dict) -> float:
    """The level each verdict tests at: α, or with ``decide:`` α over its looks
    (:mod:`ablate.core.sequential`)."""
    decided = manifest.get("decide")
    return look_alpha(len(decided["looks"])) if decided else ALPHA


def judged(row: pd.Series, baseline: pd.Series, runs: pd.DataFrame, how: Judging) -> Verdict | str:
    """The verdict of one comparison (:mod:`ablate.report.verdict`) from its own paired
    differences; :data:`NOT_QUALITY` where either side has runs that diverged or collapsed,
    :data:`NO_VERDICT` under 2 pairs."""
    unlearned = [t for t in (unlearned_text(row), unlearned_text(baseline)) if t]
    if unlearned and int(row["n_pairs"]) >= 2:
        return NOT_QUALITY
    p = row["p_holm"] if "p_holm" in row else row["paired_t_p"]
    metric = f"final_{row.get('scored_on', 'val')}_loss"
    diffs = matched_differences(runs, row["variant"], baseline["variant"], metric).to_numpy()
    found = verdict(diffs, how.min_effect, p, how.family, how.alpha)
    return NO_VERDICT if found is None else found


def _verdict_words(row: pd.Series, found: Verdict | str, how: Judging) -> str:
    """The comparison's verdict and what the design could have seen."""
    if not isinstance(found, Verdict):
        return f"only {int(row['n_pairs'])} matched pair(s): no interval, so no verdict either way."
    words = f"**{found.text()}**"
    if found.word == "different":
        side = "lower" if row["diff_vs_baseline"] < 0 else "higher"
        words += f": {row['variant']}'s loss is {side}"
    reach = found.reach
    adjusted = f", Bonferroni over {how.family}" if how.family > 1 else ""
    level = f", each at α {how.alpha:.4f} of one look" if how.alpha < ALPHA else ""
    return (
        f"{words} (paired SD {reach.sd:.4f} over {reach.pairs} seeds: detectable at 80% power "
        f"{reach.mde:.4f}; {reach.needed_text(how.min_effect)}; equivalence within "
        f"±{how.min_effect:g}, TOST p {p_text(found.tost_p)}{adjusted}{level})."
    )


def unlearned_text(row: pd.Series) -> str | None:
    """For a variant some of whose runs diverged or collapsed, e.g. ``dyt: 2 of 2 runs
    collapsed``; else None."""
    counts = [
        f"{int(row[kind])} of {int(row['runs'])} runs {kind}"
        for kind in ("diverged", "collapsed")
        if row.get(kind, 0)
    ]
    if row.get("not_learned_yet", 0):
        counts[-1] += f" ({int(row['not_learned_yet'])} still improving: not learned yet)"
    return f"{row['variant']}: {' and '.join(counts)}" if counts else None


def _difference_lines(
    table: pd.DataFrame, runs: pd.DataFrame, how: Judging, where: str
) -> list[str]:
    """One sentence per variant: its paired difference to the baseline and its verdict; where
    either side has runs that diverged or collapsed, that is the verdict instead."""
    baseline = table.iloc[0]
    lines = []
    for _, row in table.iloc[1:].iterrows():
        holm_text = f", Holm-adjusted {p_text(row['p_holm'])}" if "p_holm" in row else ""
        adjusted = "p_holm" in row or how.alpha < ALPHA  # the verdict's level is not 5%
        level = "95% CI, unadjusted" if adjusted else "95% CI"
        label = f"Final {row.get('scored_on', 'val')} loss {where}".rstrip()
        unlearned = [t for t in (unlearned_text(row), unlearned_text(baseline)) if t]
        found = judged(row, baseline, runs, how)
        if found == NOT_QUALITY:
            lines.append(
                f"- **{label}, {row['variant']} − {baseline['variant']}: not a quality "
                f"comparison: {'; '.join(unlearned)}** (its mean paired difference, "
                f"{signed(row['diff_vs_baseline'])}, would average over runs that learned "
                "nothing or stopped early: no verdict is drawn from it)."
            )
            continue
        lines.append(
            f"- **{label}, {row['variant']} − {baseline['variant']}: "
            f"{signed(row['diff_vs_baseline'])}** ({level} [{signed(row['diff_ci_low'])}, "
            f"{signed(row['diff_ci_high'])}]"
            f"{_looks_interval(row, runs, baseline, how, getattr(found, 'word', ''))}, "
            f"paired t-test p = {p_text(row['paired_t_p'])}{holm_text}): "
            + _verdict_words(row, found, how)
            + (f" ({'; '.join(unlearned)}.)" if unlearned else "")
        )
    return lines


def _looks_interval(
    row: pd.Series, runs: pd.DataFrame, baseline: pd.Series, how: Judging, word: str
) -> str:
    """With ``decide:``, the interval at the level its verdict tests at (α over the looks, and
    over the report's comparisons: Bonferroni), so it covers Δ as the looks require: 1 − α
    for the test of Δ = 0, and for an *equivalent* verdict the TOST's 1 − 2α, which lies
    inside ±min_effect exactly where the TOST passes; else nothing."""
    if how.alpha >= ALPHA:
        return ""
    metric = f"final_{row.get('scored_on', 'val')}_loss"
    diffs = matched_differences(runs, row["variant"], baseline["variant"], metric)
    alpha = how.alpha / max(how.family, 1)
    level = 1 - 2 * alpha if word == "equivalent" else 1 - alpha
    low, high = t_interval(diffs.to_numpy(dtype=float), level)
    test = "the TOST's" if word == "equivalent" else "the test's"
    return (
        f"; {100 * level:.2f}% CI, {test} for its {how.family} comparison(s) and looks "
        f"[{signed(low)}, {signed(high)}]"
    )


def quality_tables(
    stored: StoredExperiment, variants: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The shared-LR and the tuned variant tables, their p-values Holm-adjusted together, each
    scored on its runs' :func:`scored_split`."""
    table = variant_table(stored.main, variants, variants[0], scored_split(stored.main))
    tuned = (
        variant_table(stored.tuned, variants, variants[0], scored_split(stored.tuned))
        if len(stored.tuned)
        else None
    )
    return with_holm(table, tuned)


def leading_verdicts(stored: StoredExperiment) -> dict[str, str]:
    """Each variant's verdict word in the leading comparison (tuned if there is one, else the
    shared LR's), as the report gives it: what ``decide:`` looks at."""
    table, tuned = quality_tables(stored, stored.manifest["variants"])
    how = judging(stored.manifest, table, tuned)
    lead, runs = (table, stored.main) if tuned is None else (tuned, stored.tuned)
    found = {
        row["variant"]: judged(row, lead.iloc[0], runs, how) for _, row in lead.iloc[1:].iterrows()
    }
    return {v: (j.word if isinstance(j, Verdict) else j) for v, j in found.items()}


def decide_lines(manifest: dict) -> list[str]:
    """With ``decide:``: the seeds the leading comparison used, of how many, and why it
    stopped."""
    decided = manifest.get("decide")
    if not decided:
        return []
    why = {
        "decided": "every leading comparison is decided",
        "maximum": "it reached max_seeds with a comparison still undecided",
    }.get(decided["stopped"], "the experiment has not finished deciding")
    return [
        f"- **Seeds until decided:** {len(decided['seeds'])} seeds of at most "
        f"{decided['max_seeds']} (looks at {', '.join(map(str, decided['looks']))} seeds, "
        f"each testing at α {ALPHA:g}/{len(decided['looks'])} = {look_level(manifest):.4f}: "
        f"Bonferroni spending over the looks); it stopped because {why}."
    ]


def effect_sentences(effects: pd.DataFrame) -> list[str]:
    """One sentence per non-first factor level: its main effect, interval and p-values."""
    sentences = []
    for r in effects[effects["effect"].notna()].itertuples():
        supported = (
            "the interval spans zero"
            if r.effect_ci_low <= 0 <= r.effect_ci_high
            else "the interval excludes zero"
        )
        sentences.append(
            f"{r.factor} = {level_text(r.level)}: {signed(r.effect)} "
            f"[{signed(r.effect_ci_low)}, {signed(r.effect_ci_high)}], p {p_text(r.effect_p)}, "
            f"Holm {p_text(r.effect_p_holm)} ({r.seeds} seeds): {supported}."
        )
    return sentences


def unstable_text(table: pd.DataFrame) -> str:
    """Per variant, its diverged and collapsed runs of all its runs ("rms 1 diverged of 3")."""
    parts = []
    for _, r in table.iterrows():
        counts = [f"{r['diverged']} diverged"]
        if r.get("collapsed", 0):
            counts.append(f"{r['collapsed']} collapsed")
        parts.append(f"{r['variant']} {' + '.join(counts)} of {r['runs']}")
    return ", ".join(parts)


def lead_lines(
    stored: StoredExperiment, tuned: pd.DataFrame | None, effects: pd.DataFrame | None = None
) -> list[str]:
    """Which comparison the summary leads with, and why; a design too small to estimate its
    own noise is flagged."""
    decided = stored.manifest.get("decide")
    seeds = decided["seeds"] if decided else stored.manifest["seeds"]
    lines = []
    curve_seeds = sorted({r["seed"] for r in stored.manifest["runs"] if r.get("group") == "curve"})
    if tuned is not None:
        search_seed = stored.studies.search_seed
        chosen = (
            f"its LR curve's optimum on seeds {curve_seeds}"
            if curve_seeds
            else f"the search's best, found on seed {search_seed}"
        )
        lines.append(
            "- **Leading comparison: each variant at its own tuned LR and warmup** "
            f"({chosen}, scored here on seeds {seeds}), since a shared LR favours whichever "
            "variant it happens to suit; the shared-LR comparison follows."
        )
    elif effects is not None:
        lines.append(
            "- **Leading comparison: the factors' main effects**, each level against its "
            "factor's first level, averaged over the other factors within each seed:"
        )
        lines += [f"  - {text}" for text in effect_sentences(effects)]
    if len(seeds) < 3:
        lines.append(
            f"- **Too few seeds:** {len(seeds)} per variant; fewer than 3 estimate their own "
            "noise from at most one degree of freedom, so the intervals below are wide and "
            "every verdict rests on that."
        )
    return lines


def summary_lines(
    table: pd.DataFrame,
    noise: float,
    stored: StoredExperiment,
    tuned: pd.DataFrame | None,
    effects: pd.DataFrame | None = None,
) -> list[str]:
    """The written summary: every sentence carries the number behind it."""
    lines = ["## Summary", ""]
    if stored.missing:
        planned = len({r["run_id"] for r in stored.manifest["runs"]})
        lines.append(
            f"- **Partial results:** {len(stored.missing)} of {planned} planned runs have no "
            "result yet; everything below uses the runs that are stored."
        )
    lines += lead_lines(stored, tuned, effects) + decide_lines(stored.manifest)
    how = judging(stored.manifest, table, tuned)
    if tuned is not None:
        lines += _difference_lines(tuned, stored.tuned, how, "at tuned settings")
        lines += crossover_summary(stored, tuned, how)
    shared = "at the shared LR" if tuned is not None else ""
    lines += _difference_lines(table, stored.main, how, shared)
    if comparisons(table, tuned) > 1:
        lines.append(
            f"- {comparisons(table, tuned)} comparisons in this report: p-values are also "
            "given Holm-adjusted for multiplicity."
        )
    if not math.isnan(noise):
        lines.append(
            f"- Seed-to-seed noise floor (std of the final val loss over seeds, pooled over "
            f"variants): {noise:.4f}."
        )
    lines.append(f"- Unstable main runs: {unstable_text(table)}.")
    lines += throughput_lines(stored.main, list(table["variant"]))
    design = Design.from_manifest(stored.manifest)
    lines += usable.summary_line(usable.usable_table(stored))
    lines += boundaries.summary_lines(stored.studies, design)
    return lines + [""]


LOADED_SPREAD = 0.10  # seeds' speed ratios further apart than this: a shared or loaded machine


@dataclass(frozen=True)
class SpeedRatio:
    """A variant's training tokens/s over the baseline's over matched seeds: the geometric
    mean, its 95% t interval (NaN with fewer than 2 pairs) and the seeds' spread (largest
    ratio over smallest, less 1)."""

    centre: float
    low: float
    high: float
    spread: float


def speed_ratio(runs: pd.DataFrame, variant: str, baseline: str) -> SpeedRatio | None:
    """:class:`SpeedRatio` of ``variant`` over ``baseline`` in ``runs``; None without a pair."""
    speeds = runs.pivot_table(index="seed", columns="variant", values="tokens_per_s")
    if variant not in speeds or baseline not in speeds:
        return None
    pairs = np.log(speeds[variant] / speeds[baseline]).dropna()
    if pairs.empty:
        return None
    low, high = np.exp(t_interval(pairs.to_numpy(), 0.95))
    spread = float(np.exp(pairs.max() - pairs.min()) - 1)
    return SpeedRatio(float(np.exp(pairs.mean())), float(low), float(high), spread)


def throughput_lines(runs: pd.DataFrame, variants: list[str]) -> list[str]:
    """Each variant's training tokens/s over the baseline's, paired by seed with a 95%
    interval; whether the seeds' ratios spread as on a shared or loaded machine; none for
    simulated runs (their speed is the simulator's setting). A speed claim is the
    benchmark's (``ablate bench``: kernels and steps timed back to back), not these."""
    if "tokens_per_s" not in runs or runs.empty:
        return []
    if (runs.get("norm_impl", pd.Series(dtype=str)) == SIMULATED_IMPL).all():
        return []
    finished = runs[runs["status"] == "finished"]
    lines = []
    for variant in variants[1:]:
        found = speed_ratio(finished, variant, variants[0])
        if found is None:
            continue
        interval = "" if math.isnan(found.low) else f" [{found.low:.3f}, {found.high:.3f}]"
        loaded = (
            f"; the seeds' ratios lie {found.spread:.0%} apart: a shared or loaded machine"
            if found.spread > LOADED_SPREAD
            else ""
        )
        lines.append(
            f"- Training throughput, {variant} / {variants[0]}: {found.centre:.3f}×{interval} "
            f"(paired by seed, 95% interval{loaded}); end to end on this machine, not a "
            "kernel benchmark (`ablate bench` times them back to back)."
        )
    return lines


def crossover_summary(stored: StoredExperiment, tuned: pd.DataFrame, how: Judging) -> list[str]:
    """Per variant, whether its tuned Δ holds with both variants at one setting (the
    cross-over, :mod:`ablate.report.crossover`): a tuned *different* that the shared settings
    do not both find with its sign **depends on the LR**; nothing without cross-over runs."""
    if stored.crossover.empty:
        return []
    table = crossover_table(stored, how.min_effect)
    baseline = tuned.iloc[0]
    lines = []
    for variant, rows in table.groupby("variant", sort=False):
        shared = rows[rows["setting"] != "each at its own"]
        at = "; ".join(
            f"{r.setting}: {signed(r.diff)} [{signed(r.ci_low)}, {signed(r.ci_high)}], {r.verdict}"
            for r in shared.itertuples()
        )
        row = tuned[tuned["variant"] == variant].iloc[0]
        found = judged(row, baseline, stored.tuned, how)
        word = found.word if isinstance(found, Verdict) else ""
        claim = crossover_claim(rows, word, float(row["diff_vs_baseline"]))
        common = crossover_word(rows)
        if claim == DEPENDS and common != DEPENDS:
            lines.append(
                f"  - Cross-over, {variant}: **{DEPENDS}**: different at each one's own "
                f"settings, {common} at both shared settings ({at}): the tuned Δ "
                "comes from where each variant sits on its LR curve, not from the variant."
            )
        else:
            lines.append(f"  - Cross-over, {variant}: **{claim}** at a shared setting ({at}).")
    return lines


def comparisons(table: pd.DataFrame, tuned: pd.DataFrame | None) -> int:
    """Paired comparisons against the baseline in the report (shared and tuned)."""
    return len(table) - 1 + (len(tuned) - 1 if tuned is not None else 0)


def with_holm(
    table: pd.DataFrame, tuned: pd.DataFrame | None
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Both tables with ``p_holm``: their p-values adjusted together (Holm), when there is
    more than one comparison."""
    if comparisons(table, tuned) < 2:
        return table, tuned
    frames = [table] if tuned is None else [table, tuned]
    adjusted = holm([p for f in frames for p in f["paired_t_p"].iloc[1:]])
    out, start = [], 0
    for frame in frames:
        n = len(frame) - 1
        out.append(frame.assign(p_holm=[float("nan"), *adjusted[start : start + n]]))
        start += n
    return out[0], (out[1] if tuned is not None else None)
