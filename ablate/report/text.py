"""How the report prints numbers and its per-variant tables as Markdown.

A missing value prints as ``–``; differences carry their sign (``+0.0013``); small probe values
keep significant figures (``9.9e-05``); p-values below 0.001 go to scientific notation.
"""

from __future__ import annotations

import math
from enum import StrEnum

import pandas as pd

from ablate.core.stability import not_learned_yet
from ablate.report.verdict import NOT_ESTIMABLE, wide


def missing(value: object) -> bool:
    """None or NaN: shown as –."""
    return value is None or (isinstance(value, float) and math.isnan(value))


def fmt(value: object, digits: int = 4) -> str:
    if missing(value):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def signed(value: object, digits: int = 4) -> str:
    """A difference with its sign, e.g. ``+0.0013`` or ``-0.0066``."""
    return "–" if missing(value) else f"{float(value):+.{digits}f}"  # type: ignore[arg-type]


def three(x: float) -> str:
    """A number to three significant digits, trailing zeros kept (0.500, 1.00, 709)."""
    return f"{x:#.3g}".rstrip(".")


def interval_text(value: float | None, low: float | None, high: float | None) -> str:
    """``value [low, high]`` to three significant digits (0.500, 1.00, 709), or a dash."""
    if value is None or pd.isna(value):
        return "–"
    return f"{three(value)} [{three(low)}, {three(high)}]"  # type: ignore[arg-type]


class Shown(StrEnum):
    """What the report prints for a positive quantity with an interval (an LR, a ratio of
    them): nothing but a dash without a value; no number where there is no interval, where
    every seed of a ratio fell in one bracket, or where the interval is too wide; else the
    number and its interval."""

    MISSING = "missing"
    NO_INTERVAL = "no interval"
    ONE_BRACKET = "one bracket"
    TOO_WIDE = "too wide"
    NUMBER = "number"


def lr_shown(
    value: float | None, low: float | None, high: float | None, limit: float = NOT_ESTIMABLE
) -> Shown:
    """Which of :class:`Shown` a positive quantity gets: too wide where its interval spans
    more than ``limit``× (:func:`ablate.report.verdict.wide`)."""
    if value is None or pd.isna(value):
        return Shown.MISSING
    if low is None or high is None or pd.isna(low) or pd.isna(high):
        return Shown.NO_INTERVAL
    return Shown.TOO_WIDE if wide(low, high, limit) else Shown.NUMBER


def lr_interval_text(
    value: float | None,
    low: float | None,
    high: float | None,
    seeds: int,
    limit: float = NOT_ESTIMABLE,
) -> str:
    """:func:`interval_text` of a positive quantity (an LR, a ratio of them), or ``not
    estimable with n seed(s)`` where it has no number to print (:func:`lr_shown`); a dash
    without a value."""
    shown = lr_shown(value, low, high, limit)
    if shown is Shown.MISSING:
        return "–"
    if shown is Shown.NO_INTERVAL:
        return f"not estimable with {int(seeds)} seed(s)"
    if shown is Shown.TOO_WIDE:
        return f"not estimable with {int(seeds)} seed(s): wider than {limit:g}×"
    return interval_text(value, low, high)


def sig(value: object, figures: int = 3) -> str:
    """By significant figures, so that small values keep their digits (``9.9e-05``)."""
    return "–" if missing(value) else f"{float(value):.{figures}g}"  # type: ignore[arg-type]


def ratio_text(value: float, low: float | None = None, high: float | None = None) -> str:
    """A ratio (and its interval) to two decimals, below 0.1 to three significant figures, so
    that a ratio of a hundredth keeps its digits (``0.0123 [0.00410, 0.0371]``)."""

    def one(v: float) -> str:
        return f"{v:.2f}" if abs(v) >= 0.1 else sig(v)

    return one(value) if low is None or high is None else f"{one(value)} [{one(low)}, {one(high)}]"


def p_text(value: object) -> str:
    """A p-value: three decimals, or two significant figures below 0.001."""
    if missing(value):
        return "–"
    p = float(value)  # type: ignore[arg-type]
    return f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"


def delta_ci(delta: object, low: object, high: object) -> str:
    """``+0.0013 [-0.0036, +0.0061]``."""
    return f"{signed(delta)} [{signed(low)}, {signed(high)}]"


def pm(mean: object, std: object, digits: int = 4) -> str:
    return f"{fmt(mean, digits)} ± {fmt(std, digits)}"


def quality_markdown(table: pd.DataFrame) -> str:
    """Loss per variant: mean ± std over seeds and the paired difference to the baseline."""
    rows = list(table.itertuples())
    base_params = rows[0].n_params if rows else None
    split = str(table["scored_on"].iloc[0]) if "scored_on" in table and rows else "val"
    test = (
        {
            "final test loss, mean ± std": [
                pm(r.final_test_loss_mean, r.final_test_loss_std) for r in rows
            ]
        }
        if split == "test"
        else {}
    )
    shown = pd.DataFrame(
        {
            "variant": table["variant"],
            "runs (finished / diverged / collapsed)": [
                f"{r.runs} ({r.finished} / {r.diverged} / {r.collapsed})" for r in rows
            ],
            "final val loss, mean ± std": [
                pm(r.final_val_loss_mean, r.final_val_loss_std) for r in rows
            ],
            "best val loss, mean ± std": [
                pm(r.best_val_loss_mean, r.best_val_loss_std) for r in rows
            ],
            **test,
            f"Δ final{' test' if split == 'test' else ''} vs baseline [95% CI]": [
                "baseline"
                if i == 0
                else delta_ci(r.diff_vs_baseline, r.diff_ci_low, r.diff_ci_high)
                for i, r in enumerate(rows)
            ],
            "paired t-test p (pairs)": [
                "–" if i == 0 else f"{p_text(r.paired_t_p)} ({r.n_pairs})"
                for i, r in enumerate(rows)
            ],
            **(
                {
                    "p, Holm-adjusted": [
                        "–" if i == 0 else p_text(r.p_holm) for i, r in enumerate(rows)
                    ]
                }
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
                pm(r.tokens_per_s_mean, r.tokens_per_s_std, 0) for r in table.itertuples()
            ],
            "median step time (ms)": table["step_time_ms_mean"].map(lambda v: fmt(v, 1)),
            f"peak memory (MiB, {memory_kind})": table["peak_memory_mb_mean"].map(
                lambda v: fmt(v, 0)
            ),
            "non-finite values (probes)": table["nonfinite_values"],
        }
    )
    return shown.to_markdown(index=False)


def unstable_runs(main: pd.DataFrame, variants: list[str]) -> pd.DataFrame:
    """The main runs that diverged or collapsed, in variant order: when and how each broke."""
    if main.empty or "stable" not in main:
        return pd.DataFrame()
    broken = main[(main["status"] == "diverged") | (main["stable"] == False)]  # noqa: E712
    if broken.empty:
        return broken
    order = {v: i for i, v in enumerate(variants)}
    broken = broken.assign(_order=broken["variant"].map(order)).sort_values(["_order", "seed"])
    step = broken["diverged_step"].fillna(broken["unstable_step"])
    reason = broken["diverged_reason"].fillna(broken["unstable_reason"])
    return pd.DataFrame(
        {
            "variant": broken["variant"],
            "seed": broken["seed"],
            "status": [
                "diverged"
                if status == "diverged"
                else "not learned yet"
                if not_learned_yet(why)
                else "collapsed"
                for status, why in zip(broken["status"], reason, strict=True)
            ],
            "step": step.map(lambda v: fmt(v, 0)),
            "how": reason,
            "non-finite activations / grads (probes)": [
                f"{int(a)} / {int(g)}"
                for a, g in zip(
                    broken["nonfinite_activations"].fillna(0),
                    broken["nonfinite_grads"].fillna(0),
                    strict=True,
                )
            ],
        }
    )


def probes_markdown(per_run: pd.DataFrame, variants: list[str]) -> str:
    """Mean over seeds of :func:`last_probes` per variant."""
    means = per_run.groupby("variant").mean(numeric_only=True).reindex(variants)
    shown = pd.DataFrame(
        {
            "variant": means.index,
            "step": means["step"].map(lambda v: fmt(v, 0)),
            "residual RMS, last block": means["resid_rms_last_block"].map(sig),
            "largest block grad norm": means["grad_norm_max_block"].map(sig),
            "largest attention logit": means["attn_logit_max"].map(sig),
            "largest abs output logit": means["logit_max_abs"].map(sig),
        }
    )
    return shown.to_markdown(index=False)


def budget_text(runs: pd.DataFrame) -> str:
    """The runs' budget: tokens per run and its steps (each distinct budget once)."""
    if runs.empty or "planned_tokens" not in runs or "steps" not in runs:
        return "budget not recorded"
    steps = runs.groupby("planned_tokens")["steps"].max()
    return "; ".join(f"{int(s)} steps, {int(n):,} tokens per run" for n, s in steps.items())
