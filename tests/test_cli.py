"""The command line: exit codes, one-line errors, validate's plan, run + report end to end."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO, ablate_process, write_experiment

from ablate.cli import main
from ablate.commands.validate import cost_line, estimate_lines, expected_steps_line
from ablate.core.folders import ExperimentFolder
from ablate.core.jobs import read_jobs
from ablate.core.load import load_experiment
from ablate.core.overrides import difference_lines
from ablate.core.stability import criterion_text
from ablate.core.stages import planned_groups
from ablate.launch.estimate import describe_plan
from ablate.launch.expect import simulate_design, simulated_lines
from ablate.launch.launchers import resources_for
from ablate.launch.scale import resolve_sizes
from ablate.launch.stored import stored_counts, stored_of_plan
from ablate.report.cost import secondary_sections
from ablate.report.times import committed_time, read_times, time_line

# how long a subprocess may take: generous, so that a machine running something else passes too
# (each wait ends as soon as the event it waits for happens)
PATIENCE_S = 1800


def test_validate_prints_the_plan_with_cost(
    tiny_experiment: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))  # no step time stored yet
    experiment = load_experiment(tiny_experiment)
    unpriced = describe_plan(experiment, 1, 1, time_now=False)
    assert unpriced.untimed == 2 and unpriced.table["step_time_ms"].isna().all()
    assert main(["validate", str(tiny_experiment)]) == 0
    assert estimate_lines(unpriced, experiment, None) == _printed(capsys, "cost: ")
    assert main(["validate", str(tiny_experiment), "--time", "--simulate"]) == 0
    out = capsys.readouterr().out
    design = simulate_design(load_experiment(tiny_experiment, "simulate"))
    assert all(line in out.splitlines() for line in simulated_lines(design))
    priced = describe_plan(experiment, 1, 1, None, design.counts, time_now=False)  # as stored
    assert (priced.untimed, priced.runs, priced.expected_runs, priced.timed) == (0, 4, 4, {})
    assert priced.expected_run_steps == {"main": 4 * 20}
    assert expected_steps_line(priced) in out.splitlines()  # run-steps expected, per stage
    assert list(priced.table["variant"]) == ["layernorm", "rmsnorm"]
    assert (priced.table["step_time_ms"] > 0).all() and (priced.table["parameters"] > 0).all()
    assert planned_groups(experiment) == ["main"]  # only the stages the file has
    assert main(["validate", str(tiny_experiment)]) == 0  # priced from the stored step time
    out = capsys.readouterr().out
    res = resources_for(experiment.base.runtime, 4)  # validate's workers x threads
    stored = describe_plan(experiment, res.workers, res.threads, time_now=False)
    assert stored.expected_runs is None  # the simulator runs only when asked
    assert all(line in out.splitlines() for line in estimate_lines(stored, experiment, None))
    assert stored.run_steps == {"main": 4 * 20}  # 4 runs of 20 steps
    assert cost_line(stored, experiment) in out.splitlines()
    assert committed_time(experiment.path, experiment.name) is None  # outside the checkout
    assert all(line in out.splitlines() for line in difference_lines(experiment))
    # the wording, once: a key the variant does not name is marked as following its kind
    assert "model.norm.bias: True -> False (follows model.norm.kind)" in out


def _printed(capsys: pytest.CaptureFixture, start: str) -> list[str]:
    """The lines the last command printed that start with ``start``."""
    return [line for line in capsys.readouterr().out.splitlines() if line.startswith(start)]


def test_validate_quotes_the_committed_time_of_a_committed_experiment(
    capsys: pytest.CaptureFixture,
) -> None:
    assert main(["validate", str(REPO / "experiments" / "smoke.yaml")]) == 0
    out = capsys.readouterr().out
    row = committed_time(REPO / "experiments" / "smoke.yaml", "smoke")
    assert row is not None and row.equals(read_times(REPO / "reports").loc["smoke"])
    assert time_line(row) in out.splitlines()


def test_validate_estimates_every_size_of_a_scale_section(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_experiment(
        tmp_path / "s.yaml", scale={"sizes": [{"d_model": 16}, {"d_model": 32, "n_heads": 4}]}
    )
    assert main(["validate", str(path), "--time"]) == 0
    out = capsys.readouterr().out
    sizes = [(s.label, s.n_params, s.tokens) for s in resolve_sizes(load_experiment(path))]
    assert sizes == [("d16", 7_664, 1_280), ("d32", 21_472, 1_280)]
    assert out.count("at most:") == 2 and "at most, all sizes:" in out
    assert "expected wall time" not in out  # the simulator previews one size


def test_a_scale_folder_reports_its_sizes_and_search_refuses_a_scale_file(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_experiment(
        tmp_path / "s.yaml", scale={"sizes": [{"d_model": 16}, {"d_model": 32, "n_heads": 4}]}
    )
    assert main(["search", str(path)]) == 2
    assert "has a scale: section; run it with ablate run" in capsys.readouterr().err
    folder = tmp_path / "results" / "tiny"
    folder.mkdir(parents=True)
    sizes = [{"label": x, "experiment": f"tiny.{x}", "tokens": 1280} for x in ("d16", "d32")]
    manifest = {"name": "tiny", "variants": ["layernorm", "rmsnorm"], "seeds": [0, 1]}
    (folder / "scale.json").write_text(json.dumps({**manifest, "sizes": sizes}))
    assert main(["report", str(folder), "--out", str(tmp_path / "r")]) == 0
    assert "**Incomplete:** nothing stored yet for d16, d32." in capsys.readouterr().out
    assert (tmp_path / "r" / "report.md").is_file()


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("model: {norm: {kind: groupnorm}}\n", "model.norm.kind"),
        ("train: {batch_size: -1}\n", "train.batch_size"),
        ("nonsense_key: 1\n", "nonsense_key: unknown key"),
        ("data: {source: tokens_file, path: missing.bin}\n", "file not found"),
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, text: str, fragment: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    results, reports = tmp_path / "results", tmp_path / "reports"
    code = main(["run", str(path), "--results-dir", str(results), "--report-dir", str(reports)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and fragment in err and len(err.splitlines()) == 1 and str(path) in err
    assert not results.exists() and not reports.exists()


def test_bad_data_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "ids.bin").write_bytes(b"\x01")  # odd size: not uint16
    path = write_experiment(tmp_path / "e.yaml", data={"source": "tokens_file", "path": "ids.bin"})
    assert main(["run", str(path), "--results-dir", str(tmp_path / "r")]) == 2
    assert "raw ids of uint16 (2 bytes each) but 1 bytes" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def _shard_set(folder: Path, top: int = 200) -> None:
    """Three llm.c shards of 1,000 ids below ``top`` (train_*.bin) and a validation shard."""
    from ablate.training.token_formats import write_shard

    rng = np.random.default_rng(0)
    for k in range(3):
        write_shard(folder / f"train_{k:06d}.bin", rng.integers(0, 200, 1000))
    write_shard(folder / "val_000000.bin", rng.integers(0, top, 500))


def _truncate(path: Path) -> None:
    with path.open("r+b") as handle:
        handle.truncate(path.stat().st_size - 2)


SHARD_MISTAKES = {  # what is wrong -> (what to do to the set, data keys, what the line says)
    "id over the vocabulary": (lambda d: _shard_set(d, top=900), {}, "token id"),
    "truncated shard": (lambda d: _truncate(d / "train_000001.bin"), {}, "truncated"),
    "empty shard": (lambda d: (d / "train_000003.bin").write_bytes(b""), {}, "empty"),
    "validation is a training shard": (
        lambda d: None,
        {"val_path": "train_000002.bin"},
        "is both a training and a validation file",
    ),
    "validation copies a training shard": (
        lambda d: (d / "val_000000.bin").write_bytes((d / "train_000000.bin").read_bytes()),
        {},
        "holds the same ids as training file",
    ),
    "too few ids for the budget": (
        lambda d: None,
        {"path": "train_000000.bin"},
        "training ids 1.34 times over (epochs)",
    ),
}


@pytest.mark.parametrize("mistake", list(SHARD_MISTAKES))
def test_a_shard_set_mistake_exits_2_with_one_line_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, mistake: str
) -> None:
    _shard_set(tmp_path)
    spoil, keys, fragment = SHARD_MISTAKES[mistake]
    spoil(tmp_path)
    data = {"source": "tokens_file", "path": "train_*.bin", "val_path": "val_000000.bin"}
    data.update(keys, vocab_size=256)
    path = write_experiment(tmp_path / "e.yaml", data=data)
    args = ["--results-dir", str(tmp_path / "r"), "--report-dir", str(tmp_path / "rep")]
    if mistake == "too few ids for the budget":
        args += ["--set", "train.tokens=1344"]  # 21 steps of 64 ids: 1,344 of 1,000
    assert main(["run", str(path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert fragment in err and len(err.splitlines()) == 1 and str(path) in err
    assert not (tmp_path / "r").exists() and not (tmp_path / "rep").exists()


def test_missing_experiment_file_and_results_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 2
    assert main(["report", str(tmp_path / "nope")]) == 2
    assert main(["run", str(tmp_path / "nope.yaml"), "--workers", "0"]) == 2
    err = capsys.readouterr().err
    assert "nope.yaml: file not found" in err and "results folder not found" in err


@pytest.mark.slow
def test_smoke_experiment_end_to_end_on_the_simulator(tmp_path: Path) -> None:
    """Every stage of experiments/smoke.yaml, its report and its cached rerun, through the CLI
    on the simulator (training itself: tests/training, the pipeline's model-source tests)."""
    smoke = str(REPO / "experiments" / "smoke.yaml")
    journal = ("--storage", f"journal:{tmp_path / 'studies.log'}")  # SQLite's commits: seconds
    proc = ablate_process("run", smoke, "--backend", "simulate", *journal, cwd=tmp_path)
    out, _ = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 0, out
    report_dir = tmp_path / "reports" / "smoke-simulated"
    for name in (
        "report.md",
        "variants.csv",
        "runs.csv",
        "loss_curves.png",
        "lr_sweep.png",
        "sweep.csv",
        "lr_sensitivity.csv",
        "max_lr.csv",
        "max_lr_seeds.csv",
        "max_lr_divergence_seeds.csv",
        "stability_map.png",
    ):
        assert (report_dir / name).stat().st_size > 0, name
    exp_dir = tmp_path / "results" / "smoke-simulated"
    summaries = [json.loads(p.read_text()) for p in exp_dir.glob("*/summary.json")]
    main = [s for s in summaries if s["group"] == "main"]
    assert len(main) == 4 and all(s["status"] == "finished" and s["stable"] for s in main)
    groups = {s["group"] for s in summaries}  # a cross-over or walk run may be one stored before
    assert {"main", "sweep", "search", "tuned", "usable", "max_lr"} <= groups
    assert groups <= {"main", "sweep", "search", "tuned", "crossover", "usable", "max_lr"}
    assert len([s for s in summaries if s["group"] == "sweep"]) == 8  # 4 lrs x 2 variants
    assert {s["seed"] for s in summaries if s["group"] == "search"} == {2}  # not a final seed
    assert len([s for s in summaries if s["group"] == "tuned"]) == 4

    studies = json.loads((exp_dir / "stability.json").read_text())
    for variant in ("layernorm", "rmsnorm"):
        found = studies["max_lr"][variant]
        for bound in found["seed_bounds"]:  # every seed bracketed to one lattice step
            ratio = bound["first_unstable"] / bound["last_stable"]
            assert ratio == pytest.approx(2 ** (1 / 8))
        assert found["boundary"]["low"] < found["boundary"]["value"] < found["boundary"]["high"]
        assert found["runs_total"] == len(found["probes"])
        assert studies["search"][variant]["complete"] + studies["search"][variant]["pruned"] == 4
    text = (report_dir / "report.md").read_text()
    written = {p.name for p in report_dir.iterdir()}  # the max-LR, sweep and tuned sections'
    assert {"max_lr.csv", "lr_sensitivity.csv", "sweep.csv", "variants_tuned.csv"} <= written
    assert criterion_text(load_experiment(smoke).base.train.stability) in text
    assert text.index("## Answer") < text.index("## Analysis plan") < text.index("## Evidence")

    _docs_notebook_snippet_matches_the_report(exp_dir, report_dir)

    jobs = len(_jobs(exp_dir))
    again = ablate_process("run", smoke, "--backend", "simulate", *journal, cwd=tmp_path)
    out, _ = again.communicate(timeout=PATIENCE_S)
    assert again.returncode == 0 and len(_jobs(exp_dir)) == jobs, out  # it trained nothing
    after = {p.parent.name for p in exp_dir.glob("*/summary.json")}
    assert after == {s["run_id"] for s in summaries}  # nothing was drawn again


def _docs_notebook_snippet_matches_the_report(
    exp_dir: Path,
    report_dir: Path,
    groups: frozenset[str] = frozenset(  # noqa: B008
        {"main", "sweep", "search", "tuned", "crossover", "usable", "max_lr"}
    ),
) -> None:
    """Run the docs' pandas snippet on a stored experiment whose runs are of ``groups`` and
    compare what it computes with the report's tables."""
    docs = (REPO / "docs" / "report.md").read_text(encoding="utf-8")
    block = docs.split("For notebooks, everything stored as pandas frames:")[1]
    code = block.split("```python\n")[1].split("```")[0]
    assert 'load_results("results/ln_vs_rms")' in code
    scope: dict = {}
    exec(code.replace("results/ln_vs_rms", str(exp_dir)), scope)  # noqa: S102
    shared = pd.read_csv(report_dir / "variants.csv").set_index("variant")
    tables = [("main", shared)]
    if "tuned" in groups:
        tuned = pd.read_csv(report_dir / "variants_tuned.csv").set_index("variant")
        tables.append(("tuned", tuned))
    for name, table in tables:
        stats = scope[name].groupby("variant")["final_val_loss"].agg(["mean", "std"])
        assert stats["mean"].to_dict() == pytest.approx(table["final_val_loss_mean"].to_dict())
        assert stats["std"].to_dict() == pytest.approx(table["final_val_loss_std"].to_dict())
    last = scope["curves"].pivot_table(index="step", columns="variant", values="val_loss")
    assert last.iloc[-1].to_dict() == pytest.approx(shared["final_val_loss_mean"].to_dict())
    import ablate

    answer = pd.read_csv(report_dir / "answer.csv")  # the Answer's verdicts, typed
    found = ablate.load_answer(exp_dir).found
    assert [f.verdict.word.value for f in found] == list(answer["verdict"])
    assert [f.estimate.value for f in found] == pytest.approx(list(answer["estimate"]))
    found = set(scope["results"].metrics["group"])  # a cross-over run may be stored as another
    assert found <= groups and groups - {"crossover"} <= found


def _long_experiment(tmp_path: Path, steps: int) -> Path:
    """The tiny experiment with ``steps`` steps per run and one evaluation in the middle."""
    train = {
        "batch_size": 4,
        "tokens": 4 * 16 * steps,
        "lr": 3e-3,
        "warmup_steps": 3,
        "eval_interval": steps // 2,
        "eval_batches": 2,
    }
    return write_experiment(tmp_path / "e.yaml", train=train)


def _wait_until(condition, what: str, timeout: float = PATIENCE_S) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def _stored_and_left(
    path: Path, results: Path
) -> tuple[dict[str, int], dict[tuple[str, ...], int], int]:
    """What ``validate --results-dir`` counts of the file at ``path``: the stored runs per stage
    (all 4 planned are main), the planned runs that retrain a stored twin by the keys they
    differ in, and the runs left to train."""
    experiment = load_experiment(path)
    counts = stored_counts(experiment, results)
    held = stored_of_plan(experiment, results, counts)
    assert held.planned == {"main": 4}
    left = describe_plan(experiment, 1, 1, counts, time_now=False).runs
    return held.held, held.retrained, left


@pytest.mark.usefixtures("unrendered_figures")
def test_after_a_config_change_load_results_gives_the_reports_numbers(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_experiment(tmp_path / "tiny.yaml", runtime={"backend": "simulate"})
    args = ["--results-dir", str(tmp_path / "results"), "--report-dir", str(tmp_path / "reports")]
    assert main(["run", str(path), *args]) == 0
    assert main(["validate", str(path), *args[:2]]) == 0
    assert _stored_and_left(path, tmp_path / "results") == ({"main": 4}, {}, 0)
    changed = yaml.safe_load(path.read_text())
    changed["train"]["eval_batches"] = 4  # a new configuration: 4 new runs beside the old 4
    path.write_text(yaml.safe_dump(changed))
    assert main(["validate", str(path), *args[:2]]) == 0
    retrained = {("train.eval_batches",): 4}
    assert _stored_and_left(path, tmp_path / "results") == ({"main": 0}, retrained, 4)
    assert main(["run", str(path), *args]) == 0
    exp_dir, report_dir = tmp_path / "results" / "tiny", tmp_path / "reports" / "tiny"
    import ablate

    every = ablate.load_results(exp_dir, all_runs=True).runs
    assert len(every) == 8 and every["planned"].sum() == 4
    assert len(ablate.load_results(exp_dir).runs) == 4
    _docs_notebook_snippet_matches_the_report(exp_dir, report_dir, frozenset({"main"}))


def test_keys_set_on_the_command_line_train_as_an_edited_file_and_are_recorded(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    path = write_experiment(tmp_path / "tiny.yaml", runtime={"backend": "simulate"})
    args = ["--results-dir", str(tmp_path / "results"), "--report-dir", str(tmp_path / "reports")]
    setting = ["--set", "train.eval_batches=4", "--seeds", "2,3"]
    assert main(["validate", str(path), *setting]) == 0
    assert "seeds [2, 3]" in capsys.readouterr().out
    assert main(["run", str(path), *args, *setting]) == 0
    manifest = json.loads((tmp_path / "results" / "tiny" / "experiment.json").read_text())
    assert manifest["command_line"] == {"train.eval_batches": 4, "seeds": [2, 3]}
    edited = yaml.safe_load(path.read_text())
    edited["train"]["eval_batches"], edited["seeds"] = 4, [2, 3]
    path.write_text(yaml.safe_dump(edited))
    assert main(["validate", str(path), *args[:2]]) == 0  # the edit's runs are those stored
    assert _stored_and_left(path, tmp_path / "results") == ({"main": 4}, {}, 0)
    assert main(["run", str(path), "--seeds", "0,x"]) == 2
    assert "--seeds: '0,x': give comma-separated integers" in capsys.readouterr().err


@pytest.mark.slow
def test_ctrl_c_marks_the_run_interrupted_and_exits_130(tmp_path: Path) -> None:
    """One worker: the run trains in the ablate process itself (in a pool's workers:
    tests/launch/test_workers.py, at seeded moments)."""
    workers = "1"
    path = _long_experiment(tmp_path, 20000)
    exp_dir = tmp_path / "results" / "tiny"
    proc = ablate_process(
        "run", str(path), "--workers", workers, cwd=tmp_path, start_new_session=True
    )
    # fit has begun in every worker once its logger wrote hparams.yaml; a fixed wait from the
    # claim could end, on a loaded machine, while a worker was still importing Lightning
    _wait_until(
        lambda: len(list(exp_dir.glob("*/logs/csv/hparams.yaml"))) == int(workers),
        "training to begin in every worker",
    )
    time.sleep(1.0)  # a few hundred steps
    os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C reaches the whole process group
    out, _ = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 130, out
    summaries = [json.loads(p.read_text()) for p in exp_dir.glob("*/summary.json")]
    assert len(summaries) == int(workers), out  # no further run was started after Ctrl-C
    assert all(s["status"] == "interrupted" and 0 < s["steps"] < 20000 for s in summaries)
    assert not list(exp_dir.glob("*/status.json"))


@pytest.mark.slow
def test_ctrl_c_during_a_round_of_parallel_trials_exits_130_and_fails_the_round(
    tmp_path: Path,
) -> None:
    """Both trials of a round train in the pool when Ctrl-C comes: the runs are stored as
    interrupted and the trials failed, as study.optimize fails its one, so a rerun does not
    wait for their heartbeats to go stale before it searches on."""
    import optuna

    steps = 20000
    search = {"n_trials": 2, "parallel_trials": 2, "pruner": "none", "lr_min": 1e-3}
    path = write_experiment(
        tmp_path / "e.yaml",
        train={"batch_size": 4, "tokens": 4 * 16 * steps, "eval_interval": steps // 2},
        variants={"layernorm": {"model.norm.kind": "layernorm"}},
        search={**search, "lr_max": 1e-2, "warmup_max": 5},
    )
    exp_dir = tmp_path / "results" / "tiny"
    proc = ablate_process("search", str(path), cwd=tmp_path, start_new_session=True)
    _wait_until(
        lambda: len(list(exp_dir.glob("*/logs/csv/hparams.yaml"))) == 2,
        "both trials to train",
    )
    time.sleep(1.0)
    os.killpg(proc.pid, signal.SIGINT)
    out, _ = proc.communicate(timeout=PATIENCE_S)
    assert proc.returncode == 130, out
    summaries = [json.loads(p.read_text()) for p in exp_dir.glob("*/summary.json")]
    assert [s["status"] for s in summaries] == ["interrupted"] * 2, out
    storage = f"sqlite:///{exp_dir / 'optuna.db'}"
    study = optuna.load_study(study_name="tiny.layernorm.search", storage=storage)
    assert [t.state.name for t in study.trials] == ["FAIL", "FAIL"]


@pytest.mark.slow
def test_convert_section_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    import pandas as pd

    from ablate.core.plan import plan_convert
    from ablate.launch.execute import ready_conversions

    path = write_experiment(
        tmp_path / "conv.yaml",
        name="conv",
        convert={"source": "layernorm", "tokens": 4 * 16 * 10, "eval_interval": 5},
    )
    args = ["run", str(path), "--results-dir", str(tmp_path / "r"), "--report-dir"]
    assert main([*args, str(tmp_path / "rep"), "--workers", "1"]) == 0
    exp_dir = tmp_path / "r" / "conv"
    summaries = [json.loads(p.read_text()) for p in exp_dir.glob("*/summary.json")]
    by = {(s["group"], s["variant"], s["seed"]): s for s in summaries}
    for seed in (0, 1):
        source = by[("main", "layernorm", seed)]
        control, converted = by[("convert", "continued", seed)], by[("convert", "converted", seed)]
        assert (exp_dir / source["run_id"] / "model.pt").is_file()
        for run in (control, converted):
            assert run["status"] == "finished" and run["steps"] == 10
            assert run["source_run_id"] == source["run_id"]
            assert run["loss_before_swap"] == pytest.approx(source["final_val_loss"], abs=1e-5)
        assert control["loss_after_swap"] == control["loss_before_swap"]
        assert converted["loss_after_swap"] != converted["loss_before_swap"]
        assert converted["params_folded"] == ["blocks.0.norm_attn.bias", "blocks.0.norm_mlp.bias"]
        assert converted["params_dropped"] == ["norm_f.bias"]
        assert control["final_val_loss"] < control["loss_before_swap"]  # training went on
    report = tmp_path / "rep" / "conv"
    text = (report / "report.md").read_text()
    assert "## Checkpoint conversion" in text and (report / "convert.png").stat().st_size > 10_000
    table = pd.read_csv(report / "convert.csv").set_index("variant")
    jumps = [
        by[("convert", "converted", s)]["loss_after_swap"]
        - by[("convert", "converted", s)]["loss_before_swap"]
        for s in (0, 1)
    ]
    assert table.loc["converted", "jump_mean"] == pytest.approx(sum(jumps) / 2, abs=1e-9)
    diffs = [
        by[("convert", "converted", s)]["final_val_loss"]
        - by[("convert", "continued", s)]["final_val_loss"]
        for s in (0, 1)
    ]
    assert table.loc["converted", "diff_vs_continued"] == pytest.approx(sum(diffs) / 2, abs=1e-9)

    specs = plan_convert(load_experiment(path))
    assert {s.run_id for s in specs} == {
        by[("convert", v, s)]["run_id"] for v in ("continued", "converted") for s in (0, 1)
    }
    (exp_dir / by[("main", "layernorm", 1)]["run_id"] / "model.pt").unlink()
    ready, waiting = ready_conversions(specs, ExperimentFolder(exp_dir))
    assert [s.seed for s in ready] == [0, 0] and len(waiting) == 2
    assert all("has no model.pt" in why for _, why in waiting)


def _finished_one_and_began_another(exp_dir: Path, finished: int, moment: float) -> bool:
    """Whether more than ``finished`` runs have a summary and a run without one began (wrote
    its status.json) after ``moment``."""
    began = any(
        p.stat().st_mtime > moment and not (p.parent / "summary.json").exists()
        for p in exp_dir.glob("*/status.json")
    )
    return began and len(list(exp_dir.glob("*/summary.json"))) > finished


def _losses(exp_dir: Path) -> dict[str, tuple]:
    """run id -> (status, final val loss, every train loss): what must not depend on kills."""
    import pandas as pd

    found = {}
    for summary_path in exp_dir.glob("*/summary.json"):
        summary = json.loads(summary_path.read_text())
        metrics = pd.read_csv(summary_path.parent / "metrics.csv")
        found[summary["run_id"]] = (
            summary["status"],
            summary["final_val_loss"],
            tuple(metrics["train_loss"]),
        )
    return found


def _no_debris(exp_dir: Path) -> None:
    assert not list(exp_dir.rglob("*.tmp")) and not list(exp_dir.glob("*/status.json"))
    assert not list((exp_dir / ".claims").glob("*"))
    for path in exp_dir.rglob("*.json"):
        json.loads(path.read_text())  # every JSON file parses: none is half written


@pytest.mark.slow
@pytest.mark.usefixtures("unrendered_figures")  # the reference's report: its losses are checked
def test_sigkill_at_random_points_then_rerun_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    import random

    path = _long_experiment(tmp_path, 150)
    # One thread per run in every invocation: with the default, a rerun left with one run gives
    # it both cores, and two threads sum in another order (a loss equal to ~1e-7, not bitwise).
    one_thread = ("--threads", "1")
    reference = tmp_path / "reference"  # uninterrupted, serial, in this process
    args = ["--results-dir", str(reference), "--report-dir", str(tmp_path / "r"), *one_thread]
    assert main(["run", str(path), "--workers", "1", *args]) == 0
    expected = _losses(reference / "tiny")
    assert len(expected) == 4

    rng = random.Random(7)
    killed = tmp_path / "killed"
    exp_dir = killed / "tiny"
    kills = 0
    for attempt in range(2):  # a kill each: one after a run, one at a random moment
        started = time.time()
        proc = ablate_process(
            "run",
            str(path),
            "--results-dir",
            str(killed),
            *one_thread,
            cwd=tmp_path,
            start_new_session=True,
        )
        if attempt == 0:  # the first kill lands once a run has finished and the next begun
            _wait_until(
                partial(_finished_one_and_began_another, exp_dir, 0, started),
                "a run finished and the next one started",
            )
        else:
            time.sleep(rng.uniform(3.0, 6.0))  # start-up takes ~3 s; each run ~1 s
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        if attempt == 0:
            kept = {p.parent.name: p.read_text() for p in exp_dir.glob("*/summary.json")}
            cut_short = [p.parent.name for p in exp_dir.glob("*/status.json")]
            assert kept and cut_short and not set(kept) & set(cut_short)
    assert kills >= 2
    print(f"kills={kills} of 2 attempts")  # shown with pytest -s
    done, jobs = len(list(exp_dir.glob("*/summary.json"))), len(_jobs(exp_dir))
    rerun = ablate_process(
        "run", str(path), "--results-dir", str(killed), *one_thread, cwd=tmp_path
    )
    out, _ = rerun.communicate(timeout=PATIENCE_S)
    assert rerun.returncode == 0, out
    assert _jobs(exp_dir)["runs_trained"].iloc[jobs:].sum() == 4 - done
    after = {p.parent.name: p.read_text() for p in exp_dir.glob("*/summary.json")}
    for run_id, text in kept.items():
        assert after[run_id] == text  # kept, never redone
    assert all(json.loads(after[run_id])["steps"] == 150 for run_id in cut_short)  # redone in full
    assert _losses(exp_dir) == expected  # same runs, bitwise the same losses
    _no_debris(exp_dir)
    cached = _cached_rerun(path, "--results-dir", str(killed), *one_thread)
    assert len(_jobs(exp_dir)) == jobs + (done < 4), cached  # it trained nothing
    assert "lightning imported: False" in cached, cached  # a finished experiment trains nothing


@pytest.mark.slow
def test_two_concurrent_runs_share_the_work_and_run_each_run_once(tmp_path: Path) -> None:
    """Claims, on the simulator: each run takes 2 s, so both processes are at work at once."""
    runtime = {"backend": "simulate", "simulate": {"pace_s": 2.0}}
    path = write_experiment(tmp_path / "e.yaml", runtime=runtime)
    first, second = (
        ablate_process("run", str(path), "--workers", "1", cwd=tmp_path) for _ in range(2)
    )
    outputs = [p.communicate(timeout=PATIENCE_S)[0] for p in (first, second)]
    exp_dir = tmp_path / "results" / "tiny"
    summaries = [json.loads(p.read_text()) for p in exp_dir.glob("*/summary.json")]
    assert len(summaries) == 4 and all(s["status"] == "finished" for s in summaries)
    said = [re.search(r"simulated (\d+) runs", out) for out in outputs]
    ran = [int(found.group(1)) if found else 0 for found in said]  # 0: it found all done
    assert sum(ran) == 4 and min(ran) >= 1, outputs  # each run once, by one of the two
    owners = {json.loads(p.read_text())["pid"] for p in exp_dir.glob("*/env.json")}
    assert owners == {first.pid, second.pid}, outputs
    _no_debris(exp_dir)


def _jobs(exp_dir: Path) -> pd.DataFrame:
    """The records of the ``ablate run`` invocations that trained runs of ``exp_dir``'s
    experiment (or were cut short): one that trained nothing leaves none."""
    return read_jobs(ExperimentFolder(exp_dir).jobs)


def _cached_rerun(path: Path, *args: str) -> str:
    """``ablate run`` of a finished experiment in one process; its output ends with whether
    Lightning was imported."""
    rerun = (
        "import sys; from ablate.cli import main; code = main(sys.argv[1:]); "
        "print('lightning imported:', 'lightning' in sys.modules); sys.exit(code)"
    )
    again = subprocess.run(
        [sys.executable, "-c", rerun, "run", str(path), "--workers", "1", *args],
        cwd=path.parent,
        capture_output=True,
        text=True,
        timeout=PATIENCE_S,
    )
    assert again.returncode == 0, again.stdout + again.stderr
    return again.stdout + again.stderr


@pytest.mark.slow
def test_workers_die_with_a_killed_ablate_process(tmp_path: Path) -> None:
    from ablate.core.store import process_alive

    path = _long_experiment(tmp_path, 20000)
    exp_dir = tmp_path / "results" / "tiny"
    proc = ablate_process("run", str(path), "--workers", "2", cwd=tmp_path, start_new_session=True)
    _wait_until(lambda: len(list(exp_dir.glob("*/status.json"))) == 2, "two runs to start")
    workers = [json.loads(p.read_text())["pid"] for p in exp_dir.glob("*/status.json")]
    assert all(process_alive(pid) for pid in workers)
    proc.kill()  # SIGKILL to the ablate process alone, not its group
    proc.wait()
    _wait_until(lambda: not any(process_alive(pid) for pid in workers), "workers to exit", 30)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # python's resource tracker, if still there
    except ProcessLookupError:
        pass


def test_version_is_the_installed_one(capsys: pytest.CaptureFixture) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"ablate {version('ablate')}"


def test_a_swallowed_ctrl_c_re_raised_inside_the_hook_prints_no_traceback(tmp_path: Path) -> None:
    """Python reports a swallowed KeyboardInterrupt to the unraisable hook; re-raising it runs
    the SIGINT handler at once, inside the hook, whose exception Python would print as a
    traceback (seen in CI when Ctrl-C came as a command ended): caught, and the command still
    ends with 130 (``pending``)."""
    script = tmp_path / "hook.py"
    script.write_text(
        "import types\n"
        "from ablate.cli import CtrlC\n"
        "with CtrlC() as c:\n"
        "    for _ in range(100):\n"
        "        c.on_unraisable(types.SimpleNamespace(exc_type=KeyboardInterrupt))\n"
        "    print('pending', c.pending)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True)
    assert (done.returncode, done.stdout.strip(), done.stderr) == (0, "pending True", "")


def test_a_clone_named_ablate_in_the_working_folder_does_not_shadow_the_package(
    tmp_path: Path,
) -> None:
    # the folder above a clone named ablate: Python finds the clone as a namespace package
    # there; make setup's editable install (compat mode) puts the real package ahead of it
    (tmp_path / "ablate").symlink_to(REPO)
    code = "import ablate; print(ablate.__file__, callable(ablate.load_results))"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [str(REPO / "ablate" / "__init__.py"), "True"]


def test_no_lightning_srun_hint_outside_a_slurm_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import warnings

    from lightning.fabric.plugins.environments import SLURMEnvironment

    from ablate.training.trainer import quiet_lightning

    srun = tmp_path / "srun"
    srun.write_text("#!/bin/sh\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    for name in ("SLURM_JOB_ID", "SLURM_NTASKS"):
        monkeypatch.delenv(name, raising=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_lightning()
        SLURMEnvironment._validate_srun_used()
    assert not [w for w in caught if "srun" in str(w.message)]
    monkeypatch.setenv("SLURM_JOB_ID", "7")  # inside a job the hint is Lightning's to give
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        quiet_lightning()
        SLURMEnvironment._validate_srun_used()
    assert [w for w in caught if "srun" in str(w.message)]


def test_validate_and_run_warn_about_a_variant_that_changes_more_than_the_norm(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    variants = {
        "layernorm": {"model.norm.kind": "layernorm"},
        "rmsnorm": {"model.norm.kind": "rmsnorm", "train.lr": 1e-2, "model.d_ff": 64},
    }
    path = write_experiment(tmp_path / "tiny.yaml", variants=variants)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "warning: rmsnorm differs from layernorm beyond the norm (model.d_ff, train.lr): "
        "not a pure norm comparison"
    ) in out


def test_a_full_store_is_one_line_on_stderr_and_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from ablate.launch import execute as module

    def full(spec, root, **_):  # noqa: ANN001, ANN202 - obtain's signature
        raise OSError(errno.ENOSPC, "No space left on device", str(root))

    monkeypatch.setattr(module, "obtain", full)
    path = write_experiment(tmp_path / "tiny.yaml")
    args = ["--results-dir", str(tmp_path / "r"), "--report-dir", str(tmp_path / "rep")]
    assert main(["run", str(path), "--workers", "1", *args]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ablate run: error: {tmp_path / 'r'}: a run")
    assert "No space left on device" in err[0]


@pytest.mark.usefixtures("unrendered_figures")
def test_primary_only_leaves_out_the_secondary_stages_and_keeps_the_primary_verdict(
    tmp_path: Path,
) -> None:
    doc = {
        "runtime": {"backend": "simulate"},
        "storage": f"journal:{tmp_path / 'studies.log'}",
        "search": {"n_trials": 3},
        "max_lr": {"seeds": [0], "within": 0.1},
    }
    path = write_experiment(tmp_path / "tiny.yaml", **doc)
    assert secondary_sections(load_experiment(path)) == ["max_lr"]
    results = ["--results-dir", str(tmp_path / "results")]
    assert main(["run", str(path), *results, "--report-dir", str(tmp_path / "full")]) == 0
    exp_dir = tmp_path / "results" / "tiny"
    jobs = len(_jobs(exp_dir))
    only = ["--report-dir", str(tmp_path / "only"), "--primary-only"]
    assert main(["run", str(path), *results, *only]) == 0
    assert len(_jobs(exp_dir)) == jobs  # every run it needs was stored: it trained none
    manifest = json.loads((exp_dir / "experiment.json").read_text())
    assert manifest["command_line"] == {"max_lr": None}
    assert {"usable", "max_lr"}.isdisjoint(manifest["stages"])
    full, primary = (pd.read_csv(tmp_path / d / "tiny" / "answer.csv") for d in ("full", "only"))
    lead = full[full["estimand"] == "quality at matched settings"].iloc[0]
    kept = primary[primary["estimand"] == lead["estimand"]].iloc[0]
    numbers = ["share", "level", "estimate", "low", "high", "seeds", "more_seeds"]
    assert kept[numbers].astype(float).tolist() == lead[numbers].astype(float).tolist()
    assert (kept["verdict"], kept["differs"]) == (lead["verdict"], lead["differs"])
    assert set(primary["estimand"]) < set(full["estimand"])  # no usable LR, no divergence edge
    cost = pd.read_csv(tmp_path / "only" / "tiny" / "cost.csv")
    assert {"usable", "max_lr"}.isdisjoint(cost["stage"])


def test_a_text_dataset_without_its_column_exits_2_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"body": ["hello world\n"] * 500}), tmp_path / "t.parquet")
    data = {"source": "text_dataset", "path": "*.parquet"}
    path = write_experiment(tmp_path / "e.yaml", data=data)
    args = ["--results-dir", str(tmp_path / "r"), "--report-dir", str(tmp_path / "rep")]
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    assert main(["run", str(path), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert "t.parquet: no column 'text' (data.text_column)" in err and len(err.splitlines()) == 1
    assert not (tmp_path / "r").exists() and not (tmp_path / "rep").exists()
    assert not list((tmp_path / "cache").rglob("*.bin"))  # nothing tokenized either
