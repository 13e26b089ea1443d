"""Every estimator against the simulator's truth: bias, spread and coverage stay inside the
bounds docs/stability-and-search.md describes (fewer replications than the docs' table; every
replication is seeded, so these numbers repeat exactly)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from conftest import REPO

from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from research import estimators
from research.estimators import ESTIMATORS, score
from research.replication import Outcome


@pytest.fixture(scope="module")
def design() -> Experiment:
    return load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")


@pytest.mark.slow
def test_the_old_brackets_ratio_misses_a_ratio_off_its_lattice(design: Experiment) -> None:
    found = score(design, "old_bracket_ratio", 20)  # the bracket the max-LR stage gave before
    assert abs(found.bias) < 0.3 and found.median_abs >= 0.25  # a count of √2 steps, not 2^(1/8)
    assert found.within_quarter < 0.7 and found.failed == 0  # its wide interval still covers


@pytest.mark.slow
def test_a_bracket_holds_the_worst_probed_seed_not_the_median(design: Experiment) -> None:
    worst = score(design, "old_bracket_worst_seed", 8)
    assert worst.coverage == 1.0 and abs(worst.bias) < 0.3
    median = score(design, "old_bracket_median", 8)
    assert median.bias < worst.bias and median.coverage is not None and median.coverage < 0.9


@pytest.mark.slow
def test_per_seed_boundaries_give_a_ratio_interval_that_covers_and_a_bootstrap_that_does_not(
    design: Experiment,
) -> None:
    paired = score(design, "boundary_ratio_t", 12)
    assert paired.coverage is not None and paired.coverage >= 0.9 and paired.failed == 0
    assert abs(paired.bias) < 0.1 and paired.median_abs < 0.125  # five seeds: under one step
    boot = score(design, "boundary_ratio_bootstrap", 12)
    assert boot.coverage is not None and boot.coverage < paired.coverage and boot.failed == 0
    median = score(design, "boundary_median", 12)
    assert median.coverage is not None and median.coverage >= 0.85 and abs(median.bias) < 0.2
    given = score(design, "boundary_ratio_given_seeds", 12)  # the measurement, not the seeds
    assert given.median_abs < 0.125 and given.coverage == 1.0  # under one 2^(1/8) step
    three = score(design, "boundary_ratio_three_seeds", 12)  # the seeds' sampling grows
    assert three.spread > paired.spread and three.coverage is not None and three.coverage >= 0.9


@pytest.mark.slow
def test_the_search_lands_near_the_true_optimum(design: Experiment) -> None:
    found = score(design, "search_best_lr", 12)
    assert abs(found.bias) < 0.5 and found.spread < 1.0 and found.failed == 0
    assert found.within_quarter < 0.6  # its best trial is not an estimate of the optimum
    regret = score(design, "search_regret", 12)
    assert 0 <= regret.bias < 0.05


@pytest.mark.slow
def test_the_curves_bagged_optimum_is_unbiased_and_covered_and_equal_optima_stay_equal(
    design: Experiment,
) -> None:
    found = score(design, "optimum_lr", 12)
    # two seeds, on a symmetric valley whose optimum lies anywhere between grid points: within
    # 2^(1/4) in 69.5% of the docs' 200 replications, covered in 83.0% (a bootstrap of two
    # seeds has three distinct resamples); four seeds: 78.5% and 95.5%
    assert found.within_quarter >= 0.6 and abs(found.bias) < 0.1 and found.failed == 0
    assert found.coverage is not None and found.coverage >= 0.75
    four = score(design, "optimum_lr_noisy_more_seeds", 12)
    assert four.coverage is not None and four.coverage >= 0.9
    equal = score(design, "optimum_ratio_equal", 12)  # covered: not called different
    assert equal.coverage is not None and equal.coverage >= 0.8  # 93.5% of 200


def test_the_paired_interval_covers_at_its_level(design: Experiment) -> None:
    found = score(design, "paired_interval", 200)
    assert found.coverage is not None and 0.91 <= found.coverage <= 0.99
    assert abs(found.bias) < 0.002


def test_holm_keeps_the_family_wise_error_near_alpha(design: Experiment) -> None:
    found = score(design, "holm_family", 200)
    assert found.bias <= 0.08  # the share of replications with a false rejection


def test_an_estimator_is_one_function_and_one_entry(
    design: Experiment, monkeypatch: pytest.MonkeyPatch
) -> None:
    def always_half(design: Experiment, replication: int, folder: Path) -> Outcome:
        return Outcome(0.5 if replication % 2 else math.nan, replication % 2 == 1)

    entry = estimators.Entry("a constant", "log2", always_half)
    monkeypatch.setitem(ESTIMATORS, "half", entry)
    found = score(design, "half", 4)
    assert (found.bias, found.spread, found.coverage, found.failed) == (0.5, 0.0, 0.5, 2)
    assert found.median_abs == 0.5
    assert "`half`" in estimators.table(design, ["half"], 2)


def test_the_docs_table_is_the_commands_output() -> None:
    doc = (REPO / "docs" / "stability-and-search.md").read_text(encoding="utf-8")
    command = "python -m research.estimators experiments/ln_vs_rms.yaml --replications 200"
    begin, end = estimators.markers(
        estimators.BLOCK, f"{command} --write docs/stability-and-search.md"
    )
    block = doc.split(begin)[1].split(end)[0]  # the opening comment names the command
    for name in ESTIMATORS:
        assert f"| `{name}`" in block


def test_a_block_is_rewritten_between_markers_that_name_its_command(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("before\n<!-- t:begin -->\nold\n<!-- t:end -->\nafter\n", encoding="utf-8")
    estimators.write_block(doc, "t", "new", "python -m research.x --write doc.md")
    begin, end = estimators.markers("t", "python -m research.x --write doc.md")
    assert doc.read_text(encoding="utf-8") == f"before\n{begin}\nnew\n{end}\nafter\n"
    estimators.write_block(doc, "t", "newer", "python -m research.x")  # found again by its name
    assert "newer" in doc.read_text(encoding="utf-8") and "new\n" not in doc.read_text()
