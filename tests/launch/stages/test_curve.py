"""The curve stage on the simulator: each variant's optimum from its own curve on seeds apart
from the final ones, a grid grown where an optimum lies at its edge, and a tuned A/B at the
optima; a rerun trains nothing."""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import study_trials, write_experiment

from ablate.core import store
from ablate.core.early_stop import held_at
from ablate.core.load import load_experiment
from ablate.core.plan import plan_curve
from ablate.launch.pipeline import run_experiment
from ablate.launch.simulator import SimulatedExecutor
from ablate.report.estimands import findings
from ablate.report.load import load_experiment_results
from ablate.report.plan import TWO_BY_TWO
from ablate.report.studies import warmup_studies


def _experiment(tmp_path: Path, optima: dict[str, float], **curve: object) -> Path:
    truth = {"variants": {v: {"opt_lr": lr} for v, lr in optima.items()}, "run_sd": 0.005}
    return write_experiment(
        tmp_path / "e.yaml",
        seeds=[0, 1],
        curve={"lr_min": 1e-3, "lr_max": 3e-2, **curve},
        runtime={"backend": "simulate", "simulate": truth},
        storage=f"journal:{tmp_path / 'studies.log'}",
    )


@pytest.mark.usefixtures("unrendered_figures")
def test_each_variant_is_tuned_at_its_own_curves_optimum_on_other_seeds(tmp_path: Path) -> None:
    optima = {"layernorm": 0.004, "rmsnorm": 0.009}
    path = _experiment(tmp_path, optima)
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    runs = store.load_summaries(result.folder)
    curve = runs[runs["group"] == "curve"]
    assert set(curve["seed"]) == {2, 3}  # the two above the final seeds [0, 1]
    tuned = runs[runs["group"] == "tuned"]
    assert sorted(tuned["seed"]) == [0, 0, 1, 1]
    for variant, opt in optima.items():
        lr = tuned.loc[tuned["variant"] == variant, "lr"].iloc[0]
        assert abs(math.log2(lr / opt)) < 0.25  # within 2^(1/4) of the true optimum
    optimum = pd.read_csv(result.report_dir / "curve_optimum.csv").set_index("variant")
    assert list(optimum.index) == ["layernorm", "rmsnorm"]  # the curve section's table
    assert optimum.loc["rmsnorm", "ratio_low"] > 1  # the optima differ: 2^(1.17) apart
    for variant, opt in optima.items():
        assert abs(math.log2(optimum.loc[variant, "optimum_lr"] / opt)) < 0.25
    again = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    assert len(store.load_summaries(again.folder)) == len(runs)  # nothing trained again
    url = f"journal:{tmp_path / 'studies.log'}"
    for variant in optima:  # each curve is a study, one trial per LR, recorded once
        trials = study_trials(url, f"tiny.{variant}.curve")
        mine = curve[curve["variant"] == variant]
        assert sorted(t.params["lr"] for t in trials) == sorted(set(mine["lr"]))
        for trial in trials:
            losses = mine.loc[mine["lr"] == trial.params["lr"], "final_val_loss"]
            assert trial.value == pytest.approx(losses.mean())
            assert sorted(trial.user_attrs["seed_values"]) == ["2", "3"]


@pytest.mark.usefixtures("unrendered_figures")
def test_a_curve_lowest_at_its_edge_grows_the_grid_there(tmp_path: Path) -> None:
    path = _experiment(tmp_path, {"layernorm": 0.06, "rmsnorm": 0.06}, extend=2)
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    curve = store.load_summaries(result.folder).query("group == 'curve'")
    exp = load_experiment(path)
    assert curve["lr"].max() == pytest.approx(exp.curve.lrs(0, 2)[-1])  # grown two octaves up
    assert curve["lr"].min() == pytest.approx(exp.curve.lrs()[0])  # not below
    tuned = store.load_summaries(result.folder).query("group == 'tuned'")
    assert (abs((tuned["lr"] / 0.06).map(math.log2)) < 0.25).all()


@pytest.mark.usefixtures("unrendered_figures")
def test_each_variants_warmup_is_tuned_by_its_own_study_at_its_optimum(tmp_path: Path) -> None:
    path = _experiment(
        tmp_path, {"layernorm": 0.004, "rmsnorm": 0.009}, warmup_trials=5, warmup_startup=2
    )
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    runs = store.load_summaries(result.folder)
    url = f"journal:{tmp_path / 'studies.log'}"
    tuned = runs[runs["group"] == "tuned"]
    for variant in ("layernorm", "rmsnorm"):
        trials = study_trials(url, f"tiny.{variant}.warmup")
        assert sum(t.state.name == "COMPLETE" for t in trials) == 5
        best = min((t for t in trials if t.value is not None), key=lambda t: t.value)
        mine = tuned[tuned["variant"] == variant]
        assert set(mine["warmup_steps"]) == {best.params["warmup_steps"]}
        trial_runs = runs[(runs["group"] == "warmup") & (runs["variant"] == variant)]
        assert set(trial_runs["seed"]) == {2, 3} and set(trial_runs["lr"]) == set(mine["lr"])
    text = (result.report_dir / "report.md").read_text()
    settings = text.split("## Shared LR and tuned settings")[1].split("\n## ")[0]
    for row in tuned.drop_duplicates("variant").itertuples():  # the warmup the runs trained at
        assert f"| {row.variant} " in settings and f"{row.lr:.3g}, {row.warmup_steps} " in settings
    stages = text.split("**Stages:** ")[1]
    curve, warmup = (len(runs.query(f"group == '{g}'")) for g in ("curve", "warmup"))
    assert stages.startswith(f"main 4 runs of 20 steps, curve {curve} runs of 20 steps, warmup ")
    listed = pd.read_csv(result.report_dir / "runs.csv")  # the warmup studies' runs too
    assert (listed["group"] == "warmup").sum() == warmup and (listed["group"] == "tuned").sum() == 4
    studied = warmup_studies(load_experiment_results(result.folder))
    assert [s.variant for s in studied] == ["layernorm", "rmsnorm"]
    for study in studied:  # five warmups tried, the best the one the tuned runs trained at
        assert len(study.tried) == 5
        assert {study.best} == set(tuned.loc[tuned["variant"] == study.variant, "warmup_steps"])
    before = len(runs)
    run_experiment(path, tmp_path / "results", tmp_path / "reports")
    assert len(store.load_summaries(result.folder)) == before  # the studies continue, done


@pytest.mark.usefixtures("unrendered_figures")
def test_a_warmup_grid_tries_each_warmup_once_and_tunes_at_the_best(tmp_path: Path) -> None:
    grid = [2, 5, 10]
    path = _experiment(tmp_path, {"layernorm": 0.004, "rmsnorm": 0.009}, warmup_grid=grid)
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    runs = store.load_summaries(result.folder)
    url = f"journal:{tmp_path / 'studies.log'}"
    for variant in ("layernorm", "rmsnorm"):
        trials = study_trials(url, f"tiny.{variant}.warmup")
        assert sorted(t.params["warmup_steps"] for t in trials) == grid  # each once, no more
        trial_runs = runs[(runs["group"] == "warmup") & (runs["variant"] == variant)]
        assert len(trial_runs) == len(grid) * 2 and set(trial_runs["seed"]) == {2, 3}
        means = trial_runs.groupby("warmup_steps")["final_val_loss"].mean()
        tuned = runs[(runs["group"] == "tuned") & (runs["variant"] == variant)]
        assert set(tuned["warmup_steps"]) == {int(means.idxmin())}  # the grid's best, recomputed
    studied = warmup_studies(load_experiment_results(result.folder))
    assert [s.tried for s in studied] == [grid, grid]
    assert [s.at_edge for s in studied] == [s.best in (2, 10) for s in studied]
    before = len(runs)
    run_experiment(path, tmp_path / "results", tmp_path / "reports")
    assert len(store.load_summaries(result.folder)) == before  # the grid is done: nothing more


@pytest.mark.usefixtures("unrendered_figures")
def test_a_declared_warmup_is_the_tuned_runs_and_nothing_searches_it(tmp_path: Path) -> None:
    path = _experiment(tmp_path, {"layernorm": 0.004, "rmsnorm": 0.009}, warmup_steps=7)
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    runs = store.load_summaries(result.folder)
    assert not (runs["group"] == "warmup").any()  # no study trained
    tuned = runs[runs["group"] == "tuned"]
    assert len(tuned) == 4 and set(tuned["warmup_steps"]) == {7}
    curve = runs[runs["group"] == "curve"]  # the LR chosen at the warmup it trains at
    assert set(curve["warmup_steps"]) == {7} != {load_experiment(path).base.train.warmup_steps}
    assert warmup_studies(load_experiment_results(result.folder)) == []


@pytest.mark.parametrize(
    ("curve", "why"),
    [
        ({"warmup_steps": 8, "warmup_grid": [2, 5]}, "declared and searched"),
        ({"warmup_steps": 8, "warmup_trials": 4}, "declared and searched by TPE"),
        ({"warmup_grid": [2, 5], "warmup_trials": 4}, "two studies"),
        ({"warmup_grid": [2, 2, 5]}, "repeated warmup"),
        ({"warmup_grid": [-1, 5]}, "negative warmup"),
        ({"warmup_grid": [5]}, "one warmup: nothing to choose"),
    ],
)
def test_a_warmup_grid_that_cannot_be_a_study_is_refused(
    tmp_path: Path, curve: dict[str, object], why: str
) -> None:
    from ablate.core.errors import ConfigError

    path = _experiment(tmp_path, {"layernorm": 0.004}, **curve)
    with pytest.raises(ConfigError) as refused:
        load_experiment(path)
    assert refused.value.key.startswith("curve"), why


def test_a_warmup_study_must_get_past_its_random_start_up(tmp_path: Path) -> None:
    from ablate.core.errors import ConfigError

    path = _experiment(tmp_path, {"layernorm": 0.004}, warmup_trials=4, warmup_startup=4)
    with pytest.raises(ConfigError, match="must be below warmup_trials"):
        load_experiment(path)


@pytest.mark.usefixtures("unrendered_figures")
def test_each_variant_also_runs_at_the_others_settings_and_the_report_says_so(
    tmp_path: Path,
) -> None:
    optima = {"layernorm": 0.004, "rmsnorm": 0.016}  # two octaves apart: the settings differ
    path = _experiment(tmp_path, optima)
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    runs = store.load_summaries(result.folder)
    tuned, cross = (runs[runs["group"] == g] for g in ("tuned", "crossover"))
    settings = {r.variant: (r.lr, r.warmup_steps) for r in tuned.itertuples()}
    assert len(cross) == 4 and sorted(cross["seed"]) == [0, 0, 1, 1]  # the tuned seeds
    for row in cross.itertuples():  # each at the other's tuned LR and warmup
        other = "rmsnorm" if row.variant == "layernorm" else "layernorm"
        assert (row.lr, row.warmup_steps) == settings[other]
    assert findings(load_experiment_results(result.folder)).plan.primary == TWO_BY_TWO
    table = pd.read_csv(result.report_dir / "crossover.csv")
    assert list(table["variant"]) == ["rmsnorm"] * 6 and (table["pairs"] == 2).all()
    parts = table.set_index("part")["diff"]
    assert parts.iloc[0] == pytest.approx(parts.iloc[3] + parts.iloc[4])  # gain = main + setting


@pytest.mark.usefixtures("unrendered_figures")
def test_the_usable_lr_is_walked_up_from_each_optimum_and_leads_the_stability_section(
    tmp_path: Path,
) -> None:
    path = _experiment(tmp_path, {"layernorm": 0.004, "rmsnorm": 0.008})
    doc = yaml.safe_load(path.read_text())
    doc["max_lr"] = {"seeds": [0, 1], "within": 0.05, "lr_max": 10.0}
    path.write_text(yaml.safe_dump(doc))
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    runs = store.load_summaries(result.folder).set_index("run_id")
    tuned = runs[runs["group"] == "tuned"]
    table = pd.read_csv(result.report_dir / "usable_lr.csv").set_index("variant")
    planned = pd.DataFrame([r.stored() for r in store.read_manifest(result.folder).runs])
    for variant in ("layernorm", "rmsnorm"):
        walked = planned[(planned["group"] == "usable") & (planned["variant"] == variant)]
        optimum = tuned.loc[tuned["variant"] == variant, "lr"].iloc[0]
        assert walked["lr"].min() == table.loc[variant, "optimum_lr"] == pytest.approx(optimum)
        assert round(math.log2(optimum) * 4, 6) == round(math.log2(optimum) * 4)  # 2^(k/4)
        steps = sorted(walked["lr"].unique())  # contiguous quarter octaves
        assert all(b / a == pytest.approx(2**0.25) for a, b in zip(steps, steps[1:], strict=False))
        for _, mine in walked.groupby("seed"):  # the last point is the first one above
            loss = runs.loc[mine["run_id"], "final_val_loss"].to_numpy()
            assert loss[-1] > loss[0] + 0.05 and (loss[1:-1] <= loss[0] + 0.05).all()
        assert table.loc[variant, "usable_lr"] > table.loc[variant, "optimum_lr"]
    text = (result.report_dir / "report.md").read_text()
    assert text.index("## Usable learning rate") < text.index("## Maximum stable learning rate")
    assert (table["within"] == 0.05).all()  # each variant walked to within 0.05 nats


STOP_STEP = 10  # the tiny runs' first evaluation of 20 steps


@pytest.mark.usefixtures("unrendered_figures")
def test_the_early_stop_stops_far_points_and_trains_the_rest_as_whole(tmp_path: Path) -> None:
    optima = {"layernorm": 0.004, "rmsnorm": 0.009}
    (tmp_path / "whole").mkdir()
    whole = run_experiment(
        _experiment(tmp_path / "whole", optima), tmp_path / "whole/r", tmp_path / "whole/p"
    )
    path = _experiment(tmp_path, optima, stop_step=STOP_STEP, stop_margin=0.1)
    early = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    assert early.missing == []  # a stopped run is its held spec's result
    runs = store.load_summaries(early.folder).set_index("run_id")
    every = store.load_summaries(whole.folder).set_index("run_id")
    curve = runs[runs["group"] == "curve"]
    stopped = curve[curve["status"] == "pruned"]
    assert len(stopped) and (stopped["steps"] == STOP_STEP).all()
    assert stopped["stable"].isna().all()
    rest = curve.drop(stopped.index)
    assert (rest["status"] == "finished").all() and set(rest.index) <= set(every.index)
    for column in ("final_val_loss", "steps"):  # a run held and trained on: as trained whole
        assert rest[column].tolist() == every.loc[rest.index, column].tolist()
    assert (
        stopped["steps"].sum() + rest["steps"].sum()
        < every.query("group == 'curve'")["steps"].sum()
    )
    evals = pd.read_csv(early.report_dir / "curve_evals.csv")
    assert set(evals["run_id"]) == set(curve.index)  # the report's record of every evaluation
    at_stop = evals[evals["step"] == STOP_STEP]
    for variant in optima:  # the rule: a stopped point's mean gap at the step above the margin
        means = at_stop[at_stop["variant"] == variant].groupby("lr")["val_loss"].mean()
        mine = stopped[stopped["variant"] == variant]
        assert set(mine["lr"]) == set(means[means - means.min() > 0.1].index)
    optimum = pd.read_csv(early.report_dir / "curve_optimum.csv")
    expected_optimum = pd.read_csv(whole.report_dir / "curve_optimum.csv")
    pd.testing.assert_frame_equal(optimum, expected_optimum)
    tuned = runs[runs["group"] == "tuned"].sort_values(["variant", "seed"])
    expected = every[every["group"] == "tuned"].sort_values(["variant", "seed"])
    assert tuned.index.tolist() == expected.index.tolist()  # the same optima, the same runs
    again = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    assert store.load_summaries(again.folder).equals(store.load_summaries(early.folder))
    url = f"journal:{tmp_path / 'studies.log'}"
    trials = study_trials(url, "tiny.layernorm.curve")
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    assert {t.params["lr"] for t in pruned} == set(stopped.query("variant == 'layernorm'")["lr"])


@pytest.mark.usefixtures("unrendered_figures")
def test_runs_held_at_a_step_the_file_no_longer_stops_at_train_on(tmp_path: Path) -> None:
    path = _experiment(tmp_path, {"layernorm": 0.004, "rmsnorm": 0.009})
    specs = plan_curve(load_experiment(path), (0, 0))
    held = SimulatedExecutor(tmp_path / "results").run([held_at(s, STOP_STEP) for s in specs])
    assert {r.status for r in held} == {"paused"}  # a store cut with curve.stop_step on
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")  # now off
    curve = store.load_summaries(result.folder).query("group == 'curve'")
    assert set(curve["status"]) == {"finished"} and set(curve["run_id"]) >= {
        s.run_id for s in specs
    }


@pytest.mark.usefixtures("unrendered_figures")
def test_walks_held_at_a_step_end_where_whole_walks_do_and_the_report_recomputes_them(
    tmp_path: Path,
) -> None:
    reports, paths = {}, {}
    for name, hold in (
        ("whole", {}),
        ("held", {"walk_step": STOP_STEP, "walk_margin_within": 0.04}),
    ):
        (tmp_path / name).mkdir()
        path = _experiment(tmp_path / name, {"layernorm": 0.004, "rmsnorm": 0.008})
        doc = yaml.safe_load(path.read_text())
        doc["max_lr"] = {"seeds": [0, 1], "within": 0.05, "lr_max": 10.0, **hold}
        path.write_text(yaml.safe_dump(doc))
        paths[name] = path
        reports[name] = run_experiment(path, tmp_path / name / "r", tmp_path / name / "p")
    held = reports["held"]
    table = pd.read_csv(held.report_dir / "usable_lr.csv")
    pd.testing.assert_frame_equal(table, pd.read_csv(reports["whole"].report_dir / "usable_lr.csv"))
    runs = store.load_summaries(held.folder).set_index("run_id")
    walked = store.read_manifest(held.folder).group_ids("usable")
    stopped = runs.loc[sorted(walked)].query("status == 'pruned'")
    assert len(stopped) and (stopped["steps"] == STOP_STEP).all()
    evals = pd.read_csv(held.report_dir / "usable_evals.csv")
    assert set(evals["run_id"]) == walked
    at = evals[evals["step"] == STOP_STEP].set_index("run_id")["val_loss"]
    for _, run in stopped.iterrows():  # decided within: its gap over its start below 0.05 - 0.04
        mine = runs.loc[sorted(walked)].query(f"variant == '{run['variant']}'")
        start = mine[mine["seed"] == run["seed"]]["lr"].idxmin()
        assert at[run.name] - at[start] < 0.01
    text = (held.report_dir / "report.md").read_text()
    assert f"Hold (`max_lr.walk_step` {STOP_STEP})" in text
    again = run_experiment(paths["held"], tmp_path / "held/r", tmp_path / "again")
    assert store.load_summaries(again.folder).equals(store.load_summaries(held.folder))
