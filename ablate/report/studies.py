"""The report's study sections: the LR sweep, the max-stable-LR brackets and the search.

Each returns a :class:`~ablate.report.section.Section`; :func:`attach_studies` adds the brackets
and the LR sensitivity to the variant table.
"""

from __future__ import annotations

import pandas as pd

from ablate.report.analysis import sensitivity_table, sweep_frame, sweep_table
from ablate.report.figures import stability_map_figure, sweep_figure
from ablate.report.load import StoredExperiment, unigram_floor
from ablate.report.section import Section
from ablate.report.summary import contradiction_text

SWEEP_FIGURE = "lr_sweep.png"


def attach_studies(table: pd.DataFrame, sensitivity: pd.DataFrame, studies: dict) -> pd.DataFrame:
    """Add the max-stable-LR bracket and the LR sensitivity to the variant table when present."""
    brackets = studies.get("max_lr") or {}
    if brackets:
        table = table.assign(
            max_stable_lr=[
                (brackets.get(v) or {}).get("bracket", [None, None])[0] for v in table["variant"]
            ],
            min_unstable_lr=[
                (brackets.get(v) or {}).get("bracket", [None, None])[1] for v in table["variant"]
            ],
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
    frame = sweep_frame(stored.manifest["runs"], stored.runs)
    if frame.empty:
        return Section(), pd.DataFrame()
    table = sweep_table(frame)
    sensitivity = sensitivity_table(table, frame)
    brackets = (stored.studies or {}).get("max_lr", {})
    losses = (float(frame["initial_loss"].iloc[0]), unigram_floor(stored.runs))
    figure = sweep_figure(table, variants, losses, brackets)
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
        *_edge_best_lines(sensitivity),
        f"![learning-rate sweep]({SWEEP_FIGURE})",
        "",
    ]
    tables = {"sweep_runs.csv": frame, "sweep.csv": table, "lr_sensitivity.csv": sensitivity}
    return Section(lines, tables, {SWEEP_FIGURE: figure}), sensitivity


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


def max_lr_section(studies: dict) -> Section:
    """Markdown and CSV of the max-stable-LR brackets."""
    found = studies.get("max_lr") or {}
    if not found:
        return Section()
    table = pd.DataFrame(
        [
            {
                "variant": v,
                "largest stable lr": r["bracket"][0],
                "smallest unstable lr": r["bracket"][1],
                "ratio": r["ratio"],
                "seeds": len(r["seeds"]),
                "runs": r["runs_total"],
                "probes": len(r["probes"]),
                "seeds that failed": r["failed_seeds"],
                "monotone": _monotone_text(r),
            }
            for v, r in found.items()
        ]
    )
    lines = [
        "## Maximum stable learning rate",
        "",
        "The largest LR stable for every seed, by bracketing (coarse steps, then bisection in "
        "log space); each probe is a trial of the variant's `max_lr` Optuna study. Each "
        "bracket is then checked against every stored run of the variant at the same budget "
        "(sweep points, search trials, probes, main runs): *monotone* when none is stable above "
        "an LR where the same seed failed, nor unstable below the largest stable LR.",
        "",
        table.to_markdown(index=False, floatfmt=".4g"),
        "",
    ]
    for variant, r in found.items():
        if r.get("contradictions"):
            lines += [
                f"Runs that contradict {variant}'s bracket: "
                f"{contradiction_text(r['contradictions'])}.",
                "",
            ]
    return Section(lines, {"max_lr.csv": table})


def _monotone_text(bracket: dict) -> str:
    if "monotone" not in bracket:
        return "not checked"
    if bracket["monotone"]:
        return f"yes ({bracket['checked_runs']} runs)"
    return f"NO: {len(bracket['contradictions'])} of {bracket['checked_runs']} runs contradict"


def _span(region: dict | None, key: str, fmt: str) -> str:
    if not region:
        return "none stable"
    low, high = region[key]
    return f"{fmt.format(low)} – {fmt.format(high)}"


def search_section(studies: dict, variants: list[str]) -> Section:
    """Markdown, CSV and figure of the LR x warmup search."""
    found = studies.get("search") or {}
    if not found:
        return Section()
    trials = pd.DataFrame(
        [{"variant": v, **t} for v, r in found.items() for t in r.get("trial_table", [])]
    )
    best = pd.DataFrame(
        [
            {
                "variant": v,
                "best lr": (r["best"] or {}).get("lr"),
                "best warmup": (r["best"] or {}).get("warmup_steps"),
                "best val loss": (r["best"] or {}).get("value"),
                "trials (complete / pruned)": f"{r['complete']} / {r['pruned']}",
                "stable lr range": _span(r["stable_region"], "lr", "{:.3g}"),
                "stable warmup range": _span(r["stable_region"], "warmup_steps", "{}"),
            }
            for v, r in found.items()
        ]
    )
    lines = [
        "## Search: learning rate x warmup",
        "",
        best.to_markdown(index=False, floatfmt=".4g"),
        "",
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
