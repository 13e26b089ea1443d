"""The checkpoint-conversion section: the loss jump at the swap, recovery, Δ vs continuing.

The ``convert:`` runs load a finished source run's weights twice per seed, unchanged
(``continued``) and with converted norms (``converted``); both train on the same batches.
"""

from __future__ import annotations

import pandas as pd

from ablate.core.plan import CONTROL, CONVERTED
from ablate.report.analysis import DIFF_COLUMNS, column, difference_columns, paired_difference
from ablate.report.load import StoredExperiment
from ablate.report.section import Section
from ablate.report.study_figures import convert_figure
from ablate.report.text import fmt, p_text, pm, signed


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


def convert_section(stored: StoredExperiment) -> Section:
    """The checkpoint-conversion section: jump, recovery, mapping, figure (none without runs)."""
    runs = stored.convert
    info = stored.manifest.convert or {}
    if runs.empty:
        return Section()
    table = convert_table(runs)
    shown = pd.DataFrame(
        {
            "run": table["variant"],
            "finished": table["finished"],
            "val loss before swap": table["loss_before_swap"].map(fmt),
            "right after swap": [
                pm(m, s)
                for m, s in zip(
                    table["loss_after_swap_mean"], table["loss_after_swap_std"], strict=True
                )
            ],
            "jump": table["jump_mean"].map(fmt),
            "after continued training": [
                pm(m, s)
                for m, s in zip(
                    table["final_val_loss_mean"], table["final_val_loss_std"], strict=True
                )
            ],
            "Δ vs continued [95% CI], p": [
                "–"
                if r.variant == CONTROL
                else f"{signed(r.diff_vs_continued)} [{signed(r.diff_ci_low)}, "
                f"{signed(r.diff_ci_high)}], p {p_text(r.paired_t_p)} ({r.n_pairs})"
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
    section = Section(lines, {"convert.csv": table})
    figure = convert_figure(stored.convert_metrics, starts, [CONTROL, CONVERTED])
    section.figure(
        "convert.png", figure, "After the swap", "The point at 0 tokens is the loss right after it."
    )
    return section
