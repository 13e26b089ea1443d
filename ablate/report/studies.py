"""The report's study sections: the LR sweep and the search (the max stable LR's is
:mod:`ablate.report.boundaries`).

Each returns a :class:`~ablate.report.section.Section`; :func:`attach_studies` adds the max
stable LR and the LR sensitivity to the variant table.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ablate.core.studies import BestTrial, Studies
from ablate.report.analysis import (
    PairedDifference,
    mean_difference,
    seed_sensitivities,
    selection_values,
    sensitivity_table,
    sweep_frame,
    sweep_table,
)
from ablate.report.boundaries import boundary_table
from ablate.report.load import StoredExperiment, unigram_floor
from ablate.report.optimum import optimum_section
from ablate.report.section import Section
from ablate.report.study_figures import stability_map_figure, sweep_figure
from ablate.report.text import budget_text, delta_ci

SWEEP_FIGURE = "lr_sweep.png"


def attach_studies(
    table: pd.DataFrame, sensitivity: pd.DataFrame, studies: Studies
) -> pd.DataFrame:
    """Add the max stable LR (with its interval) and the LR sensitivity to the variant table
    when present."""
    boundaries = boundary_table(studies)
    if len(boundaries):
        table = table.merge(
            boundaries[["variant", "max_stable_lr", "max_stable_lr_low", "max_stable_lr_high"]],
            on="variant",
            how="left",
        )
    if len(sensitivity):
        table = table.merge(
            sensitivity[["variant", "lr_sensitivity", "best_lr"]].rename(
                columns={"best_lr": "sweep_best_lr"}
            ),
            on="variant",
            how="left",
        )
    return table


def sweep_section(stored: StoredExperiment, variants: list[str]) -> tuple[Section, pd.DataFrame]:
    """The LR sweep (Markdown, CSVs, figure), and the sensitivity table."""
    frame = sweep_frame(stored.manifest.runs, stored.runs)
    if frame.empty:
        return Section(), pd.DataFrame()
    table = sweep_table(frame)
    sensitivity = sensitivity_table(table, frame)
    losses = (float(frame["initial_loss"].iloc[0]), unigram_floor(stored.runs))
    figure = sweep_figure(table, variants, losses, boundary_table(stored.studies))
    shown = table.assign(
        lr=table["lr"].map(lambda v: f"{v:.3g}"),
        loss=[
            f"{m:.4f}" + (f" ({u}/{n} unstable)" if u else "")
            for m, u, n in zip(table["loss_mean"], table["unstable"], table["seeds"], strict=True)
        ],
    ).pivot(index="lr", columns="variant", values="loss")
    shown = shown.loc[sorted(shown.index, key=float), [v for v in variants if v in shown]]
    lines = [
        "## Learning-rate sweep",
        "",
        "Final val loss (mean over seeds of min(ℓ, ℓ0); a diverged run counts as ℓ0):",
        "",
        shown.to_markdown(),
        "",
        "LR sensitivity (Wortsman et al. 2023): the mean over this grid's LRs of min(ℓ(η), ℓ0) "
        "− ℓ*, ℓ* the grid's best (lower: less sensitive to the learning rate):",
        "",
        sensitivity.to_markdown(index=False, floatfmt=".4g"),
        "",
        *seed_sensitivity_lines(seed_sensitivities(frame), variants),
        *_edge_best_lines(sensitivity),
        f"![learning-rate sweep]({SWEEP_FIGURE})",
        "",
        *_budget_lines(stored),
    ]
    optima = optimum_section(frame, variants)
    tables = {"sweep_runs.csv": frame, "sweep.csv": table, "lr_sensitivity.csv": sensitivity}
    return Section(
        lines + optima.lines, tables | optima.tables, {SWEEP_FIGURE: figure}
    ), sensitivity


def _budget_lines(stored: StoredExperiment) -> list[str]:
    """The sweep's budget and, where the figure draws max-stable-LR lines, the probes'
    (often another: a boundary at one budget beside sweep points at another)."""
    every = stored.stored_runs
    if "group" not in every:
        return []
    sweep = every[every["group"] == "sweep"]
    text = f"Budgets: the sweep's runs {budget_text(sweep)}"
    probes = every[every["group"] == "max_lr"]
    if len(probes):
        text += f"; the max-stable-LR lines, from the probes' runs, {budget_text(probes)}"
    return [text + ".", ""]


def curve_section(stored: StoredExperiment, variants: list[str]) -> Section:
    """The curve stage's optima (Markdown, CSVs): none without curve runs."""
    frame = sweep_frame(stored.manifest.runs, stored.runs, "curve")
    if frame.empty:
        return Section()
    seeds = sorted(frame["seed"].unique().tolist())
    found = optimum_section(frame, variants, "curve")
    lines = [
        "## LR curve: each variant's optimum",
        "",
        f"Every variant at every LR of the curve's lattice on curve seeds {seeds} (not the "
        "final seeds), at the curve's budget; a grid whose lowest point lay at its end grew "
        "there by an octave (up to `curve.extend`). With a curve the tuned A/B trains each "
        "variant at its optimum below (and the search's best warmup, where there is a search).",
        "",
        *found.lines,
        *early_stop_lines(stored),
        *warmup_lines(stored),
    ]
    return Section(lines, {**found.tables, CURVE_EVALS: stored.curve_evals})


CURVE_EVALS = "curve_evals.csv"  # every evaluation of every curve run


def early_stop_lines(stored: StoredExperiment) -> list[str]:
    """What the curve's early stop stopped and what that spared; none where it was off."""
    stop = stored.manifest.curve_stop
    curve = stored.runs[stored.runs["run_id"].isin(stored.manifest.group_ids("curve"))]
    if not stop or curve.empty:
        return []
    stopped = curve[curve["status"] == "pruned"]
    points = curve.groupby(["variant", "lr"]).ngroups
    spared = len(stopped) * (int(curve["planned_steps"].max()) - stop["step"])
    return [
        f"Early stop (`curve.stop_step` {stop['step']}): every curve run was held at step "
        f"{stop['step']}, and a point whose val loss there lay more than {stop['margin']:g} nats "
        "above its variant's best point, mean over the curve seeds, stopped there: "
        f"{stopped.groupby(['variant', 'lr']).ngroups} of {points} points ({len(stopped)} runs), "
        f"sparing {spared:,} run-steps. `{CURVE_EVALS}` holds every evaluation of every curve "
        "run, to recompute the rule; docs/early-stop.md gives its replay on real curves.",
        "",
    ]


@dataclass(frozen=True)
class WarmupStudy:
    """One variant's warmup study at its tuned LR: the warmups ``tried`` (ascending), the
    ``best`` of them and its mean final val loss over the curve seeds (``loss``), and whether
    the best is an end of the searched range (``at_edge``: the optimum may lie beyond it)."""

    variant: str
    tried: list[int]
    best: int
    loss: float
    at_edge: bool


def warmup_studies(stored: StoredExperiment) -> list[WarmupStudy]:
    """Each tuned variant's :class:`WarmupStudy` (none without a warmup range or its runs)."""
    span = stored.manifest.warmup_range
    every = stored.stored_runs
    if not span or "group" not in every or stored.tuned.empty:
        return []
    found = []
    for variant, tuned in stored.tuned.groupby("variant", sort=False):
        runs = every[
            (every["group"] == "warmup")
            & (every["variant"] == variant)
            & (every["lr"] == tuned["lr"].iloc[0])
        ]
        if runs.empty:
            continue
        means = runs.assign(value=selection_values(runs)).groupby("warmup_steps")["value"].mean()
        best = int(means.idxmin())
        found.append(WarmupStudy(variant, list(means.index), best, means.min(), best in span))
    return found


def warmup_lines(stored: StoredExperiment) -> list[str]:
    """Each variant's warmup study at its tuned LR (:func:`warmup_studies`) in words."""
    span = stored.manifest.warmup_range
    if not span or "group" not in stored.stored_runs or stored.tuned.empty:
        return []
    lines = [
        "",
        "Each variant's warmup study at its optimum LR (mean final val loss over the "
        "curve seeds, an unstable run counted as min(ℓ, ℓ0)):",
        "",
    ]
    for study in warmup_studies(stored):
        edge = (
            f" — **at the searched range's edge** ({span[0]}–{span[1]} steps): the optimum may "
            "lie beyond it; widen `curve.warmup_grid` (or `warmup_min`/`warmup_max`)"
            if study.at_edge
            else ""
        )
        lines.append(
            f"- {study.variant}: {len(study.tried)} warmups tried "
            f"({', '.join(map(str, study.tried))}), best {study.best} steps ({study.loss:.4f})"
            f"{edge}."
        )
    return [*lines, ""]


def seed_sensitivity_lines(per_seed: pd.DataFrame, variants: list[str]) -> list[str]:
    """The LR sensitivity over seeds, each against its own best: each variant's mean with its
    95% t interval, and each one's difference to the baseline paired by seed (descriptive)."""
    own, paired = seed_sensitivity_intervals(per_seed, variants)
    if not own:
        return []
    baseline = next(iter(own))
    parts = [f"{v} {f.mean:.4g} [{f.ci_low:.4g}, {f.ci_high:.4g}]" for v, f in own.items()]
    diffs = [f"{v} − {baseline} {delta_ci(f.mean, f.ci_low, f.ci_high)}" for v, f in paired.items()]
    seeds = per_seed["seed"].nunique()
    return [
        f"Over seeds, each against its own best ({seeds} seeds, 95% t intervals, "
        f"descriptive): {'; '.join(parts)}"
        + (f"; paired by seed, {'; '.join(diffs)}" if diffs else "")
        + ".",
        "",
    ]


def seed_sensitivity_intervals(
    per_seed: pd.DataFrame, variants: list[str]
) -> tuple[dict[str, PairedDifference], dict[str, PairedDifference]]:
    """Each variant's LR sensitivity over seeds (mean, 95% t interval), and each one's
    difference to the first present variant paired by seed; both empty under two seeds."""
    wide = per_seed.pivot(index="seed", columns="variant", values="lr_sensitivity")
    present = [v for v in variants if v in wide]
    if len(wide) < 2 or not present:
        return {}, {}
    own = {v: mean_difference(wide[v]) for v in present}
    paired = {v: mean_difference(wide[v] - wide[present[0]]) for v in present[1:]}
    return own, paired


def _edge_best_lines(sensitivity: pd.DataFrame) -> list[str]:
    """A warning for each variant whose sweep is best at the grid's edge: its ℓ* is not an
    optimum, so its sensitivity is measured from a point the grid does not bracket."""
    edge = sensitivity.loc[~sensitivity["best_inside"], "variant"].tolist()
    if not edge:
        return []
    return [
        f"**Best at the grid's edge** ({', '.join(edge)}): the lowest loss is at the first or "
        "last LR of the sweep, so ℓ* is not an optimum and the sensitivity above is measured "
        "from the grid's edge; widen `sweep` to bracket it.",
        "",
    ]


def _span(region: dict | None, key: str, fmt: str) -> str:
    if not region:
        return "none stable"
    low, high = region[key]
    return f"{fmt.format(low)} – {fmt.format(high)}"


SEARCHED = {"lr": "LR", "warmup_steps": "warmup"}


def edges_of_best(trials: pd.DataFrame, best: BestTrial | None) -> list[str]:
    """The searched parameters whose best value is the smallest or the largest any counted
    trial tried: no trial brackets the optimum on that side, so it may lie beyond."""
    if not best or trials.empty:
        return []
    found = []
    for key, name in SEARCHED.items():
        tried = trials[key].dropna()
        value = getattr(best, key)
        if len(tried) > 1 and value is not None:
            if value <= tried.min():
                found.append(f"{name} lowest tried")
            elif value >= tried.max():
                found.append(f"{name} highest tried")
    return found


def _rerun_lines(reruns: dict[str, list[int]]) -> list[str]:
    """The trials cut short (an interrupt, a crash, a dead worker) and re-run, if any."""
    cut = [f"{v} #{slot}" for v, slots in reruns.items() for slot in slots]
    if not cut:
        return []
    return [
        f"Re-run after being cut short: {', '.join(cut)}, each with its parameters, its run and "
        "its place in the sampler's sequence, so the trials after it are those of a search "
        "never cut.",
        "",
    ]


def search_section(studies: Studies, variants: list[str], startup: int | None = None) -> Section:
    """Markdown, CSV and figure of the LR x warmup search; ``startup``: TPE's random start-up
    trials per study (None: not recorded)."""
    found = studies.search
    if not found:
        return Section()
    trials = pd.DataFrame(
        [{"variant": v, **t.stored()} for v, r in found.items() for t in r.trial_table]
    )
    edges = best_edges(studies, trials)
    best = pd.DataFrame(
        [
            {
                "variant": v,
                "best lr": r.best and r.best.lr,
                "best warmup": r.best and r.best.warmup_steps,
                "best val loss": r.best and r.best.value,
                "trials (complete / pruned)": f"{r.complete} / {r.pruned}",
                "best at the trials' edge": ", ".join(edges[v]) or "no",
                "stable lr range": _span(r.stable_region, "lr", "{:.3g}"),
                "stable warmup range": _span(r.stable_region, "warmup_steps", "{}"),
            }
            for v, r in found.items()
        ]
    )
    lines = [
        "## Search: learning rate x warmup",
        "",
        best.to_markdown(index=False, floatfmt=".4g"),
        "",
        *startup_lines(startup),
        *edge_lines(edges),
        *_rerun_lines({v: r.reruns for v, r in found.items()}),
    ]
    section = Section(lines, {"search_trials.csv": trials})
    if len(trials):
        figure = stability_map_figure(trials, [v for v in variants if v in found])
        section.figures["stability_map.png"] = figure
        section.lines += [
            "Stability map: every search trial in the LR × warmup plane (colour: final val loss; "
            "x: unstable; +: pruned).",
            "",
            "![search trials](stability_map.png)",
            "",
        ]
    return section


def best_edges(studies: Studies, trials: pd.DataFrame) -> dict[str, list[str]]:
    """Per searched variant, the sides of the search its best trial has no trial beyond
    (:func:`edges_of_best` over its rows of ``trials``, the search's trial table)."""
    return {
        v: edges_of_best(trials[trials["variant"] == v] if len(trials) else trials, r.best)
        for v, r in studies.search.items()
    }


def startup_lines(startup: int | None) -> list[str]:
    """The sampler's random start-up trials per study, in words (nothing: not recorded)."""
    if startup is None:
        return []
    return [
        f"The first {startup} trials of each study were the sampler's random start-up; the "
        "rest were proposed by TPE from the trials before them.",
        "",
    ]


def edge_lines(edges: dict[str, list[str]]) -> list[str]:
    """A warning for each variant whose best trial no trial brackets on some side."""
    shown = {v: e for v, e in edges.items() if e}
    if not shown:
        return []
    where = "; ".join(f"{v}: {', '.join(e)}" for v, e in shown.items())
    return [
        f"**Best at the edge of what the search tried** ({where}): no trial lies beyond it "
        "there, so the optimum may; widen that range of `search` or add trials.",
        "",
    ]
