"""A report's Answer: at most six plain sentences a researcher can quote, first in the report.

Quality at matched settings, the tuned gain (and whether it is the variant's), the usable LR,
the divergence edge (with how far above the optimum runs still learn at all), speed, and what
would change the answer: each with its number, its interval at the plan's level and its verdict
(:mod:`ablate.report.estimands`, :mod:`ablate.report.verdict`), or none where the plan has no
such estimand. A verdict that is not estimable prints no number.
"""

from __future__ import annotations

import numpy as np

from ablate.core.boundary import variant_boundary
from ablate.report.crossover import settings_of
from ablate.report.estimands import Finding, Findings, TwoByTwo, described
from ablate.report.load import StoredExperiment
from ablate.report.plan import (
    DIVERGENCE,
    MATCHED,
    SAME_SETTINGS,
    SHARED_LR,
    SPEED,
    TUNED_GAIN,
    TWO_BY_TWO,
    USABLE,
)
from ablate.report.text import signed
from ablate.report.verdict import Estimate, Word, wide

HEADING = "## Answer"


def level_text(estimate: Estimate) -> str:
    """``99.38%``: an interval's level."""
    return f"{100 * estimate.level:.4g}%"


def value_text(estimate: Estimate) -> str:
    """``-0.0005 nats [-0.0195, +0.0185]`` or ``×1.30 [0.851, 1.99]``."""
    if estimate.scale == "ratio":
        return f"×{estimate.value:.3g} [{estimate.low:.3g}, {estimate.high:.3g}]"
    return f"{signed(estimate.value)} nats [{signed(estimate.low)}, {signed(estimate.high)}]"


def said(found: Finding) -> str:
    """An estimand's number, interval and level, then its verdict: ``-0.0005 nats [...]
    (99.38% interval, 7 seeds): **equivalent within ±0.02**``; no number where it is not
    estimable."""
    verdict = found.verdict
    if verdict.word is Word.NOT_ESTIMABLE:
        return f"**{verdict.text()}**"
    estimate = found.estimate
    return (
        f"{value_text(estimate)} ({level_text(estimate)} interval, {estimate.seeds} seeds): "
        f"**{verdict.text()}**"
    )


def pair(found: Finding) -> str:
    """``rmsnorm − layernorm`` or ``rmsnorm / layernorm``."""
    e = found.estimand
    sign = "/" if e.scale == "ratio" else "−"
    return f"{e.variant} {sign} {e.baseline}"


def joined(parts: list[str]) -> str:
    return "; ".join(parts)


def quality_sentence(found: Findings, stored: StoredExperiment) -> str:
    """Sentence 1: the primary estimand, as the plan measures it."""
    rows = [f for f in found.found if f.estimand.key == MATCHED]
    how = {
        TWO_BY_TWO: "both variants at both tuned settings (the 2×2's main effect)",
        SAME_SETTINGS: "both at the one setting their optima share",
        SHARED_LR: f"both at the file's shared LR {stored.main['lr'].iloc[0]:.3g}"
        if len(stored.main)
        else "both at the file's shared LR",
    }.get(found.plan.primary, "each at its own optimum: no cross-over whose runs all learned")
    return (
        f"**Quality at matched settings** ({how}): "
        + joined([f"{pair(f)} {said(f)}" for f in rows])
        + "."
    )


def settings_text(stored: StoredExperiment, variants: list[str]) -> str:
    """``layernorm LR 0.00276, warmup 72; rmsnorm LR 0.00328, warmup 69``."""
    parts = []
    for v in variants:
        found = settings_of(stored.tuned, v)
        if found is not None:
            parts.append(f"{v} LR {found[0]:.3g}, warmup {found[1]}")
    return "; ".join(parts)


def attribution(gain: Finding, primary: Finding | None, crossed: TwoByTwo | None) -> str:
    """Whether the 2×2 attributes the tuned gain to the variant, and what else explains it."""
    if primary is None or crossed is None:
        return ""
    same_sign = np.sign(primary.estimate.value) == np.sign(gain.estimate.value)
    if primary.verdict.differs and primary.verdict.decided and same_sign:
        variant = gain.estimand.variant
        return f"; the 2×2 attributes it to {variant}: at matched settings it differs too"
    setting, interaction = described(crossed.setting), described(crossed.interaction)
    return (
        f"; not attributed to {gain.estimand.variant}: at matched settings it is "
        f"{primary.verdict.text()}, so the gain is where each sits on its LR curve (moving "
        f"both to {gain.estimand.variant}'s setting: {signed(setting.value)} "
        f"[{signed(setting.low)}, {signed(setting.high)}]; interaction "
        f"{signed(interaction.value)} [{signed(interaction.low)}, {signed(interaction.high)}]; "
        "95%, descriptive)"
    )


def tuned_sentence(found: Findings, stored: StoredExperiment) -> str | None:
    """Sentence 2: the tuned gain and its attribution (or where it is the primary)."""
    variants = stored.manifest["variants"]
    if found.plan.primary == SHARED_LR:
        return None
    where = settings_text(stored, variants)
    if found.plan.primary == SAME_SETTINGS:
        return f"**Each at its own optimum** ({where}): one setting for all, so the sentence above."
    gains = [f for f in found.found if f.estimand.key == TUNED_GAIN]
    if not gains:
        return (
            f"**Each at its own optimum** ({where}) is the comparison above, not attributed to "
            "the variant: the cross-over that would attribute it is missing or did not learn."
        )
    parts = [
        f"{pair(g)} {said(g)}"
        + attribution(
            g, found.of(MATCHED, g.estimand.variant), found.crossed.get(g.estimand.variant)
        )
        for g in gains
    ]
    return f"**Each at its own optimum** ({where}): " + joined(parts) + "."


def usable_sentence(found: Findings) -> str | None:
    rows = [f for f in found.found if f.estimand.key == USABLE]
    if not rows:
        return None
    return "**Usable LR** (the largest LR within the band of the optimum's loss, per seed): " + (
        joined([f"{pair(f)} {said(f)}" for f in rows]) + "."
    )


def learned_text(stored: StoredExperiment, limit: float) -> str:
    """How far above its tuned optimum each variant still learns at all (descriptive; none
    where its interval is wider than ``limit``)."""
    parts = []
    for variant, result in stored.studies.max_lr.items():
        found = variant_boundary(result.seed_bounds)
        settings = settings_of(stored.tuned, variant)
        if found is None or settings is None or wide(found.low, found.high, limit):
            continue
        parts.append(f"{variant} {found.value / settings[0]:.0f}×")
    return f"; runs still learn at all up to {', '.join(parts)} their tuned LR" if parts else ""


def divergence_sentence(found: Findings, stored: StoredExperiment) -> str | None:
    rows = [f for f in found.found if f.estimand.key == DIVERGENCE]
    if not rows:
        return None
    return (
        "**Divergence edge** (where runs blow up): "
        + joined([f"{pair(f)} {said(f)}" for f in rows])
        + learned_text(stored, found.plan.rules.not_estimable)
        + "."
    )


def speed_sentence(found: Findings) -> str | None:
    rows = [f for f in found.found if f.estimand.key == SPEED]
    if not rows:
        return None
    return (
        "**Training speed**, tokens/s end to end on this machine: "
        + joined([f"{pair(f)} {said(f)}" for f in rows])
        + " (`ablate bench` times the norms back to back)."
    )


def change_sentence(found: Findings) -> str:
    """Sentence 6: what the answer rests on and what would change it."""
    primary = [f for f in found.found if f.estimand.key == MATCHED]
    seeds = sorted({s for f in primary for s in f.seeds})
    rests = f"The quality answer rests on {len(seeds)} seeds ({', '.join(map(str, seeds))})"
    undecided = [
        f"{f.estimand.title} about {f.verdict.more_seeds} more"
        for f in found.found
        if f.verdict.word is Word.INCONCLUSIVE and f.verdict.more_seeds is not None
    ]
    beyond = [
        f.estimand.title
        for f in found.found
        if f.verdict.word is Word.INCONCLUSIVE and f.verdict.more_seeds is None
    ]
    parts = []
    if undecided:
        parts.append("seeds that would decide the rest: " + ", ".join(undecided))
    if beyond:
        parts.append("beyond what seeds settle at these margins: " + ", ".join(beyond))
    unestimable = [f.estimand.title for f in found.found if f.verdict.word is Word.NOT_ESTIMABLE]
    if unestimable:
        parts.append("not estimable here: " + ", ".join(unestimable))
    tail = f"; {'; '.join(parts)}" if parts else "; every estimand is decided"
    return f"**What would change it:** {rests}{tail}."


def answer_lines(found: Findings, stored: StoredExperiment) -> list[str]:
    """The Answer section: at most six sentences, each a bullet."""
    sentences = [
        quality_sentence(found, stored),
        tuned_sentence(found, stored),
        usable_sentence(found),
        divergence_sentence(found, stored),
        speed_sentence(found),
        change_sentence(found),
    ]
    return [HEADING, "", *[f"- {s}" for s in sentences if s], ""]
