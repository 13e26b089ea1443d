"""Tables and figures built from the results store alone: report.md, CSVs and a loss-curve plot.

:func:`build_report` reads an experiment's folder (its ``experiment.json`` manifest and every
run's summary and metrics) and writes, into the report folder:

- ``variants.csv`` / ``variants.md``: per variant, final val loss mean ± std over seeds, the
  paired difference against the baseline (first) variant with a 95% interval and the paired
  t-test's p-value, parameters and tokens/s;
- ``runs.csv``: one row per run of the current plan (the summary.json keys);
- ``loss_curves.png``: val loss (mean ± std over seeds) and train loss against step;
- ``report.md``: all of the above with what is missing said, not hidden.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from matplotlib.figure import Figure

from ablate import store
from ablate.analysis import curve_band, variant_table

TRAIN_SMOOTHING = 10  # steps in the rolling mean of the train-loss curve


@dataclass(frozen=True)
class Report:
    """Paths of what :func:`build_report` wrote, and the variant table."""

    folder: Path
    markdown: Path
    table: pd.DataFrame
    figure: Path | None
    missing: list[str]

    @property
    def table_markdown(self) -> str:
        """The variant table as Markdown."""
        return markdown_table(self.table)


def planned_runs(exp_dir: Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """The manifest, the summaries of its planned runs, and their metrics."""
    manifest = store.read_manifest(exp_dir)
    runs = store.load_summaries(exp_dir)
    metrics = store.load_metrics(exp_dir)
    planned_ids = {r["run_id"] for r in manifest["runs"]}
    if planned_ids:
        runs = runs[runs["run_id"].isin(planned_ids)]
        if len(metrics):
            metrics = metrics[metrics["run_id"].isin(planned_ids)]
    return manifest, runs, metrics


def _fmt(value: object, digits: int = 4) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(table: pd.DataFrame) -> str:
    """The variant table as Markdown, with mean ± std and the interval in one cell each."""
    shown = pd.DataFrame(
        {
            "variant": table["variant"],
            "runs (finished / diverged)": [
                f"{r.runs} ({r.finished} / {r.diverged})" for r in table.itertuples()
            ],
            "final val loss, mean ± std": [
                f"{_fmt(r.final_val_loss_mean)} ± {_fmt(r.final_val_loss_std)}"
                for r in table.itertuples()
            ],
            "Δ vs baseline [95% CI]": [
                "baseline"
                if i == 0
                else f"{_fmt(r.diff_vs_baseline)} [{_fmt(r.diff_ci_low)}, {_fmt(r.diff_ci_high)}]"
                for i, r in enumerate(table.itertuples())
            ],
            "paired t-test p (pairs)": [
                "–" if i == 0 else f"{_fmt(r.paired_t_p, 3)} ({r.n_pairs})"
                for i, r in enumerate(table.itertuples())
            ],
            "parameters": table["n_params"].map(lambda n: f"{int(n):,}" if pd.notna(n) else "–"),
            "tokens/s": table["tokens_per_s_mean"].map(lambda v: _fmt(v, 0)),
        }
    )
    return shown.to_markdown(index=False)


def loss_figure(metrics: pd.DataFrame, variants: list[str], path: Path) -> Path | None:
    """Val loss (mean ± std band over seeds) and smoothed train loss against step."""
    if metrics.empty:
        return None
    fig = Figure(figsize=(11, 4.2))  # no pyplot: no global state, no GUI backend
    ax_val, ax_train = fig.subplots(1, 2)
    smoothed = metrics.sort_values("step").assign(
        train_smooth=lambda f: f.groupby("run_id")["train_loss"].transform(
            lambda s: s.rolling(TRAIN_SMOOTHING, min_periods=1).mean()
        )
    )
    val, train = curve_band(metrics, "val_loss"), curve_band(smoothed, "train_smooth")
    for i, variant in enumerate(variants):
        color = f"C{i}"
        for ax, band in ((ax_val, val), (ax_train, train)):
            mine = band[band["variant"] == variant]
            if mine.empty:
                continue
            n = int(mine["count"].max())
            ax.plot(mine["step"], mine["mean"], color=color, label=f"{variant} (n={n})")
            std = mine["std"].fillna(0.0)
            ax.fill_between(
                mine["step"], mine["mean"] - std, mine["mean"] + std, color=color, alpha=0.2
            )
    ax_val.set_title("validation loss (mean ± std over seeds)")
    ax_train.set_title(f"train loss ({TRAIN_SMOOTHING}-step mean, ± std over seeds)")
    for ax in (ax_val, ax_train):
        ax.set_xlabel("optimizer step")
        ax.set_ylabel("cross-entropy (nats / token)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def missing_runs(manifest: dict, runs: pd.DataFrame) -> list[str]:
    """'variant seed=N' for every planned run without a finished or diverged summary."""
    have = set(runs["run_id"]) if len(runs) else set()
    return [f"{r['variant']} seed={r['seed']}" for r in manifest["runs"] if r["run_id"] not in have]


def report_markdown(
    manifest: dict, table: pd.DataFrame, missing: list[str], figure: Path | None
) -> str:
    """report.md: what was compared, the table, the figure, and what is missing."""
    variants, baseline = manifest["variants"], manifest["variants"][0]
    lines = [
        f"# {manifest['name']}",
        "",
        manifest.get("description") or "",
        "",
        f"Variants: {', '.join(variants)} (baseline: {baseline}); seeds: {manifest['seeds']}.",
        "",
    ]
    if missing:
        lines += [
            f"**Incomplete:** {len(missing)} planned run(s) have no result yet: "
            f"{', '.join(missing)}.",
            "",
        ]
    lines += [
        "## Final validation loss",
        "",
        markdown_table(table),
        "",
        "Loss statistics use finished runs; diverged runs are counted, not averaged. "
        "Δ is variant − baseline over matched seeds (same initial weights for shared parameters, "
        "same batches); the interval and p-value come from a paired t-test "
        "(`scipy.stats.ttest_rel`). With fewer than 2 pairs no interval is given.",
        "",
    ]
    if figure is not None:
        lines += ["## Loss curves", "", f"![loss curves]({figure.name})", ""]
    return "\n".join(lines)


def build_report(exp_dir: Path, report_dir: Path) -> Report:
    """Rebuild every table and figure of an experiment from its stored results."""
    manifest, runs, metrics = planned_runs(exp_dir)
    variants = manifest["variants"] or sorted(runs["variant"].unique())
    table = variant_table(runs, variants, variants[0])
    report_dir.mkdir(parents=True, exist_ok=True)
    store.write_frame_atomic(report_dir / "variants.csv", table)
    store.write_frame_atomic(report_dir / "runs.csv", runs)
    figure = loss_figure(metrics, variants, report_dir / "loss_curves.png")
    missing = missing_runs(manifest, runs)
    md = report_markdown(manifest, table, missing, figure)
    store.write_text_atomic(report_dir / "variants.md", markdown_table(table) + "\n")
    store.write_text_atomic(report_dir / "report.md", md)
    return Report(report_dir, report_dir / "report.md", table, figure, missing)
