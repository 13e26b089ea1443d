"""The report, rebuilt from the results store alone: summary, tables, figures, Markdown and HTML.

:func:`build_report` reads an experiment's folder (its ``experiment.json`` manifest, every run's
summary, metrics and probes, and ``stability.json`` when studies ran) and writes, into the
report folder:

- ``report.md`` and a self-contained ``report.html`` (figures embedded, opens offline): a
  written summary of what the numbers do and do not support — leading with the tuned
  comparison when there is a search (the factors' main effects in a grid), p-values
  Holm-adjusted when there are several comparisons, a design of fewer than 3 seeds flagged,
  non-monotone max-LR brackets named — then the tables and figures;
- with a search, ``comparison.csv`` and ``variants_tuned.csv``: Δ at the shared LR beside Δ
  with each variant at its own tuned (LR, warmup), the max stable LR and the headroom;
- ``variants.csv`` / ``variants.md``: per variant, final and best val loss mean ± std over
  seeds, the paired difference to the baseline (first) variant with its 95% interval and
  paired t-test, parameters, tokens/s, step time, peak memory, non-finite counts, diverged
  runs, and (when studied) the max-stable-LR bracket and LR sensitivity;
- ``loss_difference.csv``: per variant and evaluation step, val loss − the baseline's on the
  same seed, mean and 95% interval (the ``loss_difference.png`` figure);
- ``runs.csv`` (one row per run), ``probes_last.csv`` (the probes at each run's last probe
  step) and the LR-sweep / search CSVs;
- for a grid, ``factors.csv`` and the factor tables (:mod:`ablate.report.factorial`); for a
  ``convert:`` section, ``convert.csv`` (jump after the swap, recovery, Δ vs continuing);
- the figures of :mod:`ablate.report.figures`.

It works on partial and still-running experiments: what is missing is listed with its state
(running, failed, not started), and every table and figure uses what is stored.
"""

from __future__ import annotations

import base64
import html
import math
import re
import time
from dataclasses import dataclass
from pathlib import Path

import markdown
import pandas as pd

from ablate.core import store
from ablate.core.plan import CONTROL, CONVERTED
from ablate.report.analysis import (
    DIFF_COLUMNS,
    column,
    curve_difference,
    difference_columns,
    holm,
    noise_floor,
    paired_difference,
    sensitivity_table,
    sweep_frame,
    sweep_table,
    variant_table,
)
from ablate.report.factorial import Design, factor_section, level_text
from ablate.report.figures import (
    convert_figure,
    difference_figure,
    interaction_figure,
    logit_figure,
    loss_figure,
    loss_time_figure,
    probe_figure,
    stability_map_figure,
    sweep_figure,
    throughput_figure,
)


@dataclass(frozen=True)
class Report:
    """Paths of what :func:`build_report` wrote, and the variant table."""

    folder: Path
    markdown: Path
    html: Path
    table: pd.DataFrame
    figures: list[Path]
    missing: list[str]

    @property
    def table_markdown(self) -> str:
        """The quality table as Markdown."""
        return quality_markdown(self.table)


@dataclass(frozen=True)
class StoredExperiment:
    """What the store holds of an experiment: its plan, runs, main-run metrics, studies."""

    manifest: dict
    runs: pd.DataFrame  # every planned run with a result (main and sweep)
    main: pd.DataFrame  # the main variant x seed runs (the shared-LR A/B)
    tuned: pd.DataFrame  # the tuned A/B: each variant at its best search settings
    metrics: pd.DataFrame  # per-step metrics of the main runs
    probes: pd.DataFrame  # probe rows of the main runs
    studies: dict | None  # stability.json, when search or max_lr ran
    missing: list[str]  # planned runs without a result, with their state
    convert: pd.DataFrame  # the convert: runs (continued and converted)
    convert_metrics: pd.DataFrame  # their per-step metrics


def load_experiment_results(exp_dir: Path) -> StoredExperiment:
    """Read the manifest, the planned runs' summaries, metrics and probes, and stability.json."""
    manifest = store.read_manifest(exp_dir)
    runs = store.load_summaries(exp_dir)
    planned = {r["run_id"] for r in manifest["runs"]}
    main_ids = {r["run_id"] for r in manifest["runs"] if r.get("group", "main") == "main"}
    if planned:
        runs = runs[runs["run_id"].isin(planned)]
    main = runs[runs["run_id"].isin(main_ids)] if main_ids else runs
    convert = runs[runs["run_id"].isin(_group_ids(manifest, "convert"))]
    return StoredExperiment(
        manifest=manifest,
        runs=runs,
        main=main,
        tuned=runs[runs["run_id"].isin(_group_ids(manifest, "tuned"))],
        metrics=store.load_metrics(exp_dir, main),  # only the main runs' curves are drawn
        probes=store.load_probes(exp_dir, main),
        studies=store.read_json(exp_dir / "stability.json"),
        missing=missing_runs(exp_dir, manifest, runs),
        convert=convert,
        convert_metrics=store.load_metrics(exp_dir, convert) if len(convert) else pd.DataFrame(),
    )


def _group_ids(manifest: dict, group: str) -> set[str]:
    return {r["run_id"] for r in manifest["runs"] if r.get("group") == group}


def missing_runs(exp_dir: Path, manifest: dict, runs: pd.DataFrame) -> list[str]:
    """'variant seed=N [group lr] (state)' for every planned run without a result, each once."""
    have = set(runs["run_id"]) if len(runs) else set()
    missing: dict[str, str] = {}
    for r in manifest["runs"]:
        if r["run_id"] in have or r["run_id"] in missing:
            continue
        group = r.get("group", "main")
        if group == "main":
            where = ""
        elif group in ("convert", "tuned"):
            where = f" ({group})"
        else:
            where = f" ({group}, lr={r['lr']:.3g})"
        state = store.pending_state(exp_dir / r["run_id"])
        missing[r["run_id"]] = f"{r['variant']} seed={r['seed']}{where}: {state}"
    return list(missing.values())


def _missing(value: object) -> bool:
    """None or NaN: shown as –."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def _fmt(value: object, digits: int = 4) -> str:
    if _missing(value):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _signed(value: object, digits: int = 4) -> str:
    """A difference with its sign, e.g. ``+0.0013`` or ``-0.0066``."""
    return "–" if _missing(value) else f"{float(value):+.{digits}f}"  # type: ignore[arg-type]


def _sig(value: object, figures: int = 3) -> str:
    """By significant figures, so that small values keep their digits (``9.9e-05``)."""
    return "–" if _missing(value) else f"{float(value):.{figures}g}"  # type: ignore[arg-type]


def _p(value: object) -> str:
    """A p-value: three decimals, or two significant figures below 0.001."""
    if _missing(value):
        return "–"
    p = float(value)  # type: ignore[arg-type]
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def _delta_ci(delta: object, low: object, high: object) -> str:
    """``+0.0013 [-0.0036, +0.0061]``."""
    return f"{_signed(delta)} [{_signed(low)}, {_signed(high)}]"


def _pm(mean: object, std: object, digits: int = 4) -> str:
    return f"{_fmt(mean, digits)} ± {_fmt(std, digits)}"


def quality_markdown(table: pd.DataFrame) -> str:
    """Loss per variant: mean ± std over seeds and the paired difference to the baseline."""
    rows = list(table.itertuples())
    base_params = rows[0].n_params if rows else None
    shown = pd.DataFrame(
        {
            "variant": table["variant"],
            "runs (finished / diverged / collapsed)": [
                f"{r.runs} ({r.finished} / {r.diverged} / {r.collapsed})" for r in rows
            ],
            "final val loss, mean ± std": [
                _pm(r.final_val_loss_mean, r.final_val_loss_std) for r in rows
            ],
            "best val loss, mean ± std": [
                _pm(r.best_val_loss_mean, r.best_val_loss_std) for r in rows
            ],
            "Δ final vs baseline [95% CI]": [
                "baseline"
                if i == 0
                else _delta_ci(r.diff_vs_baseline, r.diff_ci_low, r.diff_ci_high)
                for i, r in enumerate(rows)
            ],
            "paired t-test p (pairs)": [
                "–" if i == 0 else f"{_p(r.paired_t_p)} ({r.n_pairs})" for i, r in enumerate(rows)
            ],
            **(
                {"p, Holm-adjusted": ["–" if i == 0 else _p(r.p_holm) for i, r in enumerate(rows)]}
                if "p_holm" in table
                else {}
            ),
            "parameters (Δ)": [
                "–"
                if pd.isna(r.n_params)
                else f"{int(r.n_params):,}"
                + (
                    ""
                    if i == 0 or pd.isna(base_params)
                    else f" ({int(r.n_params - base_params):+,})"
                )
                for i, r in enumerate(rows)
            ],
        }
    )
    return shown.to_markdown(index=False)


def speed_markdown(table: pd.DataFrame, memory_kind: str) -> str:
    """Speed and numerical health per variant."""
    shown = pd.DataFrame(
        {
            "variant": table["variant"],
            "tokens/s, mean ± std": [
                _pm(r.tokens_per_s_mean, r.tokens_per_s_std, 0) for r in table.itertuples()
            ],
            "median step time (ms)": table["step_time_ms_mean"].map(lambda v: _fmt(v, 1)),
            f"peak memory (MiB, {memory_kind})": table["peak_memory_mb_mean"].map(
                lambda v: _fmt(v, 0)
            ),
            "non-finite values (probes)": table["nonfinite_values"],
        }
    )
    return shown.to_markdown(index=False)


def last_probes(probes: pd.DataFrame) -> pd.DataFrame:
    """Per run: the probes at its last probe step, one column per headline quantity."""
    if probes.empty:
        return pd.DataFrame()
    last = probes[probes["step"] == probes.groupby("run_id")["step"].transform("max")]
    blocks = last[last["site"].str.fullmatch(r"blocks\.\d+")]
    top = blocks[blocks["layer"] == blocks.groupby("run_id")["layer"].transform("max")]

    def per_run(frame: pd.DataFrame, quantity: str, how: str) -> pd.Series:
        return frame[frame["quantity"] == quantity].groupby("run_id")["value"].agg(how)

    frame = pd.DataFrame(
        {
            "resid_rms_last_block": per_run(top, "resid_rms", "max"),
            "grad_norm_max_block": per_run(blocks, "grad_norm", "max"),
            "attn_logit_max": per_run(last, "attn_logit_max", "max"),
            "logit_max_abs": per_run(last, "logit_max_abs", "max"),
        }
    )
    keys = last.groupby("run_id")[["variant", "seed", "step"]].first()
    return keys.join(frame).reset_index()


def probes_markdown(per_run: pd.DataFrame, variants: list[str]) -> str:
    """Mean over seeds of :func:`last_probes` per variant."""
    means = per_run.groupby("variant").mean(numeric_only=True).reindex(variants)
    shown = pd.DataFrame(
        {
            "variant": means.index,
            "step": means["step"].map(lambda v: _fmt(v, 0)),
            "residual RMS, last block": means["resid_rms_last_block"].map(_sig),
            "largest block grad norm": means["grad_norm_max_block"].map(_sig),
            "largest attention logit": means["attn_logit_max"].map(_sig),
            "largest abs output logit": means["logit_max_abs"].map(_sig),
        }
    )
    return shown.to_markdown(index=False)


def _interval_words(row: pd.Series, noise: float) -> str:
    """What one paired difference supports, in words with its numbers."""
    pairs = int(row["n_pairs"])
    if pairs < 2 or math.isnan(row["diff_ci_low"]):
        return f"only {pairs} matched pair(s): no interval, so no claim either way."
    if row["diff_ci_low"] <= 0 <= row["diff_ci_high"]:
        words = f"{pairs} seeds: the interval spans zero, so the data do not show a difference"
    else:
        side = "lower" if row["diff_vs_baseline"] < 0 else "higher"
        words = f"the interval excludes zero: {row['variant']}'s loss is {side}"
    if not math.isnan(noise) and abs(row["diff_vs_baseline"]) < noise:
        words += f"; |Δ| is within the seed-to-seed noise floor ({noise:.4f})"
    return words + "."


def _difference_lines(table: pd.DataFrame, noise: float, where: str) -> list[str]:
    """One sentence per variant: its paired difference to the baseline, and what it supports."""
    baseline = table.iloc[0]
    lines = []
    for _, row in table.iloc[1:].iterrows():
        holm_text = f", Holm-adjusted {_p(row['p_holm'])}" if "p_holm" in row else ""
        label = f"Final val loss {where}".rstrip()
        lines.append(
            f"- **{label}, {row['variant']} − {baseline['variant']}: "
            f"{_signed(row['diff_vs_baseline'])}** (95% CI [{_signed(row['diff_ci_low'])}, "
            f"{_signed(row['diff_ci_high'])}], paired t-test p = {_p(row['paired_t_p'])}"
            f"{holm_text}): " + _interval_words(row, noise)
        )
    return lines


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
            f"{r.factor} = {level_text(r.level)}: {_signed(r.effect)} "
            f"[{_signed(r.effect_ci_low)}, {_signed(r.effect_ci_high)}], p {_p(r.effect_p)}, "
            f"Holm {_p(r.effect_p_holm)} ({r.seeds} seeds): {supported}."
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
    seeds = stored.manifest["seeds"]
    lines = []
    if tuned is not None:
        search_seed = (stored.studies or {}).get("search_seed")
        lines.append(
            "- **Leading comparison: each variant at its own tuned LR and warmup** (the "
            f"search's best, found on seed {search_seed}, scored here on seeds {seeds}), since "
            "a shared LR favours whichever variant it happens to suit; the shared-LR "
            "comparison follows."
        )
    elif effects is not None:
        lines.append(
            "- **Leading comparison: the factors' main effects**, each level against its "
            "factor's first level, averaged over the other factors within each seed:"
        )
        lines += [f"  - {text}" for text in effect_sentences(effects)]
    if len(seeds) < 3:
        lines.append(
            f"- **Too few seeds:** {len(seeds)} per variant; fewer than 3 cannot estimate "
            "their own noise, so the intervals below are wide and no difference should be "
            "read from them."
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
    baseline = table.iloc[0]
    lines = ["## Summary", ""]
    if stored.missing:
        planned = len({r["run_id"] for r in stored.manifest["runs"]})
        lines.append(
            f"- **Partial results:** {len(stored.missing)} of {planned} planned runs have no "
            "result yet; everything below uses the runs that are stored."
        )
    lines += lead_lines(stored, tuned, effects)
    if tuned is not None:
        lines += _difference_lines(tuned, noise, "at tuned settings")
    lines += _difference_lines(table, noise, "at the shared LR" if tuned is not None else "")
    if _comparisons(table, tuned) > 1:
        lines.append(
            f"- {_comparisons(table, tuned)} comparisons in this report: p-values are also "
            "given Holm-adjusted for multiplicity."
        )
    if not math.isnan(noise):
        lines.append(
            f"- Seed-to-seed noise floor (std of the final val loss over seeds, pooled over "
            f"variants): {noise:.4f}."
        )
    lines.append(f"- Unstable main runs: {unstable_text(table)}.")
    base_speed = baseline["tokens_per_s_mean"]
    for _, row in table.iloc[1:].iterrows():
        if pd.notna(row["tokens_per_s_mean"]) and pd.notna(base_speed) and base_speed > 0:
            lines.append(
                f"- Throughput: {row['variant']} {row['tokens_per_s_mean']:,.0f} tokens/s vs "
                f"{baseline['variant']} {base_speed:,.0f} "
                f"({row['tokens_per_s_mean'] / base_speed:.3f}×; seed-to-seed std "
                f"{_fmt(row['tokens_per_s_std'], 0)} and {_fmt(baseline['tokens_per_s_std'], 0)}), "
                "measured during training on this machine."
            )
    lines += _bracket_lines(stored.studies or {})
    return lines + [""]


def _bracket_lines(studies: dict) -> list[str]:
    brackets = studies.get("max_lr") or {}
    lines = []
    for variant, r in brackets.items():
        low, high = r.get("bracket", [None, None])
        if low is None:
            lines.append(
                f"- {variant}: **no stable LR found**: none of the {len(r['probes'])} LRs probed "
                f"({_lr_span(r)}) ended below the floor for every seed; the budget may be too "
                "small to learn, so no bracket is given."
            )
        if r.get("monotone") is False:
            lines.append(
                f"- {variant}: **the bracket is non-monotone**: {len(r['contradictions'])} of "
                f"{r['checked_runs']} stored runs at the same budget contradict a single "
                f"boundary ({_contradiction_text(r['contradictions'])})."
            )
    found = {v: r for v, r in brackets.items() if all(r.get("bracket", []))}
    if not found:
        return lines
    text = ", ".join(
        f"{v} [{r['bracket'][0]:.3g}, {r['bracket'][1]:.3g}]" for v, r in found.items()
    )
    lines.append(f"- Max stable LR brackets (every seed stable): {text}.")
    if len(found) == 2:
        (va, a), (vb, b) = found.items()
        overlap = a["bracket"][0] < b["bracket"][1] and b["bracket"][0] < a["bracket"][1]
        ratio = math.sqrt(b["bracket"][0] * b["bracket"][1] / (a["bracket"][0] * a["bracket"][1]))
        verdict = "overlap: no difference at this precision" if overlap else "do not overlap"
        lines.append(
            f"  The brackets {verdict}; {vb}/{va} ratio of geometric midpoints {ratio:.2f}."
        )
    return lines


def _lr_span(bracket: dict) -> str:
    lrs = [p["lr"] for p in bracket["probes"]]
    return f"{min(lrs):.3g} to {max(lrs):.3g}" if lrs else "none"


def _contradiction_text(found: list[dict]) -> str:
    return "; ".join(
        f"{'stable' if c['stable'] else 'unstable'} {c['group']} run {c['run_id']} "
        f"seed {c['seed']} at lr {c['lr']:.3g}"
        for c in found
    )


def _comparisons(table: pd.DataFrame, tuned: pd.DataFrame | None) -> int:
    """Paired comparisons against the baseline in the report (shared and tuned)."""
    return len(table) - 1 + (len(tuned) - 1 if tuned is not None else 0)


def with_holm(
    table: pd.DataFrame, tuned: pd.DataFrame | None
) -> tuple[pd.DataFrame, pd.DataFrame | None]:
    """Both tables with ``p_holm``: their p-values adjusted together (Holm), when there is
    more than one comparison."""
    if _comparisons(table, tuned) < 2:
        return table, tuned
    frames = [table] if tuned is None else [table, tuned]
    adjusted = holm([p for f in frames for p in f["paired_t_p"].iloc[1:]])
    out, start = [], 0
    for frame in frames:
        n = len(frame) - 1
        out.append(frame.assign(p_holm=[float("nan"), *adjusted[start : start + n]]))
        start += n
    return out[0], (out[1] if tuned is not None else None)


def _diff_text(row: pd.Series | None) -> str:
    if row is None or pd.isna(row["diff_vs_baseline"]):
        return "–"
    holm_text = f", Holm {_p(row['p_holm'])}" if "p_holm" in row else ""
    return (
        f"{_signed(row['diff_vs_baseline'])} [{_signed(row['diff_ci_low'])}, "
        f"{_signed(row['diff_ci_high'])}], p {_p(row['paired_t_p'])}{holm_text}"
    )


def comparison_table(
    stored: StoredExperiment, table: pd.DataFrame, tuned: pd.DataFrame
) -> pd.DataFrame:
    """Per variant: Δ at the shared LR and Δ at its tuned settings, the settings, the max
    stable LR and the headroom (max stable LR / tuned LR)."""
    studies = stored.studies or {}
    rows = []
    for i, variant in enumerate(table["variant"]):
        shared = stored.main[stored.main["variant"] == variant]
        mine = stored.tuned[stored.tuned["variant"] == variant]
        best = ((studies.get("search") or {}).get(variant) or {}).get("best") or {}
        low = ((studies.get("max_lr") or {}).get(variant) or {}).get("bracket", [None])[0]
        tuned_lr = float(mine["lr"].iloc[0]) if len(mine) else best.get("lr")
        rows.append(
            {
                "variant": variant,
                "shared_lr": float(shared["lr"].iloc[0]) if len(shared) else None,
                "shared_warmup": int(shared["warmup_steps"].iloc[0]) if len(shared) else None,
                "delta_shared": _diff_text(table.iloc[i] if i else None),
                "tuned_lr": tuned_lr,
                "tuned_warmup": best.get("warmup_steps"),
                "search_best_val_loss": best.get("value"),
                "tuned_final_val_loss": tuned.iloc[i]["final_val_loss_mean"],
                "delta_tuned": _diff_text(tuned.iloc[i] if i else None),
                "max_stable_lr": low,
                "headroom": low / tuned_lr if low and tuned_lr else None,
            }
        )
    return pd.DataFrame(rows)


def comparison_section(
    stored: StoredExperiment, table: pd.DataFrame, tuned: pd.DataFrame, out: Path
) -> list[str]:
    """Markdown and CSVs of the question answered twice: shared LR and tuned settings."""
    frame = comparison_table(stored, table, tuned)
    store.write_frame_atomic(out / "comparison.csv", frame)
    store.write_frame_atomic(out / "variants_tuned.csv", tuned)
    shown = pd.DataFrame(
        {
            "variant": frame["variant"],
            "shared LR, warmup": [
                f"{r.shared_lr:.3g}, {r.shared_warmup}" if r.shared_lr else "–"
                for r in frame.itertuples()
            ],
            "Δ at shared LR [95% CI], p": frame["delta_shared"],
            "tuned LR, warmup": [
                f"{r.tuned_lr:.3g}, {r.tuned_warmup}" if r.tuned_lr else "–"
                for r in frame.itertuples()
            ],
            "final val loss, tuned": [
                _pm(m, s)
                for m, s in zip(
                    tuned["final_val_loss_mean"], tuned["final_val_loss_std"], strict=True
                )
            ],
            "Δ at tuned settings [95% CI], p": frame["delta_tuned"],
            "max stable LR": frame["max_stable_lr"].map(lambda v: _sig(v) if v else "–"),
            "headroom (max stable / tuned LR)": frame["headroom"].map(
                lambda v: f"{v:.2f}×" if v else "–"
            ),
        }
    )
    return [
        "## Shared LR and tuned settings",
        "",
        "The same question answered twice: every variant at the file's shared LR and warmup, "
        "and every variant at its own best (LR, warmup) from the search, trained at the full "
        "budget on the same seeds (matched initial weights and batches). Δ = variant − "
        "baseline over matched seeds. Headroom: how far above its tuned LR a variant stays "
        "stable (max stable LR as bracketed at the `max_lr` budget, which may be shorter than "
        "the tuned runs').",
        "",
        shown.to_markdown(index=False),
        "",
    ]


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


def sweep_section(
    stored: StoredExperiment, variants: list[str], out: Path
) -> tuple[list[str], pd.DataFrame]:
    """Markdown (and CSVs, figure) for the LR sweep, and the sensitivity table."""
    frame = sweep_frame(stored.manifest["runs"], stored.runs)
    if frame.empty:
        return [], pd.DataFrame()
    table = sweep_table(frame)
    sensitivity = sensitivity_table(table, frame)
    store.write_frame_atomic(out / "sweep_runs.csv", frame)
    store.write_frame_atomic(out / "sweep.csv", table)
    store.write_frame_atomic(out / "lr_sensitivity.csv", sensitivity)
    brackets = (stored.studies or {}).get("max_lr", {})
    losses = (float(frame["initial_loss"].iloc[0]), unigram_floor(stored.runs))
    figure = sweep_figure(table, variants, losses, brackets, out / "lr_sweep.png")
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
    return lines, sensitivity


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
                "monotone": _monotone_text(r),
            }
            for v, r in found.items()
        ]
    )
    store.write_frame_atomic(out / "max_lr.csv", table)
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
                f"{_contradiction_text(r['contradictions'])}.",
                "",
            ]
    return lines


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
        lines += [
            "Stability map: every search trial in the LR × warmup plane (colour: final val loss; "
            "x: unstable; +: pruned).",
            "",
            f"![search trials]({figure.name})",
            "",
        ]
    return lines


def unigram_floor(runs: pd.DataFrame) -> float | None:
    """The corpus's unigram cross-entropy as the runs recorded it (None before it was)."""
    floor = column(runs, "unigram_loss").dropna()
    return float(floor.iloc[0]) if len(floor) else None


def _figure(lines: list[str], figure: Path | None, title: str, caption: str) -> None:
    if figure is not None:
        lines += [f"### {title}", "", caption, "", f"![{title}]({figure.name})", ""]


def main_sections(
    stored: StoredExperiment, table: pd.DataFrame, noise: float, out: Path
) -> list[str]:
    """Quality, speed and probe tables and their figures (main runs only)."""
    variants = list(table["variant"])
    kinds = sorted(
        set(stored.main.get("memory_kind", pd.Series(dtype=str)).dropna()) - {"unavailable"}
    )
    lines = [
        "## Final quality",
        "",
        quality_markdown(table),
        "",
        "Loss statistics use finished runs, collapsed ones included (their final loss is what "
        "they learned); diverged runs are counted, not averaged. Δ is "
        "variant − baseline over matched seeds (same initial weights for shared parameters, same "
        "batches); the interval and p-value come from a paired t-test (`scipy.stats.ttest_rel`). "
        "With fewer than 2 pairs no interval is given."
        + (
            f" Noise floor (pooled seed-to-seed std): {noise:.4f}." if not math.isnan(noise) else ""
        ),
        "",
        "## Speed and numerical health",
        "",
        speed_markdown(table, ", ".join(kinds) or "not measured"),
        "",
        "Tokens/s is over the training steps (evaluations excluded); the step time is each run's "
        "median, averaged over seeds. Peak memory is the CUDA allocator's peak on a GPU, the "
        "process's peak resident set on a CPU (interpreter and libraries included). Non-finite "
        "values are counted in activations and gradients at the probe steps.",
        "",
    ]
    difference = curve_difference(stored.metrics, variants, variants[0])
    if len(difference):
        store.write_frame_atomic(out / "loss_difference.csv", difference)
    figures = [
        loss_figure(stored.metrics, variants, out / "loss_curves.png", unigram_floor(stored.main)),
        difference_figure(difference, variants, out / "loss_difference.png"),
        loss_time_figure(stored.metrics, variants, out / "loss_time.png"),
        throughput_figure(stored.main, variants, out / "throughput.png"),
        probe_figure(stored.probes, variants, out / "probes.png"),
        logit_figure(stored.probes, variants, out / "logits.png"),
    ]
    per_run = last_probes(stored.probes)
    if len(per_run):
        store.write_frame_atomic(out / "probes_last.csv", per_run)
        lines += [
            "## Inside the model",
            "",
            "At each run's last probe step, mean over seeds:",
            "",
            probes_markdown(per_run, variants),
            "",
        ]
    lines += ["## Figures", ""]
    loss, difference_png, time_, speed, probes, logits = figures
    _figure(lines, loss, "Loss against step", "Mean ± std over seeds; train loss smoothed.")
    _figure(
        lines,
        difference_png,
        "Difference from the baseline against step",
        f"Val loss of each variant minus {variants[0]}'s on the same seed (same initial weights "
        "and batches), mean and 95% interval over seeds; below zero the variant is ahead.",
    )
    _figure(
        lines,
        time_,
        "Loss against wall-clock time",
        "Evaluations placed at the mean elapsed time of the seeds.",
    )
    _figure(lines, speed, "Throughput, step time and memory", "Bars: mean over seeds; dots: seeds.")
    _figure(
        lines,
        probes,
        "Activation RMS and gradient norm per layer",
        "Residual-stream RMS after each block and each block's gradient norm before clipping, "
        "at the probe steps, mean over seeds.",
    )
    _figure(
        lines,
        logits,
        "Attention and output logits",
        "Largest pre-softmax attention logit over layers, largest |output logit| and the mean "
        "log-sum-exp of the output logits, mean ± std over seeds.",
    )
    return lines


def factors_part(runs: pd.DataFrame, design: Design, out: Path) -> tuple[list[str], pd.DataFrame]:
    """The factor tables (:mod:`ablate.report.factorial`), factors.csv and the interaction figure;
    the lines and the main-effect table."""
    lines, effects, pairs = factor_section(runs, design)
    store.write_frame_atomic(out / "factors.csv", effects)
    figure = interaction_figure(pairs, out / "interactions.png")
    _figure(
        lines,
        figure,
        "Interactions",
        "Mean final val loss per level; one line per level of the second factor, ± std. "
        "Parallel lines: the factors' effects add up.",
    )
    return lines, effects


def convert_table(runs: pd.DataFrame) -> pd.DataFrame:
    """Per convert variant: loss before and right after the swap, the jump, the final loss,
    and the paired difference of the converted runs to the continued ones."""
    rows = []
    converted_diff = paired_difference(runs, CONVERTED, CONTROL)
    for variant in (CONTROL, CONVERTED):
        mine = runs[(runs["variant"] == variant) & (runs["status"] == "finished")]
        before, after = column(mine, "loss_before_swap"), column(mine, "loss_after_swap")
        final = column(mine, "final_val_loss")
        diff = converted_diff if variant == CONVERTED else None
        rows.append(
            {
                "variant": variant,
                "runs": int((runs["variant"] == variant).sum()),
                "finished": len(mine),
                "loss_before_swap": before.mean(),
                "loss_after_swap_mean": after.mean(),
                "loss_after_swap_std": after.std(ddof=1),
                "jump_mean": (after - before).mean(),
                "final_val_loss_mean": final.mean(),
                "final_val_loss_std": final.std(ddof=1),
                **difference_columns(diff, ("diff_vs_continued", *DIFF_COLUMNS[1:])),
            }
        )
    return pd.DataFrame(rows)


def convert_section(stored: StoredExperiment, out: Path) -> list[str]:
    """The checkpoint-conversion section: jump, recovery, mapping, figure (none without runs)."""
    runs = stored.convert
    info = stored.manifest.get("convert") or {}
    if runs.empty:
        return []
    table = convert_table(runs)
    store.write_frame_atomic(out / "convert.csv", table)
    shown = pd.DataFrame(
        {
            "run": table["variant"],
            "finished": table["finished"],
            "val loss before swap": table["loss_before_swap"].map(_fmt),
            "right after swap": [
                _pm(m, s)
                for m, s in zip(
                    table["loss_after_swap_mean"], table["loss_after_swap_std"], strict=True
                )
            ],
            "jump": table["jump_mean"].map(_fmt),
            "after continued training": [
                _pm(m, s)
                for m, s in zip(
                    table["final_val_loss_mean"], table["final_val_loss_std"], strict=True
                )
            ],
            "Δ vs continued [95% CI], p": [
                "–"
                if r.variant == CONTROL
                else f"{_signed(r.diff_vs_continued)} [{_signed(r.diff_ci_low)}, "
                f"{_signed(r.diff_ci_high)}], p {_p(r.paired_t_p)} ({r.n_pairs})"
                for r in table.itertuples()
            ],
        }
    )
    converted = runs[runs["variant"] == CONVERTED]
    mapping = converted.iloc[0] if len(converted) else None
    folded = ", ".join(mapping["params_folded"]) if mapping is not None else ""
    dropped = ", ".join(mapping["params_dropped"]) if mapping is not None else ""
    lines = [
        "## Checkpoint conversion",
        "",
        f"The finished `{info.get('source')}` runs' final weights, loaded twice per seed: "
        f"unchanged (`{CONTROL}`) and with the converted norms (`{CONVERTED}`, bias mapping "
        f"`{info.get('bias')}`), then trained further on the same batches. Jump = loss right "
        "after the swap − loss before it; Δ = converted − continued after the continued "
        "training, paired by seed.",
        "",
        shown.to_markdown(index=False),
        "",
        f"Biases folded into the next linear layer (exact): {folded or 'none'}. "
        f"Dropped: {dropped or 'none'}. Gains and every other parameter were copied.",
        "",
    ]
    starts = runs[runs["status"] == "finished"]
    figure = convert_figure(
        stored.convert_metrics, starts, [CONTROL, CONVERTED], out / "convert.png"
    )
    _figure(lines, figure, "After the swap", "The point at 0 tokens is the loss right after it.")
    return lines


FIGURES = (
    "loss_curves.png",
    "loss_difference.png",
    "loss_time.png",
    "throughput.png",
    "probes.png",
    "logits.png",
    "lr_sweep.png",
    "stability_map.png",
    "interactions.png",
    "convert.png",
)

HTML_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; } code { background: #f3f3f3; padding: 0 0.2em; }
"""


def markdown_to_html(text: str, folder: Path, title: str) -> str:
    """A self-contained HTML page of a report.md: tables rendered, images embedded as data."""
    body = markdown.markdown(text, extensions=["tables"])

    def embed(match: re.Match[str]) -> str:
        path = folder / html.unescape(match.group(1))
        if not path.is_file():
            return match.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'src="data:image/png;base64,{data}"'

    body = re.sub(r'src="([^"]+\.png)"', embed, body)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{HTML_STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def build_report(exp_dir: Path, report_dir: Path) -> Report:
    """Rebuild every table and figure of an experiment from its stored results."""
    stored = load_experiment_results(exp_dir)
    manifest = stored.manifest
    variants = manifest["variants"] or sorted(stored.main["variant"].unique())
    report_dir.mkdir(parents=True, exist_ok=True)
    (report_dir / store.REPORT_BUILT).unlink(
        missing_ok=True
    )  # not current until this build completes
    started = time.time()
    for name in FIGURES:  # a figure whose data are gone must not survive from an older build
        (report_dir / name).unlink(missing_ok=True)
    table = variant_table(stored.main, variants, variants[0])
    tuned = variant_table(stored.tuned, variants, variants[0]) if len(stored.tuned) else None
    table, tuned = with_holm(table, tuned)
    noise = noise_floor(stored.main)
    sweep_lines, sensitivity = sweep_section(stored, variants, report_dir)
    table = attach_studies(table, sensitivity, stored.studies or {})
    store.write_frame_atomic(report_dir / "variants.csv", table)
    store.write_frame_atomic(report_dir / "runs.csv", stored.runs)
    body = main_sections(stored, table, noise, report_dir)
    lines = [
        f"# {manifest['name']}",
        "",
        manifest.get("description") or "",
        "",
        f"Variants: {', '.join(variants)} (baseline: {variants[0]}); seeds: {manifest['seeds']}.",
        "",
    ]
    design = Design.from_manifest(manifest)
    factor_lines, effects = (
        factors_part(stored.main, design, report_dir) if design is not None else ([], None)
    )
    lines += summary_lines(table, noise, stored, tuned, effects)
    if stored.missing:
        lines += [
            f"**Incomplete:** {len(stored.missing)} planned run(s) have no result yet: "
            f"{'; '.join(stored.missing)}.",
            "",
        ]
    lines += factor_lines
    if tuned is not None:
        lines += comparison_section(stored, table, tuned, report_dir)
    lines += body
    lines += convert_section(stored, report_dir)
    lines += sweep_lines
    lines += max_lr_section(stored.studies or {}, report_dir)
    lines += search_section(stored.studies or {}, variants, report_dir)
    criterion = (stored.studies or {}).get("criterion") or manifest.get("criterion")
    if criterion:
        lines += ["## Stability criterion", "", f"A run is {criterion}.", ""]
    text = "\n".join(lines)
    store.write_text_atomic(report_dir / "variants.md", quality_markdown(table) + "\n")
    store.write_text_atomic(report_dir / "report.md", text)
    page = markdown_to_html(text, report_dir, str(manifest["name"]))
    store.write_text_atomic(report_dir / "report.html", page)
    written = sorted(
        p.name for p in report_dir.iterdir() if p.is_file() and p.stat().st_mtime >= started - 1
    )
    store.write_json_atomic(
        report_dir / store.REPORT_BUILT,
        {"files": [n for n in written if n != store.REPORT_BUILT]},
    )
    figures = [report_dir / name for name in FIGURES if (report_dir / name).exists()]
    return Report(
        report_dir,
        report_dir / "report.md",
        report_dir / "report.html",
        table,
        figures,
        stored.missing,
    )
