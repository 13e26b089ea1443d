"""``ablate status``: each stage's runs counted as done, failed, running, queued or not started,
from the store (the Slurm jobs' states are tested against a real Slurm in test_slurm.py)."""

from __future__ import annotations

from pathlib import Path

from conftest import simulated_experiment

from ablate.cli import main
from ablate.core import store
from ablate.core.folders import read_json, write_json_atomic
from ablate.launch.pipeline import run_experiment
from ablate.launch.status import STATES, run_states, status_lines, status_table

SEARCH = {"n_trials": 3, "lr_min": 1e-3, "lr_max": 0.1, "warmup_max": 10}


def test_every_planned_and_trial_run_is_counted_in_its_stage(
    tmp_path: Path, unrendered_figures: None
) -> None:
    experiment = simulated_experiment(tmp_path, search=SEARCH)
    result = run_experiment(experiment, tmp_path / "results", tmp_path / "reports")
    states = run_states(result.folder)
    by_group = {g: [s.state for s in states if s.group == g] for g in {s.group for s in states}}
    assert by_group["main"] == ["done"] * 4
    assert by_group["search"] == ["done"] * 6  # 3 trials per variant, stored as runs
    assert by_group["tuned"] == ["done"] * 4
    assert status_lines(result.folder)[-1] == "nothing is running or queued"


def test_a_run_two_stages_use_counts_in_the_stage_that_trained_it(
    tmp_path: Path, unrendered_figures: None
) -> None:
    curve = {"lr_min": 1e-3, "lr_max": 3e-2}
    experiment = simulated_experiment(tmp_path, curve=curve, max_lr={"seeds": [0, 1]})
    result = run_experiment(experiment, tmp_path / "results", tmp_path / "reports")
    runs = store.load_summaries(result.folder).set_index("run_id")
    planned = store.read_manifest(result.folder).runs
    shared = {r.run_id for r in planned if r.group == "usable"} & {
        r.run_id for r in planned if r.group == "tuned"
    }
    assert shared  # the walks start at the tuned runs of the same seeds
    states = run_states(result.folder)
    assert {s.run_id: s.group for s in states} == runs["group"].to_dict()
    table = status_table(states).set_index("stage")
    assert table["done"].to_dict() == runs["group"].value_counts().to_dict()


def test_a_removed_summary_is_not_started_and_a_failed_run_is_failed(
    tmp_path: Path, unrendered_figures: None
) -> None:
    result = run_experiment(
        simulated_experiment(tmp_path), tmp_path / "results", tmp_path / "reports"
    )
    folder = result.folder
    first, second = (folder.run(spec.run_id) for spec in result.specs[:2])
    first.summary.unlink()
    failed = {**read_json(second.summary), "status": "failed", "error": "boom"}
    write_json_atomic(second.summary, failed)
    states = {s.run_id: s.state for s in run_states(result.folder)}
    assert states[result.specs[0].run_id] == "not started"
    assert states[result.specs[1].run_id] == "failed"
    assert sorted(states.values()).count("done") == 2
    main_runs = status_table(run_states(result.folder)).set_index("stage").loc["main"]
    assert main_runs[list(STATES)].tolist() == [2, 1, 0, 0, 0, 1]  # done ... not started


def test_status_of_a_folder_that_is_not_an_experiment_is_one_line_and_exit_2(
    tmp_path: Path, capsys
) -> None:
    assert main(["status", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip().startswith(f"ablate status: error: {tmp_path}:")


def test_an_interrupted_run_is_its_own_state_and_a_root_of_one_experiment_is_read(
    tmp_path: Path, unrendered_figures: None, capsys
) -> None:
    root = tmp_path / "results"
    result = run_experiment(simulated_experiment(tmp_path), root, tmp_path / "reports")
    run = result.folder.run(result.specs[0].run_id)
    write_json_atomic(run.summary, {**read_json(run.summary), "status": "interrupted"})
    states = {s.run_id: s.state for s in run_states(result.folder)}
    assert states[result.specs[0].run_id] == "interrupted"
    assert main(["status", str(root)]) == 0  # the root holds one experiment: that one
    assert capsys.readouterr().out == "".join(f"{line}\n" for line in status_lines(result.folder))
    main_runs = status_table(run_states(result.folder)).set_index("stage").loc["main"]
    assert main_runs[list(STATES)].tolist() == [3, 0, 1, 0, 0, 0]  # done ... not started
    (root / "other").mkdir()
    (root / "other" / "experiment.json").write_text("{}")
    assert main(["status", str(root)]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1  # one line naming both experiments to choose from
    assert str(result.folder.path) in err and str(root / "other") in err
