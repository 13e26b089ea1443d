"""The report's Inference section: the stored bench table, each variant against the baseline."""

from __future__ import annotations

import pandas as pd

from ablate.report.inference import inference_section, inference_summary, shared_time


def _table(memory_kind: str = "process_peak_rss") -> pd.DataFrame:
    rows = []
    for variant, tpot, share in (("layernorm", 2.0, 0.10), ("rmsnorm", 1.5, 0.08)):
        for batch in (1, 8):
            rows.append(
                {
                    "variant": variant,
                    "mode": "fp32",
                    "batch": batch,
                    "prompt": 16,
                    "new_tokens": 16,
                    "prefill_tokens_per_s": 1000.0 * batch / tpot,
                    "tpot_ms": tpot * batch,
                    "tpot_ms_min": tpot * batch * (0.7 if batch == 1 else 0.99),
                    "tpot_ms_max": tpot * batch * (1.3 if batch == 1 else 1.01),
                    "norm_share": share,
                    "peak_memory_mb": 300.0,
                    "memory_kind": memory_kind,
                    "rounds": 3,
                }
            )
    return pd.DataFrame(rows)


def test_summary_gives_each_ratio_to_the_baseline_with_the_norm_share() -> None:
    lines = inference_summary(_table(), "layernorm")
    assert lines == [
        "fp32, batch 1, prompt 16: rmsnorm/layernorm TPOT 0.750 (1.5 vs 2 ms, within the rounds' "
        "spread), prefill 1.333; norm share of decode 8.0% vs 10.0%",
        "fp32, batch 8, prompt 16: rmsnorm/layernorm TPOT 0.750 (12 vs 16 ms, faster in every "
        "round), prefill 1.333; norm share of decode 8.0% vs 10.0%",
    ]


def test_section_only_when_a_table_was_stored() -> None:
    section = inference_section(_table(), ["layernorm", "rmsnorm"])
    assert list(section.tables) == ["inference.csv"]
    pd.testing.assert_frame_equal(section.tables["inference.csv"], _table())
    assert [f"- {line}" for line in inference_summary(_table(), "layernorm")] == section.lines[4:6]
    markdown = section.lines[-2].splitlines()
    rows = [[cell.strip() for cell in line.split("|")[1:-1]] for line in markdown[2:]]
    assert [row[6] for row in rows] == ["10.0%", "10.0%", "8.0%", "8.0%"]  # the norm shares
    empty = inference_section(pd.DataFrame(), ["layernorm"], "x.yaml")
    absent = "\n".join(empty.lines)
    assert empty.tables == {} and "|" not in absent  # no table
    assert "--experiment x.yaml" in absent  # the command that adds it is the point here


def test_the_share_is_of_kernel_time_when_a_gpu_measured_the_table() -> None:
    assert shared_time(_table()) == "CPU time"
    assert shared_time(_table("cuda_max_allocated")) == "GPU kernel time"
    text = "\n".join(inference_section(_table("cuda_max_allocated"), ["layernorm"]).lines)
    assert shared_time(_table("cuda_max_allocated")) in text
    assert shared_time(_table()) not in text
