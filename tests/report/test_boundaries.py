"""The report's max stable LRs: a ratio is "shown" only when its interval excludes 1, one seed
says its interval is the lattice's, and a variant with no boundary says why."""

from __future__ import annotations

import pytest
from conftest import max_lr_result

from ablate.core.studies import Probe, Studies
from ablate.report.boundaries import boundary_table, max_lr_section, summary_lines


def test_a_ratio_whose_interval_holds_one_is_not_shown() -> None:
    studies = Studies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.2, 2: 0.13}),
            "rms": max_lr_result("rms", {0: 0.2, 1: 0.1, 2: 0.14}),  # seeds disagree in sign
        }
    )
    table = boundary_table(studies)
    rms = table.set_index("variant").loc["rms"]
    assert rms["ratio_low"] < 1 < rms["ratio_high"] and not rms["ratio_shown"]
    text = "\n".join(summary_lines(studies))
    assert "Max stable LR, rms / ln:" in text and "a difference is **not shown**" in text
    assert "paired over 3 seed(s)" in text and "**shown** (the interval excludes 1)" not in text


def test_a_consistent_ratio_is_shown_with_its_paired_interval() -> None:
    studies = Studies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.2, 2: 0.13}),
            "rms": max_lr_result("rms", {0: 0.3, 1: 0.6, 2: 0.4}),  # 3x on every seed
        }
    )
    rms = boundary_table(studies).set_index("variant").loc["rms"]
    assert rms["ratio_low"] > 1 and rms["ratio_shown"]
    assert rms["ratio_low"] <= 3.0 <= rms["ratio_high"]
    assert rms["ratio_to_baseline"] == pytest.approx(3.0, rel=2 ** (1 / 8) - 1)
    section = max_lr_section(studies)
    assert set(section.tables) == {"max_lr.csv", "max_lr_seeds.csv"}
    assert len(section.tables["max_lr_seeds.csv"]) == 6  # every seed of both variants


def test_one_seed_says_its_interval_is_the_lattices_only() -> None:
    studies = Studies(
        max_lr={"ln": max_lr_result("ln", {0: 0.1}), "rms": max_lr_result("rms", {0: 0.4})}
    )
    text = "\n".join(summary_lines(studies))
    assert "paired over 1 seed(s)" in text
    assert "with one seed the interval is the lattice's, not the seeds' spread" in text


def test_a_variant_with_no_boundary_says_why() -> None:
    stable = [Probe(1.0, 0, True, False), Probe(100.0, 0, True, False)]
    unstable = [Probe(1e-3, 0, False, False), Probe(1e-6, 0, False, False)]
    stable_to_the_end = max_lr_result("ln", {0: 1e3}, probes=stable)  # stable up to lr_max
    never = max_lr_result("rms", {0: 1e-9}, probes=unstable)  # unstable down to lr_min
    text = "\n".join(summary_lines(Studies(max_lr={"ln": stable_to_the_end, "rms": never})))
    assert "ln: **no boundary found**: every seed was stable up to the range's end" in text
    assert "rms: **no boundary found**: every probe (1e-06 to 0.001) was unstable" in text
    assert "Max stable LR (" not in text  # no boundary to give


def test_seeds_that_all_share_one_step_are_below_the_lattices_resolution() -> None:
    studies = Studies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.1, 2: 0.1}),
            "rms": max_lr_result("rms", {0: 0.2, 1: 0.2, 2: 0.2}),  # one bracket each, 3 of 3
        }
    )
    rms = boundary_table(studies).set_index("variant").loc["rms"]
    assert rms["ratio_shown"] and rms["one_bracket"]  # the interval alone would say so
    assert rms["ratio_word"] == "below the lattice's resolution"
    text = "\n".join(summary_lines(studies))
    assert "**below the lattice's resolution**: each variant's seeds share one bracket" in text
    assert "a difference is **shown**" not in text


def test_an_interval_wider_than_a_hundredfold_is_not_estimable() -> None:
    studies = Studies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.1, 2: 0.1}),
            "rms": max_lr_result("rms", {0: 0.001, 1: 10.0, 2: 0.5}),
        }
    )
    rms = boundary_table(studies).set_index("variant").loc["rms"]
    assert rms["ratio_high"] / rms["ratio_low"] > 100
    assert rms["ratio_word"] == "not estimable with 3 seed(s)"
    assert "**not estimable with 3 seed(s)**" in "\n".join(summary_lines(studies))


def test_boundary_ratios_are_holm_adjusted_together() -> None:
    ln = max_lr_result("ln", {0: 0.1, 1: 0.2, 2: 0.13})
    studies = Studies(
        max_lr={
            "ln": ln,
            "a": max_lr_result("a", {0: 0.3, 1: 0.6, 2: 0.4}),
            "b": max_lr_result("b", {0: 0.12, 1: 0.25, 2: 0.15}),
        }
    )
    table = boundary_table(studies).set_index("variant")
    p = table["ratio_p"].dropna().sort_values()
    assert table.loc[p.index[0], "ratio_p_holm"] == pytest.approx(min(1.0, 2 * p.iloc[0]))
