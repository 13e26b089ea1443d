"""The report's evidence: every sentence with the number behind it and its uncertainty.

The Answer and the analysis plan come first (:mod:`ablate.report.answer`,
:mod:`ablate.report.plan`); these lines give the evidence below them, descriptive unless the
line is one of the plan's estimands (its verdict then comes from
:mod:`ablate.report.estimands`): the comparisons' Δ with 95% intervals and paired t-test p
(unadjusted, not verdicts), what the design could detect, the noise floor, unstable runs,
speed, the usable LR and the boundaries (:mod:`ablate.report.boundaries`). With ``decide:`` it
says how many seeds the leading comparison took and why it stopped.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ablate.core.manifest import Manifest
from ablate.core.sequential import ALPHA, PRIMARY_RULE, look_alpha
from ablate.report import boundaries, usable
from ablate.report.analysis import matched_differences, scored_split, variant_table
from ablate.report.answer import said
from ablate.report.estimands import Finding, Findings
from ablate.report.factorial import Design, level_text
from ablate.report.load import StoredExperiment
from ablate.report.plan import MATCHED, SHARED_LR, SPEED, TUNED_GAIN
from ablate.report.text import p_text, signed
from ablate.report.verdict import reach

NOT_QUALITY = "not a quality comparison"


def look_level(manifest: Manifest) -> float:
    """The level each of ``decide:``'s looks tests at: α over its looks
    (:mod:`ablate.core.sequential`), else α."""
    decided = manifest.decide
    return look_alpha(len(decided["looks"])) if decided else ALPHA


def reach_text(diffs: np.ndarray, min_effect: float) -> str:
    """What the paired design could detect: its SD, its minimum detectable effect at 80%
    power (two-sided α 0.05) and the pairs ``min_effect`` needs."""
    found = reach(diffs, min_effect)
    if found.pairs < 2 or not math.isfinite(found.sd):
        return ""
    return (
        f"; paired SD {found.sd:.4f} over {found.pairs} seeds: detectable at 80% power "
        f"{found.mde:.4f}, {found.needed_text(min_effect)}"
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
    table: pd.DataFrame,
    runs: pd.DataFrame,
    min_effect: float,
    where: str,
    judged: dict[str, Finding] | None = None,
) -> list[str]:
    """One sentence per variant: its paired difference to the baseline, 95% interval and p
    (descriptive), what the design could detect, and where the comparison is one of the
    plan's estimands (``judged``, by variant) its verdict; where either side has runs that
    diverged or collapsed, that instead."""
    baseline = table.iloc[0]
    lines = []
    for _, row in table.iloc[1:].iterrows():
        label = f"Final {row.get('scored_on', 'val')} loss {where}".rstrip()
        unlearned = [t for t in (unlearned_text(row), unlearned_text(baseline)) if t]
        if unlearned and int(row["n_pairs"]) >= 2:
            lines.append(
                f"- **{label}, {row['variant']} − {baseline['variant']}: {NOT_QUALITY}: "
                f"{'; '.join(unlearned)}** (its mean paired difference, "
                f"{signed(row['diff_vs_baseline'])}, would average over runs that learned "
                "nothing or stopped early: no verdict is drawn from it)."
            )
            continue
        if int(row["n_pairs"]) < 2:
            lines.append(
                f"- **{label}, {row['variant']} − {baseline['variant']}:** only "
                f"{int(row['n_pairs'])} matched pair(s): no interval, so no verdict either way."
            )
            continue
        metric = f"final_{row.get('scored_on', 'val')}_loss"
        diffs = matched_differences(runs, row["variant"], baseline["variant"], metric)
        finding = (judged or {}).get(row["variant"])
        verdict = (
            f" As the plan's estimand ({finding.estimand.title}): {said(finding)}."
            if finding is not None
            else ""
        )
        lines.append(
            f"- **{label}, {row['variant']} − {baseline['variant']}: "
            f"{signed(row['diff_vs_baseline'])}** (95% CI [{signed(row['diff_ci_low'])}, "
            f"{signed(row['diff_ci_high'])}], paired t-test p = {p_text(row['paired_t_p'])}"
            f"{reach_text(diffs.to_numpy(dtype=float), min_effect)}).{verdict}"
        )
    return lines


def quality_tables(
    stored: StoredExperiment, variants: list[str]
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """The shared-LR and the tuned variant tables, each scored on its runs'
    :func:`scored_split`."""
    table = variant_table(stored.main, variants, variants[0], scored_split(stored.main))
    tuned = (
        variant_table(stored.tuned, variants, variants[0], scored_split(stored.tuned))
        if len(stored.tuned)
        else None
    )
    return table, tuned


def decide_lines(manifest: Manifest) -> list[str]:
    """With ``decide:``: the seeds the leading comparison used, of how many, and why it
    stopped."""
    decided = manifest.decide
    if not decided:
        return []
    why = {
        "decided": "its stopping rule decided every leading comparison",
        "maximum": "it reached max_seeds with a comparison still undecided",
        "futile": "every undecided comparison needed, at its estimate and spread, more seeds "
        "than max_seeds left (its futility stop: the verdict stays *inconclusive*)",
    }.get(decided["stopped"], "the experiment has not finished deciding")
    looked = f"looks at {', '.join(map(str, decided['looks']))} seeds"
    if decided.get("futility"):
        looked += ", from the second on stopping for futility"
    if decided.get("rule") == PRIMARY_RULE:
        return [
            f"- **Seeds until decided:** {len(decided['seeds'])} seeds of at most "
            f"{decided['max_seeds']} ({looked}, each judging the primary estimand by the "
            "plan's own rule at its level, its share of α divided by the looks); it stopped "
            f"because {why}: the Answer's primary verdict is the one it stopped on."
        ]
    return [
        f"- **Seeds until decided:** {len(decided['seeds'])} seeds of at most "
        f"{decided['max_seeds']} ({looked}, "
        f"each testing the tuned A/B at α {ALPHA:g}/{len(decided['looks'])} = "
        f"{look_level(manifest):.4f}: Bonferroni spending over the looks; a paired t-test and "
        f"TOST, not the plan's rule); it stopped because {why}. The plan judges each estimand "
        "on these seeds at its own level, its share of α divided by the looks, so a comparison "
        "the stopping rule decided may still be inconclusive in the Answer."
    ]


def effect_sentences(effects: pd.DataFrame) -> list[str]:
    """One sentence per non-first factor level: its main effect, 95% interval and p
    (descriptive)."""
    sentences = []
    for r in effects[effects["effect"].notna()].itertuples():
        sentences.append(
            f"{r.factor} = {level_text(r.level)}: {signed(r.effect)} "
            f"[{signed(r.effect_ci_low)}, {signed(r.effect_ci_high)}], p {p_text(r.effect_p)} "
            f"({r.seeds} seeds)."
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


def warmup_moved(manifest: Manifest) -> str:
    """Where the tuned runs train at another warmup than the curve chose their LR at: which,
    and that the LR is then the optimum at the trained warmup only where the optimum does not
    move with the warmup; nothing where the warmups are one."""
    warmups = {
        group: {r.warmup_steps for r in manifest.runs if r.group == group}
        for group in ("curve", "tuned")
    }
    if len(warmups["curve"]) != 1 or not warmups["tuned"] or warmups["tuned"] == warmups["curve"]:
        return ""
    trained = ", ".join(str(w) for w in sorted(warmups["tuned"]))
    return (
        f" at warmup {next(iter(warmups['curve']))}, trained at warmup {trained}: chosen one "
        "setting at a time, so the optimum at the trained warmup only where the optimum does "
        "not move with the warmup (docs/early-stop.md)"
    )


def lead_lines(
    stored: StoredExperiment, tuned: pd.DataFrame | None, effects: pd.DataFrame | None = None
) -> list[str]:
    """Which comparison the evidence leads with, and why; a design too small to estimate its
    own noise is flagged."""
    decided = stored.manifest.decide
    seeds = decided["seeds"] if decided else stored.manifest.seeds
    lines = []
    curve_seeds = sorted({r.seed for r in stored.manifest.runs if r.group == "curve"})
    if tuned is not None:
        search_seed = stored.studies.search_seed
        chosen = (
            f"its LR curve's optimum on seeds {curve_seeds}{warmup_moved(stored.manifest)}"
            if curve_seeds
            else f"the search's best, found on seed {search_seed}"
        )
        lines.append(
            "- **The tuned A/B: each variant at its own tuned LR and warmup** "
            f"({chosen}, scored here on seeds {seeds}), since a shared LR favours whichever "
            "variant it happens to suit; the shared-LR comparison follows."
        )
    elif effects is not None:
        lines.append(
            "- **The factors' main effects**, each level against its factor's first level, "
            "averaged over the other factors within each seed (descriptive, 95%):"
        )
        lines += [f"  - {text}" for text in effect_sentences(effects)]
    if len(seeds) < 3:
        lines.append(
            f"- **Too few seeds:** {len(seeds)} per variant; fewer than 3 estimate their own "
            "noise from at most one degree of freedom, so the intervals below are wide and "
            "every verdict rests on that."
        )
    return lines


def by_variant(found: Findings, key: str) -> dict[str, Finding]:
    """The findings of estimand ``key``, by variant."""
    return {f.estimand.variant: f for f in found.found if f.estimand.key == key}


def summary_lines(
    table: pd.DataFrame,
    noise: float,
    stored: StoredExperiment,
    tuned: pd.DataFrame | None,
    found: Findings,
    effects: pd.DataFrame | None = None,
) -> list[str]:
    """The evidence: every sentence carries the number behind it."""
    lines = ["## Evidence", ""]
    if stored.missing:
        planned = len({r.run_id for r in stored.manifest.runs})
        lines.append(
            f"- **Partial results:** {len(stored.missing)} of {planned} planned runs have no "
            "result yet; everything below uses the runs that are stored."
        )
    lines += lead_lines(stored, tuned, effects) + decide_lines(stored.manifest)
    min_effect = found.plan.rules.min_effect
    if tuned is not None:
        gains = by_variant(found, TUNED_GAIN) or (
            {} if found.plan.primary == SHARED_LR else by_variant(found, MATCHED)
        )
        lines += _difference_lines(tuned, stored.tuned, min_effect, "at tuned settings", gains)
    shared = "at the shared LR" if tuned is not None else ""
    primary = by_variant(found, MATCHED) if found.plan.primary == SHARED_LR else {}
    lines += _difference_lines(table, stored.main, min_effect, shared, primary)
    if not math.isnan(noise):
        lines.append(
            f"- Seed-to-seed noise floor (std of the final val loss over seeds, pooled over "
            f"variants): {noise:.4f}."
        )
    lines.append(f"- Unstable main runs: {unstable_text(table)}.")
    lines += speed_lines(stored, by_variant(found, SPEED))
    design = Design.from_manifest(stored.manifest)
    lines += usable.summary_line(usable.usable_table(stored))
    lines += boundaries.summary_lines(stored.studies, design, found.plan.rules.not_estimable)
    if stored.divergence_moved:
        lines.append(
            "- **Divergence brackets widened by the stored runs**: where a stored run of a "
            "seed's probes' family diverged below its probes' bracket, or did not diverge above "
            "it, the seed's edge lies somewhere between the two, and its bracket spans both "
            "(– where no run above it diverged): "
            f"{'; '.join(stored.divergence_moved)}."
        )
    return lines + [""]


LOADED_SPREAD = 0.10  # seeds' speed ratios further apart than this: a shared or loaded machine


def speed_lines(stored: StoredExperiment, speeds: dict[str, Finding]) -> list[str]:
    """Each variant's training tokens/s over the baseline's (the plan's speed estimand), and
    whether the seeds' ratios spread as on a shared or loaded machine. A speed claim about
    the norms themselves is the benchmark's (``ablate bench``: kernels and steps timed back to
    back), not this."""
    lines = []
    for variant, found in speeds.items():
        logs = pd.Series(dtype=float)
        lead = stored.tuned if len(stored.tuned) else stored.main
        finished = lead[lead["status"] == "finished"]
        table = finished.pivot_table(index="seed", columns="variant", values="tokens_per_s")
        if variant in table and found.estimand.baseline in table:
            logs = np.log(table[variant] / table[found.estimand.baseline]).dropna()
        spread = float(np.exp(logs.max() - logs.min()) - 1) if len(logs) else 0.0
        loaded = (
            f"; the seeds' ratios lie {spread:.0%} apart: a shared or loaded machine"
            if spread > LOADED_SPREAD
            else ""
        )
        lines.append(
            f"- Training throughput, {variant} / {found.estimand.baseline} (the "
            f"{'tuned' if len(stored.tuned) else 'main'} runs, paired by seed): {said(found)}"
            f"{loaded}; end to end on this machine, not a kernel benchmark (`ablate bench` "
            "times them back to back)."
        )
    return lines
