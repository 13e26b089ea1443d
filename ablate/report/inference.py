"""The report's Inference section, from the table ``ablate bench --inference --results-dir``
stored beside the runs (``inference.csv``): prefill and TPOT per variant against the baseline's,
with the norm's share of decode time, so a reader sees whether the norm matters end to end."""

from __future__ import annotations

import pandas as pd

from ablate.core.folders import INFERENCE_TABLE
from ablate.report.section import Section

SHOWN = {
    "variant": "variant",
    "mode": "mode",
    "batch": "batch",
    "prompt": "prompt",
    "prefill_tokens_per_s": "prefill tokens/s",
    "tpot_ms": "TPOT (ms)",
    "norm_share": "norm share of decode",
    "peak_memory_mb": "peak memory (MiB)",
}


def inference_summary(table: pd.DataFrame, baseline: str) -> list[str]:
    """Per mode, each variant's TPOT and prefill over the baseline's (batch 1 and the largest
    batch, shortest prompt) beside the norms' share of decode time."""
    lines = []
    for mode, mine in table.groupby("mode", sort=False):
        prompt = mine["prompt"].min()
        for batch in sorted({mine["batch"].min(), mine["batch"].max()}):
            cell = mine[(mine["batch"] == batch) & (mine["prompt"] == prompt)].set_index("variant")
            if baseline not in cell.index:
                continue
            base = cell.loc[baseline]
            for variant, row in cell.drop(index=baseline).iterrows():
                lines.append(
                    f"{mode}, batch {batch}, prompt {prompt}: {variant}/{baseline} TPOT "
                    f"{row.tpot_ms / base.tpot_ms:.3f} ({row.tpot_ms:.3g} vs {base.tpot_ms:.3g} "
                    f"ms, {verdict(row, base)}), prefill "
                    f"{row.prefill_tokens_per_s / base.prefill_tokens_per_s:.3f}; "
                    f"norm share of decode {row.norm_share:.1%} vs {base.norm_share:.1%}"
                )
    return lines


def verdict(row: pd.Series, base: pd.Series) -> str:
    """Whether a variant's TPOT differs from the baseline's beyond the rounds' spread: every
    round slower than every baseline round, every round faster, or the ranges overlap."""
    if row.tpot_ms_min > base.tpot_ms_max:
        return "slower in every round"
    if row.tpot_ms_max < base.tpot_ms_min:
        return "faster in every round"
    return "within the rounds' spread"


def shared_time(table: pd.DataFrame) -> str:
    """What the norm share divides: kernel time on a GPU (the bench profiles CUDA there), CPU
    time on a CPU; the peak-memory column tells which device measured the table."""
    kinds = table["memory_kind"] if "memory_kind" in table else pd.Series(dtype=str)
    on_gpu = kinds.eq("cuda_max_allocated").any()
    return "GPU kernel time" if on_gpu else "CPU time"


def inference_section(table: pd.DataFrame, variants: list[str], source: str = "FILE") -> Section:
    """The section; without a stored inference table, the command that adds it (``ablate
    run`` does not measure inference)."""
    if table.empty:
        return Section(
            [
                "## Inference",
                "",
                "Not measured by `ablate run`. `ablate bench --inference --experiment "
                f"{source} --results-dir <results root>` times prefill, decode (TPOT) and the "
                "norms' share of decode on the trained weights and adds the table here "
                "(docs/benchmarks.md, Inference).",
                "",
            ]
        )
    shown = table[list(SHOWN)].rename(columns=SHOWN)
    shown["norm share of decode"] = shown["norm share of decode"].map(lambda v: f"{v:.1%}")
    lines = [
        "## Inference",
        "",
        f"Measured by `ablate bench --inference` ({int(table['new_tokens'].iloc[0])} decoded "
        f"tokens, median of {int(table['rounds'].iloc[0])} alternating rounds; fp32, bf16 and "
        "int8 = linear layers dynamically quantized). TPOT: decode time per output token "
        "with the KV cache; the norm share: the norms' part of one prefill-and-decode pass's "
        f"{shared_time(table)} in `torch.profiler`. A norm cannot change TPOT by more than its "
        "share.",
        "",
        *(f"- {line}" for line in inference_summary(table, variants[0])),
        "",
        shown.to_markdown(index=False, floatfmt=".4g"),
        "",
    ]
    return Section(lines, {INFERENCE_TABLE: table})
