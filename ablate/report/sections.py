"""The report's sections in reading order: :data:`SECTIONS`, each one function from the
:class:`~ablate.report.context.ReportContext` to a :class:`~ablate.report.section.Section`.

The builder computes the context once and joins what each entry returns
(:func:`ablate.report.builder.report_sections`). Each entry here calls the module that computes
its section with what that section reads from the context, so the modules keep signatures
that say what they need (and tests call them so). A new section is a module with
``section(ctx: ReportContext) -> Section`` and its line in :data:`SECTIONS`, in its place.
"""

from __future__ import annotations

from collections.abc import Callable

from ablate.core.manifest import Manifest
from ablate.report import cost
from ablate.report.answer import answer_lines
from ablate.report.boundaries import max_lr_section
from ablate.report.claims import claims_section
from ablate.report.comparison import comparison_section
from ablate.report.context import ReportContext
from ablate.report.convert import convert_section
from ablate.report.crossover import crossover_section
from ablate.report.depth import depth_section
from ablate.report.estimands import answer_table, seed_values
from ablate.report.inference import inference_section
from ablate.report.plan import plan_lines
from ablate.report.quality import main_section
from ablate.report.section import Section
from ablate.report.setup import impurity_flag, runs_table, setup_section, simulated_flag
from ablate.report.studies import curve_section, search_section
from ablate.report.summary import summary_lines
from ablate.report.usable import usable_section

Build = Callable[[ReportContext], Section]


def title(ctx: ReportContext) -> Section:
    """The experiment's name, description, variants and seeds; ``variants.csv``, ``runs.csv``."""
    manifest = ctx.stored.manifest
    return Section(
        [
            f"# {manifest.name}",
            "",
            manifest.description or "",
            "",
            f"Variants: {', '.join(ctx.variants)} (baseline: {ctx.variants[0]}); "
            f"seeds: {manifest.seeds}{decided_seeds(manifest)}.",
            "",
        ],
        {"variants.csv": ctx.table, "runs.csv": runs_table(ctx.stored)},
    )


def decided_seeds(manifest: Manifest) -> str:
    """With ``decide:``, the seeds the leading comparison took beyond the file's."""
    decided = manifest.decide
    if not decided or decided["seeds"] == manifest.seeds:
        return ""
    return f" (the leading comparison, seeds until decided: {decided['seeds']})"


def flags(ctx: ReportContext) -> Section:
    """What a reader must know first: simulated runs, variants that change more than the norm."""
    return Section(simulated_flag(ctx.stored) + impurity_flag(ctx.stored, ctx.variants))


def answer(ctx: ReportContext) -> Section:
    """The Answer and the analysis plan it was judged by; ``answer.csv``, ``answer_seeds.csv``."""
    lines = answer_lines(ctx.found, ctx.stored) + plan_lines(ctx.found.plan)
    tables = {"answer.csv": answer_table(ctx.found), "answer_seeds.csv": seed_values(ctx.found)}
    return Section(lines, tables)


def summary(ctx: ReportContext) -> Section:
    """The evidence below the Answer."""
    return Section(
        summary_lines(ctx.table, ctx.noise, ctx.stored, ctx.tuned, ctx.found, ctx.effects)
    )


def claims(ctx: ReportContext) -> Section:
    """Each claim of the file: its paired effect and verdict."""
    return claims_section(ctx.stored.manifest.claims, ctx.stored, *ctx.spikes)


def incomplete(ctx: ReportContext) -> Section:
    """The planned runs with no result yet, where there are any."""
    missing = ctx.stored.missing
    if not missing:
        return Section()
    listed = "; ".join(missing)
    return Section(
        [f"**Incomplete:** {len(missing)} planned run(s) have no result yet: {listed}.", ""]
    )


def tuned_comparison(ctx: ReportContext) -> Section:
    """The tuned A/B against the shared-LR one, with a search or curve."""
    if ctx.tuned is None:
        return Section()
    return comparison_section(ctx.stored, ctx.table, ctx.tuned)


def crossover(ctx: ReportContext) -> Section:
    """The cross-over's 2x2 of variant and setting, with a search or curve."""
    return crossover_section(ctx.stored) if ctx.tuned is not None else Section()


def criterion(ctx: ReportContext) -> Section:
    """What a stable run is, as the studies or the plan recorded it."""
    stored = ctx.stored
    found = stored.studies.criterion or stored.manifest.criterion
    return Section(["## Stability criterion", "", f"A run is {found}.", ""] if found else [])


def setup(ctx: ReportContext) -> Section:
    """What was trained: runs per stage, budgets, the variants' settings."""
    return setup_section(ctx.stored, ctx.variants)


def factors(ctx: ReportContext) -> Section:
    """The grid's factor tables and interactions, for a grid."""
    return ctx.factors


def main(ctx: ReportContext) -> Section:
    """The main runs' quality, speed and probe tables and figures."""
    return main_section(ctx.stored, ctx.table, ctx.noise)


def depth(ctx: ReportContext) -> Section:
    """The residual stream over depth and gradient-norm spikes."""
    stored = ctx.stored
    return depth_section(stored.main, stored.probes, stored.metrics, ctx.variants, *ctx.spikes)


def inference(ctx: ReportContext) -> Section:
    """The stored inference benchmark, where one was run."""
    source = ctx.stored.manifest.source or "FILE"
    return inference_section(ctx.stored.inference, ctx.variants, source)


def convert(ctx: ReportContext) -> Section:
    """The checkpoint conversion, with ``convert:``."""
    return convert_section(ctx.stored)


def sweep(ctx: ReportContext) -> Section:
    """The LR sweep, with ``sweep:``."""
    return ctx.sweep


def curve(ctx: ReportContext) -> Section:
    """The curve stage's optima, with ``curve:``."""
    return curve_section(ctx.stored, ctx.variants)


def usable(ctx: ReportContext) -> Section:
    """The usable-LR boundary, with ``max_lr.within``."""
    return usable_section(ctx.stored)


def max_lr(ctx: ReportContext) -> Section:
    """The max stable LRs and their intervals, with ``max_lr:``."""
    return max_lr_section(ctx.stored.studies, ctx.design, ctx.found.plan.rules.not_estimable)


def search(ctx: ReportContext) -> Section:
    """The LR x warmup search, with ``search:``."""
    startup = ctx.stored.manifest.search_startup
    return search_section(ctx.stored.studies, ctx.variants, startup)


SECTIONS: tuple[Build, ...] = (
    title,
    flags,
    answer,
    summary,
    setup,
    cost.section,
    claims,
    incomplete,
    factors,
    tuned_comparison,
    crossover,
    main,
    depth,
    inference,
    convert,
    sweep,
    curve,
    usable,
    max_lr,
    search,
    criterion,
)


def section_name(build: Build) -> str:
    """A section's name in the registry: its function's, or its module's where the function
    is a module's ``section``."""
    return build.__module__.rsplit(".", 1)[-1] if build.__name__ == "section" else build.__name__
