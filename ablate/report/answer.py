"""A report's Answer: at most six plain sentences a researcher can quote, first in the report.

Quality at matched settings, the tuned gain (and whether it is the variant's), the usable LR,
the divergence edge (with how far above the optimum runs still learn at all), speed, and what
would change the answer: each with its number, its interval at the plan's level and its verdict
(:mod:`ablate.report.estimands`, :mod:`ablate.report.verdict`), or none where the plan has no
such estimand. A verdict that is not estimable prints no number.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ablate.core.boundary import variant_boundary
from ablate.core.plan import CONVERTED
from ablate.report.crossover import settings_of
from ablate.report.estimands import Finding, Findings, TwoByTwo, described
from ablate.report.load import StoredExperiment
from ablate.report.plan import (
    CONVERT,
    DIVERGENCE,
    FACTOR,
    FACTOR_DIVERGENCE,
    FACTOR_TUNED,
    GRID,
    MATCHED,
    SAME_SETTINGS,
    SHARED_LR,
    SPEED,
    TUNED_GAIN,
    TWO_BY_TWO,
    USABLE,
)
from ablate.report.text import signed, three
from ablate.report.verdict import CLOSE, Estimate, Word, wide

HEADING = "## Answer"


def level_text(estimate: Estimate) -> str:
    """``99.38%``: an interval's level."""
    return f"{100 * estimate.level:.4g}%"


def on_its_side(x: float, edges: list[float], text: Callable[[float, int], str]) -> str:
    """``x`` printed by ``text`` at its usual digits, or more where that rounding would put it
    on an edge (no effect, a margin) or across one: a reader checks the verdict on the
    printed interval."""
    for digits in range(3, 8):
        shown = float(text(x, digits).lstrip("×+"))
        if all(shown != e and (shown > e) == (x > e) for e in edges if x != e):
            break
    return text(x, digits)


def value_text(estimate: Estimate, margin: float) -> str:
    """``-0.0005 nats [-0.0195, +0.0185]`` or ``×1.30 [0.851, 1.99]``, each end with the
    digits that keep it on its side of no effect and of the margin."""
    if estimate.scale == "ratio":
        edges = [1.0, margin, 1 / margin]

        def text(x: float, digits: int) -> str:
            return f"{x:#.{digits}g}".rstrip(".")

        low, high = (on_its_side(x, edges, text) for x in (estimate.low, estimate.high))
        return f"×{three(estimate.value)} [{low}, {high}]"
    edges = [0.0, margin, -margin]

    def signed_text(x: float, digits: int) -> str:
        return f"{x:+.{digits + 1}f}"

    low, high = (on_its_side(x, edges, signed_text) for x in (estimate.low, estimate.high))
    return f"{signed(estimate.value)} nats [{low}, {high}]"


def said(found: Finding) -> str:
    """An estimand's number, interval and level, then its verdict: ``-0.0005 nats [...]
    (99.38% interval, 7 seeds): **equivalent within ±0.02**``; no number where it is not
    estimable."""
    verdict = found.verdict
    if verdict.word is Word.NOT_ESTIMABLE:
        return f"**{verdict.text()}**"
    estimate = found.estimate
    close = ", a close call" if verdict.slack < CLOSE else ""
    return (
        f"{value_text(estimate, verdict.margin)} ({level_text(estimate)} interval, "
        f"{estimate.seeds} seeds{ranks_text(found)}): **{verdict.text()}**{close}"
    )


def ranks_text(found: Finding) -> str:
    """For an estimate by ranks: how many seeds had a run that diverged (counted the worst:
    a rank estimate is taken only where one did)."""
    if not found.estimate.ranked:
        return ""
    return f"; on ranks, {found.diverged} with a run that diverged counted the worst"


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
        TWO_BY_TWO: "the 2×2's main effect: both variants at both tuned settings",
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
    """``its curve's optimum on other seeds: layernorm LR 0.00276, warmup 72; ...``."""
    parts = []
    for v in variants:
        found = settings_of(stored.tuned, v)
        if found is not None:
            parts.append(f"{v} LR {found[0]:.3g}, warmup {found[1]}")
    return "chosen on other seeds: " + "; ".join(parts)


def move_text(crossed: TwoByTwo) -> str:
    """Where the baseline's tuned setting and the variant's differ: ``from warmup 108 to 103
    at LR 0.00195``, ``from LR 0.00276, warmup 72 to LR 0.00328, warmup 69``."""
    (lr_b, warm_b), (lr_v, warm_v) = crossed.at_baseline, crossed.at_variant
    if lr_b == lr_v:
        return f"from warmup {warm_b} to {warm_v} at LR {lr_b:.3g}"
    if warm_b == warm_v:
        return f"from LR {lr_b:.3g} to {lr_v:.3g} at warmup {warm_b}"
    return f"from LR {lr_b:.3g}, warmup {warm_b} to LR {lr_v:.3g}, warmup {warm_v}"


def attribution(gain: Finding, primary: Finding | None, crossed: TwoByTwo | None) -> str:
    """Whether the 2×2 attributes the tuned gain to the variant, and the setting effect beside
    it (descriptive)."""
    if primary is None or crossed is None:
        return ""
    variant = gain.estimand.variant
    same_sign = np.sign(primary.estimate.value) == np.sign(gain.estimate.value)
    if primary.verdict.differs and primary.verdict.decided and same_sign:
        return f"; the 2×2 attributes it to {variant}: at matched settings it differs too"
    setting = described(crossed.setting)
    return (
        f"; not attributed to {variant}: the 2×2 does not show the variant differs (at matched "
        f"settings {primary.verdict.text()}); moving both norms {move_text(crossed)} changes "
        f"the loss by {signed(setting.value)} [{signed(setting.low)}, {signed(setting.high)}] "
        "(95%, descriptive)"
    )


def tuned_sentence(found: Findings, stored: StoredExperiment) -> str | None:
    """Sentence 2: the tuned gain and its attribution (or where it is the primary)."""
    variants = stored.manifest.variants
    if found.plan.primary == SHARED_LR:
        return None
    lead = f"**Each at its own tuned setting** ({settings_text(stored, variants)})"
    if found.plan.primary == SAME_SETTINGS:
        return f"{lead}: one setting for all, so the sentence above."
    gains = [f for f in found.found if f.estimand.key == TUNED_GAIN]
    if not gains:
        return (
            f"{lead} is the comparison above, not attributed to the variant: the cross-over "
            "that would attribute it is missing or did not learn."
        )
    parts = [
        f"{pair(g)} {said(g)}"
        + attribution(
            g, found.of(MATCHED, g.estimand.variant), found.crossed.get(g.estimand.variant)
        )
        for g in gains
    ]
    return f"{lead}: " + joined(parts) + "."


def usable_sentence(found: Findings) -> str | None:
    rows = [f for f in found.found if f.estimand.key == USABLE]
    if not rows:
        return None
    return (
        "**Usable LR** (per seed, the largest LR walked up from the tuned LR, at the tuned "
        "warmup, whose loss stays within the band of the seed's there): "
        + joined([f"{pair(f)} {said(f)}" for f in rows])
        + "."
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
    if not parts:
        return ""
    return (
        f"; runs still get below the unigram floor (learned at all, far from their best loss) "
        f"up to {', '.join(parts)} their tuned LR (the geometric mean of the seeds' edges; "
        "descriptive)"
    )


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


def convert_sentence(found: Findings, stored: StoredExperiment) -> str | None:
    """The converted checkpoint against the same weights unchanged, and the swap's own jump."""
    rows = [f for f in found.found if f.estimand.key == CONVERT]
    if not rows:
        return None
    info = stored.manifest.convert or {}
    done = stored.convert[stored.convert["status"] == "finished"]
    converted = done[done["variant"] == CONVERTED]
    jump = (converted["loss_after_swap"] - converted["loss_before_swap"]).mean()
    steps = int(converted["planned_steps"].iloc[0]) if len(converted) else 0
    return (
        f"**The converted checkpoint** (the `{info.get('source')}` runs' final weights with "
        f"the norms converted, biases `{info.get('bias')}`, against the same weights "
        f"unchanged, both trained {steps} more steps on the same batches): "
        + joined([f"{pair(f)} {said(f)}" for f in rows])
        + f"; the swap itself moved the loss by {jump:+.4f} at once (descriptive)."
    )


def plural(n: int, word: str) -> str:
    """``1 seed``, ``7 seeds``."""
    return f"{n} {word}{'s' * (n != 1)}"


def margin_note(primary: list[Finding]) -> str:
    """Where every primary estimand is equivalent: the smallest margin it still is within."""
    if not primary or any(f.verdict.word is not Word.EQUIVALENT for f in primary):
        return ""
    edge = max(max(abs(f.estimate.low), abs(f.estimate.high)) for f in primary)
    return f" (equivalent for any margin over {edge:.4f}; under it, inconclusive)"


def change_sentence(found: Findings) -> str:
    """Sentence 6: what the answer rests on and what would change it."""
    primary = [f for f in found.found if f.estimand.primary]
    seeds = sorted({s for f in primary for s in f.seeds})
    rests = (
        f"The quality answer rests on {plural(len(seeds), 'seed')} ({', '.join(map(str, seeds))})"
    )
    rests += f" and the margin ±{found.plan.rules.min_effect:g} nats" + margin_note(primary)
    undecided = [
        f"{f.estimand.title} ({f.estimand.variant}) about {f.verdict.more_seeds} more"
        for f in found.found
        if f.verdict.word is Word.INCONCLUSIVE and f.verdict.more_seeds is not None
    ]
    beyond = [
        f"{f.estimand.title} ({f.estimand.variant})"
        for f in found.found
        if f.verdict.word is Word.INCONCLUSIVE
        and f.verdict.more_seeds is None
        and not f.estimate.ranked
    ]
    parts = []
    if undecided:
        parts.append(
            "seeds that would decide the rest, were each estimate and its spread to hold: "
            + ", ".join(undecided)
        )
    if beyond:
        parts.append("beyond what seeds settle at these margins: " + ", ".join(beyond))
    close = [
        f"{f.estimand.title} ({f.estimand.variant})" for f in found.found if f.verdict.slack < CLOSE
    ]
    if close:
        parts.append(
            "close calls, each decided by an interval end within a tenth of its half-width of "
            "the edge: " + ", ".join(close)
        )
    unestimable = [
        f"{f.estimand.title} ({f.estimand.variant})"
        for f in found.found
        if f.verdict.word is Word.NOT_ESTIMABLE
    ]
    if unestimable:
        parts.append("not estimable here: " + ", ".join(unestimable))
    tail = f"; {'; '.join(parts)}" if parts else "; every estimand is decided"
    return f"**What would change it:** {rests}{tail}."


GRID_LEADS = {
    FACTOR: "Factors at the shared LR (matched settings)",
    FACTOR_TUNED: "Factors at each cell's tuned LR",
    FACTOR_DIVERGENCE: "Factors on the divergence edge",
}


def grid_sentences(found: Findings) -> list[str]:
    """A grid's sentences: one per kind of factor estimand, each level against its factor's
    first (averaged over the other factors within each seed)."""
    sentences = []
    for key, lead in GRID_LEADS.items():
        rows = [f for f in found.found if f.estimand.key == key]
        if rows:
            parts = [f"{f.estimand.variant} vs {f.estimand.contrast[2]}: {said(f)}" for f in rows]
            sentences.append(f"**{lead}**: " + joined(parts) + ".")
    return sentences


def answer_lines(found: Findings, stored: StoredExperiment) -> list[str]:
    """The Answer section: at most six sentences, each a bullet."""
    if found.plan.primary == GRID:
        sentences = [*grid_sentences(found), change_sentence(found)]
        return [HEADING, "", *[f"- {s}" for s in sentences], ""]
    sentences = [
        quality_sentence(found, stored),
        tuned_sentence(found, stored),
        usable_sentence(found),
        divergence_sentence(found, stored),
        speed_sentence(found),
        convert_sentence(found, stored),
        change_sentence(found),
    ]
    return [HEADING, "", *[f"- {s}" for s in sentences if s], ""]
