"""The boundaries beyond the probed one, descriptive: in a grid each factor's main effect on
the max stable LR with its interval over seeds; the quality boundary at every margin, no
number where the interval is wider than 100×."""

from __future__ import annotations

import pytest
from conftest import max_lr_result

from ablate.core.studies import MarginBoundary, Studies
from ablate.report.factorial import Design
from ablate.report.margins import factor_effects, factor_lines
from ablate.report.text import Shown, lr_shown, ratio_text, three


def test_in_a_grid_each_factors_effect_on_the_boundary_is_a_paired_main_effect() -> None:
    cells = {
        "ln.b": {"kind": "layernorm", "bias": "true"},
        "ln.nb": {"kind": "layernorm", "bias": "false"},
        "rms.b": {"kind": "rmsnorm", "bias": "true"},
        "rms.nb": {"kind": "rmsnorm", "bias": "false"},
    }
    design = Design(
        ["kind", "bias"], {"kind": ["layernorm", "rmsnorm"], "bias": ["true", "false"]}, cells
    )
    seeds = {0: 0.1, 1: 0.13, 2: 0.085}  # each seed its own edge, shared by every cell
    jitter = {0: 1.0, 1: 1.06, 2: 0.95}  # and a little that is the cell's own
    studies = Studies(
        max_lr={
            name: max_lr_result(
                name,
                {
                    s: e
                    * (2.0 if cell["kind"] == "rmsnorm" else 1.0)
                    * (jitter[s] if name.endswith("nb") else 1.0)
                    for s, e in seeds.items()
                },
            )
            for name, cell in cells.items()
        }
    )
    table = factor_effects(studies, design).set_index(["boundary", "factor"])
    kind = table.loc[("quality", "kind")]
    assert kind["ratio"] == pytest.approx(2.0, rel=0.1) and kind["shown"]  # RMS: twice the LR
    bias = table.loc[("quality", "bias")]
    assert bias["low"] < 1 < bias["high"] and not bias["shown"]  # bias: no move shown
    kind_line, bias_line = factor_lines(factor_effects(studies, design))[:2]
    # each line is descriptive: the ratio and its interval, whether or not it holds 1
    assert f"×{ratio_text(kind['ratio'], kind['low'], kind['high'])} (95%" in kind_line
    assert f"×{ratio_text(bias['ratio'], bias['low'], bias['high'])} (95%" in bias_line


def _margins(edges_by_margin: dict[float, dict[int, float]]) -> list[MarginBoundary]:
    from ablate.core.boundary import bracket_seed, variant_boundary

    found = []
    for margin, edges in edges_by_margin.items():
        bounds = [
            bracket_seed(lambda lr, e=e: lr <= e, s, 1e-3, (1e-6, 100.0)) for s, e in edges.items()
        ]
        found.append(MarginBoundary(margin, bounds, variant_boundary(bounds)))
    return found


def test_a_margin_whose_interval_spans_a_hundredfold_prints_no_number() -> None:
    from ablate.report.margins import margin_lines, margin_table

    seeds = {0: 0.1, 1: 0.12, 2: 0.09}
    ln = max_lr_result("ln", seeds, margins=_margins({0.1: seeds, 0.3: seeds}))
    rms = max_lr_result(
        "rms",
        {s: 3 * e for s, e in seeds.items()},
        margins=_margins(
            {0.1: {s: 3 * e for s, e in seeds.items()}, 0.3: {0: 0.005, 1: 5.0, 2: 0.09}}
        ),
    )
    table = margin_table(Studies(max_lr={"ln": ln, "rms": rms}))
    (line,) = [line for line in margin_lines(table) if "rms / ln" in line and "margin" in line]
    rms = table[table["variant"] == "rms"].set_index("boundary")
    wide, narrow = rms.loc["quality, margin 0.3"], rms.loc["quality, margin 0.1"]
    assert float(wide["ratio_high"] / wide["ratio_low"]) > 100
    assert lr_shown(wide["ratio_to_baseline"], wide["ratio_low"], wide["ratio_high"]) is (
        Shown.TOO_WIDE
    )
    assert f"{three(wide['ratio_high'])}" not in line and f"{three(wide['ratio_low'])}" not in line
    assert narrow["ratio_to_baseline"] == pytest.approx(3.0, rel=0.1)
    assert f"{three(narrow['ratio_to_baseline'])} [{three(narrow['ratio_low'])}," in line
