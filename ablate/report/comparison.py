"""The comparison answered twice: every variant at the shared LR, and each at its tuned settings.

With a search or a curve, the tuned A/B leads the report: Δ at the shared LR beside Δ with each
variant at its own best (LR, warmup), the usable LR and the headroom it leaves above the tuned
LR, and the max stable LR (where a run still learned at all).
"""

from __future__ import annotations

import pandas as pd

from ablate.core.boundary import variant_boundary
from ablate.report.load import StoredExperiment
from ablate.report.section import Section
from ablate.report.text import p_text, pm, sig, signed
from ablate.report.usable import usable_table


def _diff_text(row: pd.Series | None) -> str:
    if row is None or pd.isna(row["diff_vs_baseline"]):
        return "–"
    holm_text = f", Holm {p_text(row['p_holm'])}" if "p_holm" in row else ""
    return (
        f"{signed(row['diff_vs_baseline'])} [{signed(row['diff_ci_low'])}, "
        f"{signed(row['diff_ci_high'])}], p {p_text(row['paired_t_p'])}{holm_text}"
    )


def comparison_table(
    stored: StoredExperiment, table: pd.DataFrame, tuned: pd.DataFrame
) -> pd.DataFrame:
    """Per variant: Δ at the shared LR and Δ at its tuned settings, the settings, the max
    stable LR (learned at all), the usable LR and the headroom (usable LR / tuned LR)."""
    studies = stored.studies
    found_usable = usable_table(stored)
    usable = (
        dict(zip(found_usable["variant"], found_usable["usable_lr"], strict=True))
        if len(found_usable)
        else {}
    )
    rows = []
    for i, variant in enumerate(table["variant"]):
        shared = stored.main[stored.main["variant"] == variant]
        mine = stored.tuned[stored.tuned["variant"] == variant]
        search = studies.search.get(variant)
        best = search.best if search else None
        found = studies.max_lr.get(variant)
        boundary = variant_boundary(found.seed_bounds) if found else None
        max_lr = boundary.value if boundary else None
        tuned_lr = float(mine["lr"].iloc[0]) if len(mine) else best and best.lr
        warmup = int(mine["warmup_steps"].iloc[0]) if len(mine) else best and best.warmup_steps
        rows.append(
            {
                "variant": variant,
                "shared_lr": float(shared["lr"].iloc[0]) if len(shared) else None,
                "shared_warmup": int(shared["warmup_steps"].iloc[0]) if len(shared) else None,
                "delta_shared": _diff_text(table.iloc[i] if i else None),
                "tuned_lr": tuned_lr,
                "tuned_warmup": warmup,
                "search_best_val_loss": best and best.value,
                "tuned_final_val_loss": tuned.iloc[i]["final_val_loss_mean"],
                "delta_tuned": _diff_text(tuned.iloc[i] if i else None),
                "max_stable_lr": max_lr,
                "usable_lr": usable.get(variant),
                "headroom": usable[variant] / tuned_lr
                if usable.get(variant) and tuned_lr
                else None,
            }
        )
    return pd.DataFrame(rows)


def comparison_section(
    stored: StoredExperiment, table: pd.DataFrame, tuned: pd.DataFrame
) -> Section:
    """Markdown and CSVs of the question answered twice: shared LR and tuned settings."""
    frame = comparison_table(stored, table, tuned)
    split = str(tuned["scored_on"].iloc[0]) if "scored_on" in tuned else "val"
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
            f"final {split} loss, tuned": [
                pm(m, s)
                for m, s in zip(
                    tuned[f"final_{split}_loss_mean"], tuned[f"final_{split}_loss_std"], strict=True
                )
            ],
            "Δ at tuned settings [95% CI], p": frame["delta_tuned"],
            "usable LR": frame["usable_lr"].map(lambda v: sig(v) if v else "–"),
            "headroom (usable / tuned LR)": frame["headroom"].map(
                lambda v: f"{v:.2f}×" if v else "–"
            ),
            "max stable LR (learned at all)": frame["max_stable_lr"].map(
                lambda v: sig(v) if v else "–"
            ),
        }
    )
    lines = [
        "## Shared LR and tuned settings",
        "",
        "The same question answered twice: every variant at the file's shared LR and warmup, "
        "and every variant at its own best (LR, warmup) (from the search, or its LR curve's "
        "optimum with its warmup study's best or the warmup the file declares), trained at "
        "the full budget on the same seeds (matched initial weights and batches). Δ = variant − "
        "baseline over matched seeds. Headroom: how far above its tuned LR a variant's final "
        "loss stays within `max_lr.within` of its loss there (the usable LR, the geometric "
        "mean of its seeds' walks, each up the 2^(1/4) lattice at the tuned warmup from the "
        "point nearest the tuned LR); the max stable LR is where a run still "
        "learned at all (the geometric mean of its seeds' edges at the `max_lr` budget, which "
        "may be shorter than the tuned runs').",
        "",
        shown.to_markdown(index=False),
        "",
    ]
    return Section(lines, {"comparison.csv": frame, "variants_tuned.csv": tuned})
