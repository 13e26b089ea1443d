"""The declared analysis plan: which estimands a design has, their shares of α and levels,
and the rules read back from a stored plan (defaults for one stored before they were kept)."""

from __future__ import annotations

import pytest
from conftest import stored_manifest

from ablate.core.experiment import AnalysisConfig
from ablate.core.manifest import Manifest
from ablate.report.plan import (
    CONVERT,
    DIVERGENCE,
    FACTOR,
    FACTOR_DIVERGENCE,
    GRID,
    MATCHED,
    SHARED_LR,
    SPEED,
    TUNED_GAIN,
    TWO_BY_TWO,
    USABLE,
    analysis_plan,
    left_out,
    plan_lines,
    primary_design,
    rules_of,
    stages_of,
)


def _manifest(**extra: object) -> Manifest:
    return stored_manifest(
        **{
            "runs": [{"group": "main"}, {"group": "tuned"}, {"group": "crossover"}],
            "stages": ["main", "curve", "tuned", "crossover", "usable", "decide", "max_lr"],
            "decide": {"looks": [3, 5, 7, 9]},
            **extra,
        }
    )


def test_the_default_designs_family_and_its_levels() -> None:
    plan = analysis_plan(_manifest(), TWO_BY_TWO)
    found = {e.key: e for e in plan.estimands}
    assert list(found) == [MATCHED, TUNED_GAIN, USABLE, DIVERGENCE, SPEED]
    assert found[MATCHED].primary and found[MATCHED].share == 0.5
    assert all(found[k].share == 0.125 for k in (TUNED_GAIN, USABLE, DIVERGENCE, SPEED))
    assert sum(e.share for e in plan.estimands) == pytest.approx(1.0)
    # decide:'s seeds: its four looks divide the shares of the estimands measured on them
    assert found[MATCHED].level == pytest.approx(1 - 0.05 * 0.5 / 4)
    assert found[TUNED_GAIN].level == pytest.approx(1 - 0.05 * 0.125 / 4)
    assert found[USABLE].level == pytest.approx(1 - 0.05 * 0.125)  # its own seeds: one look
    text = "\n".join(plan_lines(plan))
    row = "| quality at matched settings | rms − ln | difference, ±0.02 nats | primary | 0.5 | 4 |"
    assert f"{row} 99.38% |" in text
    assert (found[USABLE].scale, found[USABLE].margin) == ("ratio", 1.5)
    assert (found[USABLE].variant, found[USABLE].baseline) == ("rms", "ln")


def test_without_a_cross_over_no_tuned_gain_and_on_the_simulator_no_speed() -> None:
    plan = analysis_plan(_manifest(), "same settings", simulated=True)
    assert [e.key for e in plan.estimands] == [MATCHED, USABLE, DIVERGENCE]
    shared = analysis_plan(
        stored_manifest(runs=[{"group": "main"}], stages=["main"]), SHARED_LR, simulated=True
    )
    (only,) = shared.estimands
    assert only.share == 1.0 and only.level == pytest.approx(0.95)  # the whole of α


def test_a_conversion_is_a_secondary_estimand_of_its_own() -> None:
    manifest = stored_manifest(stages=["main", "convert"])
    plan = analysis_plan(manifest, SHARED_LR, simulated=True)
    assert [(e.key, e.variant, e.baseline, e.primary) for e in plan.estimands] == [
        (MATCHED, "rms", "ln", True),
        (CONVERT, "converted", "continued", False),
    ]
    assert [e.share for e in plan.estimands] == [0.5, 0.5]


def test_a_grid_is_asked_about_its_factors() -> None:
    manifest = stored_manifest(
        variants=["ln.true", "ln.false", "rms.true", "rms.false"],
        grid=[["model.norm.kind", ["layernorm", "rmsnorm"]], ["model.norm.bias", [True, False]]],
        runs=[{"group": "main"}],
        stages=["main", "max_lr"],
    )
    plan = analysis_plan(manifest, SHARED_LR)
    assert plan.primary == GRID
    assert [(e.key, e.contrast) for e in plan.estimands] == [
        (FACTOR, ("model.norm.kind", "rmsnorm", "layernorm")),
        (FACTOR_DIVERGENCE, ("model.norm.kind", "rmsnorm", "layernorm")),
        (FACTOR, ("model.norm.bias", "false", "true")),
        (FACTOR_DIVERGENCE, ("model.norm.bias", "false", "true")),
    ]
    assert [e.share for e in plan.estimands] == [0.25, 0.25, 0.25, 0.25]


def test_the_rules_and_stages_read_back_from_any_stored_plan() -> None:
    assert rules_of(None, 0.05) == AnalysisConfig(min_effect=0.05)  # kept alone
    stored = {"min_effect": 0.01, "alpha": 0.1, "lr_margin": 2.0}
    assert rules_of(stored, None).alpha == 0.1 and rules_of(stored, 0.05).lr_margin == 2.0
    assert rules_of(None, None) == AnalysisConfig()  # stored before either was kept
    older = stored_manifest(runs=[{"group": "main"}, {"group": "tuned"}], usable_within=0.1)
    assert stages_of(older) == {"main", "tuned", "max_lr", "usable"}
    assert primary_design(stored_manifest(runs=[{"group": "main"}]), True, False) == SHARED_LR
    assert primary_design(_manifest(), crossed=False, same=False) == "tuned"


def test_stages_left_out_keep_the_primary_share_their_verdicts_would_have_left() -> None:
    alone = stored_manifest(runs=[{"group": "main"}], stages=["main"])
    simulated = True  # no speed ratio: the primary is the only estimand
    assert [e.share for e in analysis_plan(alone, SHARED_LR, simulated).estimands] == [1.0]
    cut = stored_manifest(
        runs=[{"group": "main"}], stages=["main"], command_line={"max_lr": None, "train.lr": 0.1}
    )
    assert left_out(cut) == ["max_lr"]
    plan = analysis_plan(cut, SHARED_LR, simulated)
    assert plan.left_out == ("max_lr",)
    assert [e.share for e in plan.estimands] == [0.5]  # the rest reserved for max_lr's verdicts


def test_leaving_stages_out_keeps_every_other_verdicts_share_of_the_whole_design() -> None:
    whole = analysis_plan(_manifest(), TWO_BY_TWO)
    stages = ["main", "curve", "tuned", "crossover", "decide"]  # --primary-only: no max_lr:
    part = analysis_plan(_manifest(stages=stages, command_line={"max_lr": None}), TWO_BY_TWO)
    shares = {e.key: e.share for e in whole.estimands}
    assert [e.key for e in part.estimands] == [MATCHED, TUNED_GAIN, SPEED]
    assert all(e.share == shares[e.key] == (0.5 if e.primary else 0.125) for e in part.estimands)
    assert sum(e.share for e in part.estimands) == 0.75  # usable LR's and the edge's unspent
    assert "shares of the stages left out reserved, unspent: max_lr" in "\n".join(plan_lines(part))
    without = analysis_plan(_manifest(stages=stages), TWO_BY_TWO)  # a file with no max_lr:
    assert [e.share for e in without.estimands] == [0.5, 0.25, 0.25]
