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
from ablate.analysis import (
    curve_band,
    sensitivity_table,
    sweep_frame,
    sweep_table,
    variant_table,
)

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


@dataclass(frozen=True)
class StoredExperiment:
    """What the store holds of an experiment: its plan, runs, main-run metrics, studies."""

    manifest: dict
    runs: pd.DataFrame  # every planned run with a result (main and sweep)
    main: pd.DataFrame  # the main variant x seed runs
    metrics: pd.DataFrame  # per-step metrics of the main runs
    studies: dict | None  # stability.json, when search or max_lr ran


def load_experiment_results(exp_dir: Path) -> StoredExperiment:
    """Read the manifest, the planned runs' summaries and metrics, and stability.json."""
    manifest = store.read_manifest(exp_dir)
    runs = store.load_summaries(exp_dir)
    planned = {r["run_id"] for r in manifest["runs"]}
    main_ids = {r["run_id"] for r in manifest["runs"] if r.get("group", "main") == "main"}
    if planned:
        runs = runs[runs["run_id"].isin(planned)]
    main = runs[runs["run_id"].isin(main_ids)] if main_ids else runs
    metrics = store.load_metrics(exp_dir, main)  # only the main runs' curves are drawn
    studies = store.read_json(exp_dir / "stability.json")
    return StoredExperiment(manifest, runs, main, metrics, studies)


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
    """'variant seed=N [group lr]' for every planned run without a result, each once."""
    have = set(runs["run_id"]) if len(runs) else set()
    missing: dict[str, str] = {}
    for r in manifest["runs"]:
        if r["run_id"] not in have and r["run_id"] not in missing:
            group = r.get("group", "main")
            where = "" if group == "main" else f" ({group}, lr={r['lr']:.3g})"
            missing[r["run_id"]] = f"{r['variant']} seed={r['seed']}{where}"
    return list(missing.values())


def report_markdown(
    manifest: dict, table: pd.DataFrame, missing: list[str], figure: Path | None
) -> list[str]:
    """report.md's head: what was compared, the table, the loss curves, what is missing."""
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
    return lines


def sweep_figure(
    table: pd.DataFrame, variants: list[str], initial_loss: float, brackets: dict, path: Path
) -> Path:
    """Final val loss against LR per variant; points with an unstable seed marked x."""
    fig = Figure(figsize=(7.5, 4.5))
    ax = fig.subplots()
    for i, variant in enumerate(variants):
        mine = table[table["variant"] == variant]
        color = f"C{i}"
        ax.plot(mine["lr"], mine["loss_mean"], color=color, marker="o", label=variant)
        bad = mine[mine["unstable"] > 0]
        ax.scatter(
            bad["lr"],
            bad["loss_mean"],
            color=color,
            marker="x",
            s=90,
            zorder=3,
            label=f"{variant}: a seed unstable (counted at ℓ0)",
        )
        bracket = brackets.get(variant, {}).get("bracket")
        if bracket and bracket[0] and bracket[1]:
            ax.axvspan(
                bracket[0],
                bracket[1],
                color=color,
                alpha=0.15,
                label=f"{variant}: max stable LR bracket",
            )
    ax.axhline(initial_loss, color="grey", linestyle="--", linewidth=1, label="ℓ0 = ln(vocab)")
    ax.set_xscale("log")
    ax.set_xlabel("peak learning rate")
    ax.set_ylabel("final val loss, min(ℓ, ℓ0), mean over seeds (nats)")
    ax.set_title("learning-rate sweep")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def stability_map_figure(trials: pd.DataFrame, variants: list[str], path: Path) -> Path:
    """Search trials in the LR x warmup plane: colour = objective, x = unstable, + = pruned."""
    fig = Figure(figsize=(5.5 * len(variants), 4.3))
    axes = fig.subplots(1, len(variants), squeeze=False)[0]
    low, high = trials["value"].min(), trials["value"].max()
    for ax, variant in zip(axes, variants, strict=True):
        mine = trials[trials["variant"] == variant]
        done = mine[mine["state"] == "COMPLETE"]
        stable = done[done["stable"].eq(True)]  # None means unjudged
        points = ax.scatter(
            stable["lr"],
            stable["warmup_steps"],
            c=stable["value"],
            cmap="viridis_r",
            vmin=low,
            vmax=high,
            s=45,
            label="stable",
        )
        unstable = done[~done["stable"].eq(True)]
        ax.scatter(
            unstable["lr"],
            unstable["warmup_steps"],
            color="red",
            marker="x",
            s=60,
            label="unstable",
        )
        pruned = mine[mine["state"] == "PRUNED"]
        ax.scatter(
            pruned["lr"], pruned["warmup_steps"], color="grey", marker="+", s=60, label="pruned"
        )
        ax.set_xscale("log")
        ax.set_title(f"{variant}: search trials")
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("warmup steps")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        fig.colorbar(points, ax=ax, label="final val loss (unstable: min(ℓ, ℓ0))")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return path


def sweep_section(stored: StoredExperiment, variants: list[str], out: Path) -> list[str]:
    """Markdown (and CSVs, figure) for the LR sweep, if the experiment has one."""
    frame = sweep_frame(stored.manifest["runs"], stored.runs)
    if frame.empty:
        return []
    table = sweep_table(frame)
    sensitivity = sensitivity_table(table, frame)
    store.write_frame_atomic(out / "sweep_runs.csv", frame)
    store.write_frame_atomic(out / "sweep.csv", table)
    store.write_frame_atomic(out / "lr_sensitivity.csv", sensitivity)
    brackets = (stored.studies or {}).get("max_lr", {})
    figure = sweep_figure(
        table, variants, float(frame["initial_loss"].iloc[0]), brackets, out / "lr_sweep.png"
    )
    shown = table.assign(
        lr=table["lr"].map(lambda v: f"{v:.3g}"),
        loss=[
            f"{m:.4f}" + (f" ({u}/{n} unstable)" if u else "")
            for m, u, n in zip(table["loss_mean"], table["unstable"], table["seeds"], strict=True)
        ],
    ).pivot(index="lr", columns="variant", values="loss")
    shown = shown.loc[sorted(shown.index, key=float), [v for v in variants if v in shown]]
    return [
        "## Learning-rate sweep",
        "",
        "Final val loss (mean over seeds of min(ℓ, ℓ0); an unstable run counts as ℓ0):",
        "",
        shown.to_markdown(),
        "",
        "LR sensitivity E_lr[min(ℓ(lr), ℓ0)] − min_lr ℓ(lr) over this grid (lower: less "
        "sensitive to the learning rate):",
        "",
        sensitivity.to_markdown(index=False, floatfmt=".4g"),
        "",
        f"![learning-rate sweep]({figure.name})",
        "",
    ]


def max_lr_section(studies: dict, out: Path) -> list[str]:
    """Markdown and CSV of the max-stable-LR brackets."""
    found = studies.get("max_lr") or {}
    if not found:
        return []
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
            }
            for v, r in found.items()
        ]
    )
    store.write_frame_atomic(out / "max_lr.csv", table)
    return [
        "## Maximum stable learning rate",
        "",
        "The largest LR stable for every seed, by bracketing (coarse steps, then bisection in "
        "log space); each probe is a trial of the variant's `max_lr` Optuna study.",
        "",
        table.to_markdown(index=False, floatfmt=".4g"),
        "",
    ]


def _span(region: dict | None, key: str, fmt: str) -> str:
    if not region:
        return "none stable"
    low, high = region[key]
    return f"{fmt.format(low)} – {fmt.format(high)}"


def search_section(studies: dict, variants: list[str], out: Path) -> list[str]:
    """Markdown, CSV and figure of the LR x warmup search."""
    found = studies.get("search") or {}
    if not found:
        return []
    trials = pd.DataFrame(
        [{"variant": v, **t} for v, r in found.items() for t in r.get("trial_table", [])]
    )
    store.write_frame_atomic(out / "search_trials.csv", trials)
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
    if len(trials):
        figure = stability_map_figure(
            trials, [v for v in variants if v in found], out / "stability_map.png"
        )
        lines += [f"![search trials]({figure.name})", ""]
    return lines


def build_report(exp_dir: Path, report_dir: Path) -> Report:
    """Rebuild every table and figure of an experiment from its stored results."""
    stored = load_experiment_results(exp_dir)
    manifest = stored.manifest
    variants = manifest["variants"] or sorted(stored.main["variant"].unique())
    table = variant_table(stored.main, variants, variants[0])
    report_dir.mkdir(parents=True, exist_ok=True)
    store.write_frame_atomic(report_dir / "variants.csv", table)
    store.write_frame_atomic(report_dir / "runs.csv", stored.runs)
    figure = loss_figure(stored.metrics, variants, report_dir / "loss_curves.png")
    missing = missing_runs(manifest, stored.runs)
    lines = report_markdown(manifest, table, missing, figure)
    lines += sweep_section(stored, variants, report_dir)
    lines += max_lr_section(stored.studies or {}, report_dir)
    lines += search_section(stored.studies or {}, variants, report_dir)
    criterion = (stored.studies or {}).get("criterion") or manifest.get("criterion")
    if criterion:
        lines += ["## Stability criterion", "", f"A run is {criterion}.", ""]
    store.write_text_atomic(report_dir / "variants.md", markdown_table(table) + "\n")
    store.write_text_atomic(report_dir / "report.md", "\n".join(lines))
    return Report(report_dir, report_dir / "report.md", table, figure, missing)
