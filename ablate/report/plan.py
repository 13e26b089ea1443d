"""A report's declared analysis plan: what it estimates, the rule each verdict follows and the
family the verdicts are judged in, from the design alone (the stored plan), before any result.

For each variant against the baseline (the first variant):

- **quality at matched settings** (primary): the variant's main effect on the final loss over
  the cross-over's 2×2, both variants at both tuned settings, paired by seed; the setting
  effect and the interaction are given beside it, without a verdict. Where it falls back:
  both tuned settings coincide, so the tuned Δ is at matched settings; the cross-over puts a
  variant where it cannot train, or there is none, so the tuned gain is the estimand, not
  attributed; no tuned runs, so the A/B at the file's shared LR.
- **the tuned gain** (secondary): each variant at its own tuned settings; attributed to the
  variant only where the primary differs with its sign.
- **the usable LR** and **the divergence edge** (secondary): per-seed ratios to the
  baseline's (the usable-LR walks' edges; the divergence brackets).
- **training speed** (secondary): tokens/s end to end, paired by seed (not on the simulator).
- **the converted checkpoint** (secondary, with ``convert:``): the source's weights with the
  other norm swapped in against the same weights unchanged, each trained on, paired by seed.

A grid (``grid:``) is asked about its factors instead: each factor level's main effect against
the factor's first level, averaged over the other factors within each seed, on the final loss
at the shared LR (primary: every cell at one setting), at each cell's tuned LR and on the
divergence edge.

The family is every verdict-bearing estimand; each is judged on one interval at its share of
``analysis.alpha`` (Bonferroni: :mod:`ablate.report.verdict` says why not Holm): the primary
estimands share ``analysis.primary_share`` of it, the secondary ones the rest equally, and one
measured on ``decide:``'s seeds divides its share by the looks. A run that left stages out
(``--primary-only``) keeps every estimand at its share in the whole design; those of the stages
left out stay unspent. Everything else a report prints is descriptive: a 95% interval and no
verdict word.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ablate.core.experiment import AnalysisConfig
from ablate.core.manifest import Manifest
from ablate.core.plan import CONTROL, CONVERTED
from ablate.core.stages import RUN_GROUPS
from ablate.report.verdict import Scale

MATCHED, TUNED_GAIN, USABLE, DIVERGENCE, SPEED, CONVERT = (
    "matched",
    "tuned_gain",
    "usable",
    "divergence",
    "speed",
    "convert",
)
FACTOR, FACTOR_TUNED, FACTOR_DIVERGENCE = "factor", "factor_tuned", "factor_divergence"
# how the primary estimand is measured, by design
TWO_BY_TWO, SAME_SETTINGS, TUNED_ONLY, SHARED_LR = "2x2", "same settings", "tuned", "shared LR"
GRID = "grid"


@dataclass(frozen=True)
class Estimand:
    """One verdict-bearing quantity: what it is, its scale and margin, its share of α."""

    key: str  # MATCHED, TUNED_GAIN, USABLE, DIVERGENCE, SPEED, CONVERT or a grid's FACTOR*
    variant: str
    baseline: str
    title: str
    scale: Scale
    margin: float
    primary: bool
    looks: int  # decide:'s looks where its seeds came from decide:, else 1
    share: float = 0.0  # of alpha (set by :func:`analysis_plan`)
    alpha: float = 0.05
    contrast: tuple[str, str, str] | None = None  # a grid's (factor, level, its first level)

    @property
    def error(self) -> float:
        """The chance of a false claim this estimand may spend: α × share / looks."""
        return self.alpha * self.share / self.looks

    @property
    def level(self) -> float:
        """Its interval's level."""
        return 1.0 - self.error


@dataclass(frozen=True)
class AnalysisPlan:
    """The estimands of a report and the rules they are judged by."""

    rules: AnalysisConfig
    estimands: list[Estimand]
    primary: str  # how the primary estimand is measured (TWO_BY_TWO, SAME_SETTINGS, ...)
    left_out: tuple[str, ...] = ()  # stage sections the run left out (:func:`left_out`)


def rules_of(analysis: dict | None, min_effect: float | None) -> AnalysisConfig:
    """The ``analysis:`` rules a plan was stored with (defaults for a plan stored before
    they were kept; ``min_effect`` was kept on its own)."""
    stored = dict(analysis or {})
    if min_effect is not None:
        stored.setdefault("min_effect", min_effect)
    return AnalysisConfig(**stored)


def stages_of(manifest: Manifest) -> set[str]:
    """The stages the plan holds (stored since the plan was declared; before that, read off
    the planned runs' groups and the usable band)."""
    if manifest.stages is not None:
        return set(manifest.stages)
    found = {r.group for r in manifest.runs}
    if manifest.usable_within is not None:
        found.add("max_lr")
        if found & {"tuned", "curve", "search"}:
            found.add("usable")
    return found


def primary_design(manifest: Manifest, crossed: bool, same: bool) -> str:
    """How the primary estimand is measured: over the cross-over's 2×2 (``crossed``: its runs
    exist and every one learned), on the tuned runs at one setting (``same``), on the tuned
    runs alone, or at the shared LR."""
    if "tuned" not in stages_of(manifest):
        return SHARED_LR
    if same:
        return SAME_SETTINGS
    return TWO_BY_TWO if crossed else TUNED_ONLY


def analysis_plan(manifest: Manifest, primary: str, simulated: bool = False) -> AnalysisPlan:
    """Every verdict-bearing estimand of the design, with its share of α (see the module): the
    share it has in the design with the stages the run left out (:func:`left_out`), whose own
    shares stay reserved, unspent, so that leaving them out changes no verdict of the same
    runs."""
    rules = rules_of(manifest.analysis, manifest.min_effect)
    stages, out = stages_of(manifest), tuple(left_out(manifest))
    design = GRID if manifest.grid else primary
    found = design_estimands(manifest, rules, design, simulated, stages)
    whole = with_left_out(stages, out)
    designed = design_estimands(manifest, rules, design, simulated, whole) if out else found
    share = {(e.key, e.variant): e.share for e in shared(designed, rules)}
    kept = [replace(e, share=share[(e.key, e.variant)], alpha=rules.alpha) for e in found]
    return AnalysisPlan(rules, kept, design, out)


def with_left_out(stages: set[str], sections: tuple[str, ...]) -> set[str]:
    """``stages`` with the run groups the left-out ``sections`` plan: a usable walk with the
    max-LR brackets wherever tuned runs lead (the file's ``max_lr.within``, which decides it,
    left with its section: a walk's share is then reserved even where the file had none)."""
    added = {g.name for g in RUN_GROUPS if g.section in sections}
    if "tuned" not in stages:
        added.discard("usable")  # a walk starts from tuned settings
    return stages | added


def design_estimands(
    manifest: Manifest, rules: AnalysisConfig, primary: str, simulated: bool, stages: set[str]
) -> list[Estimand]:
    """The verdict-bearing estimands a design with ``stages`` has, each without its share."""
    if primary == GRID:
        return grid_estimands(manifest, rules, stages)
    variants = manifest.variants
    decided = manifest.decide
    lead_looks = len(decided["looks"]) if decided else 1  # decide: adds the leading A/B's seeds
    found: list[Estimand] = []
    for variant in variants[1:]:
        base = variants[0]
        found.append(
            Estimand(
                MATCHED,
                variant,
                base,
                "quality at matched settings",
                "difference",
                rules.min_effect,
                True,
                lead_looks,
            )
        )
        if primary == TWO_BY_TWO:
            found.append(
                Estimand(
                    TUNED_GAIN,
                    variant,
                    base,
                    "the tuned gain",
                    "difference",
                    rules.min_effect,
                    False,
                    lead_looks,
                )
            )
        if "usable" in stages:
            found.append(
                Estimand(USABLE, variant, base, "usable LR", "ratio", rules.lr_margin, False, 1)
            )
        if "max_lr" in stages:
            found.append(
                Estimand(
                    DIVERGENCE,
                    variant,
                    base,
                    "divergence edge",
                    "ratio",
                    rules.lr_margin,
                    False,
                    1,
                )
            )
        if not simulated:
            found.append(
                Estimand(
                    SPEED,
                    variant,
                    base,
                    "training speed",
                    "ratio",
                    rules.speed_margin,
                    False,
                    lead_looks,
                )
            )
    if "convert" in stages:
        found.append(
            Estimand(
                CONVERT,
                CONVERTED,
                CONTROL,
                "the converted checkpoint",
                "difference",
                rules.min_effect,
                False,
                1,
            )
        )
    return found


def grid_estimands(manifest: Manifest, rules: AnalysisConfig, stages: set[str]) -> list[Estimand]:
    """A grid's estimands: each factor level's main effect against the factor's first level,
    averaged over the other factors within each seed: on the final loss at the shared LR
    (primary: every cell at one setting), at each cell's tuned LR, and on the divergence
    edge (``stages``: the run's, or the design's with those it left out)."""
    decided = manifest.decide
    looks = len(decided["looks"]) if decided else 1
    tuned = "tuned" in stages
    kinds = [(FACTOR, "factor at the shared LR", "difference", rules.min_effect, True)]
    if tuned:
        kinds.append(
            (FACTOR_TUNED, "factor at each cell's tuned LR", "difference", rules.min_effect, False)
        )
    if "max_lr" in stages:
        kinds.append(
            (FACTOR_DIVERGENCE, "factor on the divergence edge", "ratio", rules.lr_margin, False)
        )
    found = []
    for key, levels in manifest.grid:
        names = [str(v).lower() if isinstance(v, bool) else str(v) for v in levels]
        for level in names[1:]:
            for kind, title, scale, margin, primary in kinds:
                lead = kind == FACTOR_TUNED or (kind == FACTOR and not tuned)
                found.append(
                    Estimand(
                        kind,
                        f"{key} {level}",
                        f"{key} {names[0]}",
                        title,
                        scale,
                        margin,
                        primary,
                        looks if lead else 1,
                        contrast=(key, level, names[0]),
                    )
                )
    return found


STAGE_SECTIONS = ("sweep", "search", "curve", "max_lr", "decide", "convert")


def left_out(manifest: Manifest) -> list[str]:
    """The file's stage sections the command line set to null (``--primary-only``, or ``--set
    max_lr=null``): stages the run left out, whose verdicts the report does not state."""
    return [
        s for s in STAGE_SECTIONS if s in manifest.command_line and not manifest.command_line[s]
    ]


def shared(estimands: list[Estimand], rules: AnalysisConfig) -> list[Estimand]:
    """The estimands with their shares of α: the primary ones ``primary_share`` together, the
    secondary ones the rest, equally within each; the primary ones all of it without any
    secondary."""
    primary = [e for e in estimands if e.primary]
    secondary = [e for e in estimands if not e.primary]
    first = rules.primary_share if secondary else 1.0
    return [
        replace(
            e,
            share=(first / len(primary)) if e.primary else (1 - first) / len(secondary),
            alpha=rules.alpha,
        )
        for e in estimands
    ]


PRIMARY_TEXT = {
    TWO_BY_TWO: "the variant's main effect over the cross-over's 2×2: both variants at both "
    "tuned settings (LR, warmup), paired by seed, Δ = ½[(V − B at B's) + (V − B at V's)]; the "
    "setting effect and the interaction beside it, without a verdict",
    SAME_SETTINGS: "the tuned A/B: both variants' tuned settings coincide, so the tuned Δ is "
    "already at matched settings",
    TUNED_ONLY: "the tuned gain (each at its own tuned settings): no cross-over whose runs all "
    "learned, so it is not attributed to the variant",
    SHARED_LR: "the A/B at the file's shared LR and warmup (the design has no tuned runs)",
    GRID: "each factor level's main effect on the final loss at the file's shared LR and "
    "warmup, every cell at one setting, against the factor's first level, averaged over the "
    "other factors within each seed",
}
SECONDARY_TEXT = {
    TUNED_GAIN: "each at its own tuned settings; attributed to the variant only where the "
    "primary differs with its sign, else placed on the LR curves",
    USABLE: "the per-seed ratio of the usable-LR walks' edges (geometric mean; the interval "
    "widened by one walk step for the lattice)",
    DIVERGENCE: "the per-seed ratio of the divergence brackets (geometric mean; widened by "
    "the brackets' resolution)",
    SPEED: "training tokens/s, paired by seed on the leading runs, end to end on this machine "
    "(not a kernel benchmark)",
    CONVERT: "the final loss of the source's weights with the norms converted, against the same "
    "weights unchanged, both trained on over the same batches, paired by seed",
    FACTOR_TUNED: "each factor level's main effect with every cell at its own tuned LR and "
    "warmup (not at matched settings)",
    FACTOR_DIVERGENCE: "each factor level's main effect on the divergence edge, as a ratio "
    "(geometric mean over seeds; widened by the brackets' resolution)",
}


def plan_lines(plan: AnalysisPlan) -> list[str]:
    """The ``## Analysis plan`` section: estimands, the rule, the family with each level."""
    rules = plan.rules
    rows = [
        "| estimand | variant | scale, margin | role | share of α | looks | interval level |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for e in plan.estimands:
        margin = f"×/÷{e.margin:g}" if e.scale == "ratio" else f"±{e.margin:g} nats"
        sign = "/" if e.scale == "ratio" else ("vs" if e.contrast else "−")
        rows.append(
            f"| {e.title} | {e.variant} {sign} {e.baseline} | {e.scale}, {margin} | "
            f"{'primary' if e.primary else 'secondary'} | {e.share:.4g} | {e.looks} | "
            f"{100 * e.level:.4g}% |"
        )
    secondary = {e.key for e in plan.estimands if not e.primary}
    primary = sum(e.share for e in plan.estimands if e.primary)
    return [
        "## Analysis plan",
        "",
        "Declared before any result (`analysis:` in the experiment file; docs/report.md). "
        f"**Primary estimand, quality at matched settings:** {PRIMARY_TEXT[plan.primary]}. "
        "Final loss on the comparison's split (the test split where one is held out).",
        "",
        *secondary_lines(secondary),
        "**The rule:** each verdict-bearing estimand is read off one interval at its level: "
        "*exceeds* the margin where it lies beyond it, *equivalent within* it where it lies "
        "inside, *differs from* no effect where it excludes no effect but reaches past the "
        "margin, else *inconclusive* with about how many more seeds would decide it; *not "
        f"estimable* with under 2 seeds, every seed in one bracket, or a ratio's interval "
        f"wider than {rules.not_estimable:g}× (then no number is printed, only in the CSVs). "
        f"**The family:** the {len(plan.estimands)} estimand(s) below, Bonferroni at α "
        f"{rules.alpha:g} (the primary {primary:g} of it{reserved_text(plan.left_out)}), so "
        "the report's chance of "
        "any false verdict is at most α; everything else below is descriptive (95% intervals, "
        "no verdict).",
        "",
        *rows,
        "",
    ]


def reserved_text(sections: tuple[str, ...]) -> str:
    """Where stages were left out: that the shares of their verdicts stay reserved."""
    if not sections:
        return ""
    return f"; the shares of the stages left out reserved, unspent: {', '.join(sections)}"


SECONDARY_NAMES = {
    TUNED_GAIN: "The tuned gain",
    USABLE: "Usable LR",
    DIVERGENCE: "Divergence edge",
    SPEED: "Training speed",
    CONVERT: "The converted checkpoint",
    FACTOR_TUNED: "Factors at each cell's tuned LR",
    FACTOR_DIVERGENCE: "Factors on the divergence edge",
}


def secondary_lines(keys: set[str]) -> list[str]:
    """One bullet per secondary estimand the plan holds, then a blank line (none: nothing)."""
    found = [f"- {SECONDARY_NAMES[k]}: {SECONDARY_TEXT[k]}." for k in SECONDARY_TEXT if k in keys]
    return [*found, ""] if found else []
