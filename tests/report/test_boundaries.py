"""The report's max stable LRs (learned at all), descriptive: each variant's boundary and its
ratio to the baseline with 95% intervals, none printed where the data cannot support it (one
bracket, an interval wider than 100×); one seed says its interval is the lattice's, and a
variant with no boundary says why."""

from __future__ import annotations

import pytest
from conftest import max_lr_result

from ablate.core.studies import Probe, Studies
from ablate.report.boundaries import (
    ONE_SEED_NOTE,
    NoBoundary,
    boundary_table,
    max_lr_section,
    no_boundary,
    ratio_shown,
    summary_lines,
)
from ablate.report.text import Shown


def test_a_ratio_whose_seeds_disagree_is_printed_without_a_verdict() -> None:
    studies = Studies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.2, 2: 0.13}),
            "rms": max_lr_result("rms", {0: 0.2, 1: 0.1, 2: 0.14}),  # seeds disagree in sign
        }
    )
    table = boundary_table(studies)
    rms = table.set_index("variant").loc["rms"]
    assert rms["ratio_low"] < 1 < rms["ratio_high"] and rms["ratio_pairs"] == 3
    row = table.iloc[1]
    assert ratio_shown(row) is Shown.NUMBER  # its number, and no verdict: it is descriptive
    text = "\n".join(summary_lines(studies))
    assert (
        f"{rms['ratio_to_baseline']:.3g} [{rms['ratio_low']:.3g}, {rms['ratio_high']:.3g}]" in text
    )


def test_the_boundary_is_the_geometric_mean_its_interval_is_centred_on() -> None:
    edges = {0: 0.1, 1: 0.2, 2: 0.13}
    studies = Studies(max_lr={"ln": max_lr_result("ln", edges)})
    ln = boundary_table(studies).iloc[0]
    low, high = ln["max_stable_lr_low"], ln["max_stable_lr_high"]
    assert ln["max_stable_lr"] == pytest.approx((low * high) ** 0.5)


def test_a_consistent_ratio_is_shown_with_its_paired_interval() -> None:
    studies = Studies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.2, 2: 0.13}),
            "rms": max_lr_result("rms", {0: 0.3, 1: 0.6, 2: 0.4}),  # 3x on every seed
        }
    )
    rms = boundary_table(studies).set_index("variant").loc["rms"]
    assert rms["ratio_low"] > 1
    assert rms["ratio_low"] <= 3.0 <= rms["ratio_high"]
    assert rms["ratio_to_baseline"] == pytest.approx(3.0, rel=2 ** (1 / 8) - 1)
    section = max_lr_section(studies)
    assert set(section.tables) == {"max_lr.csv", "max_lr_seeds.csv", "max_lr_divergence_seeds.csv"}
    assert len(section.tables["max_lr_seeds.csv"]) == 6  # every seed of both variants


def test_one_seed_says_its_interval_is_the_lattices_only() -> None:
    studies = Studies(
        max_lr={"ln": max_lr_result("ln", {0: 0.1}), "rms": max_lr_result("rms", {0: 0.4})}
    )
    rms = boundary_table(studies).set_index("variant").loc["rms"]
    assert rms["seeds_bracketed"] == 1 and rms["ratio_pairs"] == 1
    assert ONE_SEED_NOTE in "\n".join(summary_lines(studies))


def test_a_variant_with_no_boundary_says_why() -> None:
    stable = [Probe(1.0, 0, True, False), Probe(100.0, 0, True, False)]
    unstable = [Probe(1e-3, 0, False, False), Probe(1e-6, 0, False, False)]
    stable_to_the_end = max_lr_result("ln", {0: 1e3}, probes=stable)  # stable up to lr_max
    never = max_lr_result("rms", {0: 1e-9}, probes=unstable)  # unstable down to lr_min
    assert no_boundary(stable_to_the_end) == NoBoundary(True, 1.0, 100.0)
    assert no_boundary(never) == NoBoundary(False, 1e-6, 1e-3)
    studies = Studies(max_lr={"ln": stable_to_the_end, "rms": never})
    assert (boundary_table(studies)["seeds_bracketed"] == 0).all()
    assert len(summary_lines(studies)) == 2  # each variant's reason, no boundary to give


def test_seeds_that_all_share_one_step_print_no_ratio() -> None:
    studies = Studies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.1, 2: 0.1}),
            "rms": max_lr_result("rms", {0: 0.2, 1: 0.2, 2: 0.2}),  # one bracket each, 3 of 3
        }
    )
    rms = boundary_table(studies).set_index("variant").loc["rms"]
    assert rms["one_bracket"] and rms["ratio_low"] > 1  # the interval alone would exclude 1
    assert ratio_shown(boundary_table(studies).iloc[1]) is Shown.ONE_BRACKET
    text = "\n".join(summary_lines(studies))
    assert f"{rms['ratio_to_baseline']:.3g} [" not in text


def test_an_interval_wider_than_a_hundredfold_prints_no_number() -> None:
    studies = Studies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.1, 2: 0.1}),
            "rms": max_lr_result("rms", {0: 0.001, 1: 10.0, 2: 0.5}),
        }
    )
    rms = boundary_table(studies).set_index("variant").loc["rms"]
    assert rms["ratio_high"] / rms["ratio_low"] > 100
    assert ratio_shown(boundary_table(studies).iloc[1]) is Shown.TOO_WIDE
    text = "\n".join(summary_lines(studies))
    assert f"{rms['ratio_high']:.3g}" not in text
    section = "\n".join(max_lr_section(studies).lines)
    assert f"{rms['max_stable_lr_high']:.3g}" not in section  # nor the boundary's own
