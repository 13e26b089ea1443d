"""The report's main sections: final quality, speed and numerical health, probes, figures;
and, for a grid, the factors' tables and interaction figure.

These use the main runs (the shared-LR A/B); each returns a
:class:`~ablate.report.section.Section`.
"""

from __future__ import annotations

import math

import pandas as pd

from ablate.core.manifest import Manifest
from ablate.report.analysis import curve_difference, last_probes
from ablate.report.factorial import Design, factor_section
from ablate.report.figures import (
    difference_figure,
    logit_figure,
    loss_figure,
    loss_time_figure,
    probe_figure,
    throughput_figure,
)
from ablate.report.load import StoredExperiment, unigram_floor
from ablate.report.section import Section
from ablate.report.study_figures import interaction_figure
from ablate.report.text import (
    budget_text,
    probes_markdown,
    quality_markdown,
    speed_markdown,
    unstable_runs,
)


def main_label(manifest: Manifest) -> str:
    """What the main runs are: the shared LR and warmup when every one has the same, else the
    file's settings per variant (a grid over warmup, say)."""
    settings = {(r.lr, r.warmup_steps) for r in manifest.runs if r.group == "main"}
    if len(settings) == 1:
        lr, warmup = settings.pop()
        return f"shared LR (every variant at lr {lr:g}, warmup {warmup})"
    return "each variant at the LR and warmup its file gives it"


def final_eval_note(configs: dict[str, dict]) -> str:
    """What the final and best val losses are measured on, where the runs measure the final on
    the whole split (``train.final_eval: split``); else nothing."""
    split = any(
        c.get("config", {}).get("train", {}).get("final_eval") == "split" for c in configs.values()
    )
    if not split:
        return ""
    return (
        " The final val loss is measured after training on the whole validation split "
        "(`train.final_eval: split`); the best val loss is the lowest of the evaluations during "
        "training, on the fixed windows, so it can lie above the final."
    )


def leading_figures(stored: StoredExperiment, variants: list[str]) -> Section:
    """The tuned runs' loss curves and differences, first, when the report leads with them:
    each variant at its own (LR, warmup); none without tuned runs."""
    section = Section()
    if stored.tuned_metrics.empty:
        return section
    label = "tuned runs, each variant at its own (LR, warmup): the leading comparison"
    section.lines += [f"Of the {label}; {budget_text(stored.tuned)}.", ""]
    section.figure(
        "loss_curves_tuned.png",
        loss_figure(stored.tuned_metrics, variants, unigram_floor(stored.main), label),
        "Loss against step, tuned runs",
        "Mean ± std over seeds; train loss smoothed.",
    )
    difference = curve_difference(stored.tuned_metrics, variants, variants[0])
    section.figure(
        "loss_difference_tuned.png",
        difference_figure(difference, variants),
        "Difference from the baseline against step, tuned runs",
        f"Val loss of each variant at its own settings minus {variants[0]}'s at its own, on the "
        "same seed, mean and 95% interval over seeds; below zero the variant is ahead.",
    )
    return section


def main_section(stored: StoredExperiment, table: pd.DataFrame, noise: float) -> Section:
    """Quality, speed and probe tables and their figures (main runs only)."""
    variants = list(table["variant"])
    kinds = sorted(
        set(stored.main.get("memory_kind", pd.Series(dtype=str)).dropna()) - {"unavailable"}
    )
    label = main_label(stored.manifest)
    lines = [
        f"## Final quality: {label}",
        "",
        quality_markdown(table),
        "",
        "Loss statistics use finished runs, collapsed ones included (their final loss is what "
        "they learned); diverged runs are counted, not averaged. Δ is "
        "variant − baseline over matched seeds (same initial weights for shared parameters, same "
        "batches); the interval and p-value come from a paired t-test (`scipy.stats.ttest_rel`). "
        "With fewer than 2 pairs no interval is given."
        + final_eval_note(stored.configs)
        + (
            f" Noise floor (pooled seed-to-seed std): {noise:.4f}." if not math.isnan(noise) else ""
        ),
        "",
        "## Speed and numerical health",
        "",
        speed_markdown(table, ", ".join(kinds) or "not measured"),
        "",
        f"Runs: {label}. Tokens/s is over the training steps (evaluations excluded); "
        "the step time is each run's median, averaged over seeds. Peak memory is the CUDA "
        "allocator's peak on a GPU, the process's peak resident set on a CPU (interpreter and "
        "libraries included). Non-finite values are counted in activations and gradients at "
        "the probe steps.",
        "",
    ]
    broken = unstable_runs(stored.main, variants)
    if len(broken):
        lines += [
            "## Unstable runs",
            "",
            broken.to_markdown(index=False),
            "",
            "Every main run that diverged (the loss left the criterion's threshold or became "
            "non-finite: the step it was stopped at) or collapsed (finished without learning "
            "beyond the unigram floor: the last step), with the non-finite values the probes "
            "counted in it.",
            "",
        ]
    section = Section(lines)
    difference = curve_difference(stored.metrics, variants, variants[0])
    if len(difference):
        section.tables["loss_difference.csv"] = difference
    per_run = last_probes(stored.probes)
    if len(per_run):
        section.tables["probes_last.csv"] = per_run
        section.lines += [
            "## Inside the model",
            "",
            "At each run's last probe step, mean over seeds:",
            "",
            probes_markdown(per_run, variants),
            "",
        ]
    section.lines += ["## Figures", ""]
    section.extend(leading_figures(stored, variants))
    section.lines += [f"Of the main runs: {label}; {budget_text(stored.main)}.", ""]
    section.figure(
        "loss_curves.png",
        loss_figure(stored.metrics, variants, unigram_floor(stored.main), f"main runs: {label}"),
        "Loss against step",
        "Mean ± std over seeds; train loss smoothed.",
    )
    section.figure(
        "loss_difference.png",
        difference_figure(difference, variants),
        "Difference from the baseline against step",
        f"Val loss of each variant minus {variants[0]}'s on the same seed (same initial weights "
        "and batches), mean and 95% interval over seeds; below zero the variant is ahead.",
    )
    section.figure(
        "loss_time.png",
        loss_time_figure(stored.metrics, variants),
        "Loss against wall-clock time",
        "Evaluations placed at the mean elapsed time of the seeds.",
    )
    section.figure(
        "throughput.png",
        throughput_figure(stored.main, variants),
        "Throughput, step time and memory",
        "Bars: mean over seeds; dots: seeds.",
    )
    section.figure(
        "probes.png",
        probe_figure(stored.probes, variants),
        "Activation RMS and gradient norm per layer",
        "Residual-stream RMS after each block and each block's gradient norm before clipping, "
        "at the probe steps, mean over seeds.",
    )
    section.figure(
        "logits.png",
        logit_figure(stored.probes, variants),
        "Attention and output logits",
        "Largest pre-softmax attention logit over layers, largest |output logit| and the mean "
        "log-sum-exp of the output logits, mean ± std over seeds.",
    )
    return section


def factors_section(runs: pd.DataFrame, design: Design) -> tuple[Section, pd.DataFrame]:
    """The factor tables (:mod:`ablate.report.factorial`), factors.csv and the interaction figure;
    the section and the main-effect table."""
    lines, effects, pairs = factor_section(runs, design)
    section = Section(lines, {"factors.csv": effects})
    section.figure(
        "interactions.png",
        interaction_figure(pairs),
        "Interactions",
        "Mean final val loss per level; one line per level of the second factor, ± std. "
        "Parallel lines: the factors' effects add up.",
    )
    return section, effects
