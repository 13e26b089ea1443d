"""The Cost of the answer: each stage's runs and run-steps, recomputed from the stored runs, and
the verdicts each stage feeds by the design the primary was measured with."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, simulated_experiment

from ablate.core.load import load_experiment
from ablate.core.manifest import plan_manifest
from ablate.core.plan import plan_runs
from ablate.core.stages import RUN_GROUPS
from ablate.launch.pipeline import run_experiment
from ablate.report.context import ReportContext
from ablate.report.cost import (
    ALL,
    TUNED,
    cost_of,
    cost_table,
    fed_by,
    planned_feeds,
    secondary_sections,
    section,
)
from ablate.report.load import load_experiment_results
from ablate.report.plan import (
    DIVERGENCE,
    MATCHED,
    SAME_SETTINGS,
    SHARED_LR,
    SPEED,
    TUNED_ONLY,
    TWO_BY_TWO,
    USABLE,
    Estimand,
)


def _estimand(key: str) -> Estimand:
    return Estimand(key, "rms", "ln", key, "difference", 0.02, key == MATCHED, 1)


def test_the_primary_is_fed_by_the_runs_of_its_design() -> None:
    matched = _estimand(MATCHED)
    assert fed_by(matched, SHARED_LR) == {"main"}
    assert fed_by(matched, TWO_BY_TWO) == TUNED | {"crossover"}
    assert fed_by(matched, SAME_SETTINGS) == fed_by(matched, TUNED_ONLY) == TUNED
    assert TUNED == {"search", "curve", "warmup", "tuned", "decide"}
    assert fed_by(_estimand(SPEED), SHARED_LR) == {"main"}
    assert fed_by(_estimand(SPEED), TWO_BY_TWO) == {"tuned"}
    assert fed_by(_estimand(USABLE), TWO_BY_TWO) == {"usable", "search", "curve"}
    assert fed_by(_estimand(DIVERGENCE), SHARED_LR) == {"max_lr"}
    with pytest.raises(ValueError):
        fed_by(_estimand("nothing"), SHARED_LR)


def test_each_stage_costs_its_stored_runs_steps(tmp_path: Path) -> None:
    exp = simulated_experiment(tmp_path, search={"n_trials": 3}, max_lr={"seeds": [0]})
    result = run_experiment(exp, tmp_path / "r", tmp_path / "rep")
    stored = load_experiment_results(result.folder)
    ctx = ReportContext.of(stored, stored.manifest.variants)
    cost = cost_of(ctx)
    by_group = {s.group: s for s in cost.stages}
    planned = set(stored.runs["group"]) | {kind for _, kind in stored.studies.run_ids()}
    assert set(by_group) == planned and list(by_group)[0] == "main"
    main = stored.runs[stored.runs["group"] == "main"]
    assert (by_group["main"].runs, by_group["main"].run_steps) == (len(main), main["steps"].sum())
    search_ids = {i for (_, kind), ids in stored.studies.run_ids().items() if kind == "search"
                  for i in ids}  # fmt: skip
    searched = stored.stored_runs[stored.stored_runs["run_id"].isin(search_ids)]
    assert by_group["search"].run_steps == searched["steps"].sum()
    design = ctx.found.plan.primary
    for stage in cost.stages:
        fed = {
            f.estimand.title for f in ctx.found.found if stage.group in fed_by(f.estimand, design)
        }
        assert set(stage.feeds) == fed
    assert cost.decided == sum(f.verdict.decided for f in ctx.found.found)
    assert cost.verdicts == len(ctx.found.found)
    assert cost.run_steps <= sum(s.run_steps for s in cost.stages)  # a shared run counts once
    table = cost_table(cost)
    assert list(table["run_steps"]) == [s.run_steps for s in cost.stages] + [cost.run_steps]
    assert list(table["stage"])[-1] == ALL and table["share_of_run_steps"].iloc[-1] == 1.0
    assert table["share_of_run_steps"].iloc[:-1].sum() >= 1 - 1e-3
    written = pd.read_csv(result.report_dir / "cost.csv")
    assert list(written["stage"]) == [s.group for s in cost.stages] + [ALL]
    assert section(ctx).tables["cost.csv"].equals(table)


def test_the_committed_default_reports_cost_recomputes_from_its_csvs() -> None:
    """``reports/ln_vs_rms``: every stage's runs and run-steps from ``runs.csv``'s ``stages``
    (a run two stages share counts in both), the whole from its distinct runs, and every
    verdict a stage feeds is one of ``answer.csv``'s."""
    folder = REPO / "reports" / "ln_vs_rms"
    table = pd.read_csv(folder / "cost.csv").set_index("stage")
    cost, everything = table.drop(ALL), table.loc[ALL]
    runs = pd.read_csv(folder / "runs.csv")
    answer = pd.read_csv(folder / "answer.csv")
    in_stages = runs["stages"].fillna("").str.split(";")
    for stage, row in cost.iterrows():
        mine = runs[in_stages.apply(lambda stages, s=stage: s in stages)]
        assert (row["runs"], row["run_steps"]) == (len(mine), mine["steps"].sum()), stage
        fed = set(str(row["feeds"]).split("; ")) if isinstance(row["feeds"], str) else set()
        assert fed <= set(answer["estimand"]), stage
    assert (everything["runs"], everything["run_steps"]) == (len(runs), runs["steps"].sum())
    shared = in_stages.apply(len) > 1  # here a usable walk's run that a max-LR probe reuses
    assert cost["runs"].sum() - everything["runs"] == shared.sum()
    assert pd.isna(cost.loc["main", "feeds"])  # tuned runs lead: the shared-LR A/B feeds none


def test_validate_names_the_verdicts_each_planned_stage_would_feed() -> None:
    experiment = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    feeds = planned_feeds(plan_manifest(experiment, plan_runs(experiment)))
    assert list(feeds) == [g.name for g in RUN_GROUPS]
    assert feeds["main"] == () and feeds["crossover"] == ("quality at matched settings",)
    assert feeds["decide"] == feeds["warmup"] == ("quality at matched settings", "the tuned gain")
    assert feeds["max_lr"] == ("divergence edge",) and feeds["usable"] == ("usable LR",)


@pytest.mark.parametrize(
    "name, left_out",
    [("ln_vs_rms", ["max_lr"]), ("smoke", ["sweep", "max_lr"]), ("bias", ["curve", "max_lr"])],
)
def test_primary_only_leaves_out_the_sections_that_feed_no_primary_verdict(
    name: str, left_out: list[str]
) -> None:
    """The default's max-LR brackets and usable walks feed secondary verdicts only; a grid's
    primary is its factors at the shared LR, so even its curve is secondary."""
    experiment = load_experiment(REPO / "experiments" / f"{name}.yaml")
    assert secondary_sections(experiment) == left_out
