"""The executor: resources for the machine, skipping finished runs, redoing incomplete ones."""

from __future__ import annotations

import io
import json
from pathlib import Path

from rich.console import Console

from ablate import store
from ablate.config import load_experiment
from ablate.execute import choose_resources, execute, gpu_count, run_dir_of
from ablate.plan import plan_runs


def test_resources_divide_cores_among_workers() -> None:
    assert choose_resources(6, cores=2) == choose_resources(6, workers=2, cores=2)
    assert choose_resources(6, cores=2).threads == 1
    assert choose_resources(1, cores=8).workers == 1 and choose_resources(1, cores=8).threads == 8
    assert choose_resources(10, workers=3, cores=12).threads == 4
    assert choose_resources(10, workers=2, threads=5, cores=2).threads == 5


def test_runs_on_gpus_default_to_one_worker_per_gpu() -> None:
    assert choose_resources(6, cores=16, gpus=1) == choose_resources(6, workers=1, cores=16)
    assert choose_resources(6, cores=16, gpus=4).workers == 4
    assert choose_resources(6, cores=16, gpus=4).threads == 4
    assert gpu_count("cpu") == 0


def _console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=200), buffer


def test_rerun_skips_finished_runs_and_redoes_incomplete_ones(
    tiny_experiment: Path, tmp_path: Path
) -> None:
    specs = plan_runs(load_experiment(tiny_experiment))
    root = tmp_path / "results"
    console, _ = _console()
    first = execute(specs, root, workers=1, console=console)
    assert sorted(s["run_id"] for s in first) == sorted(s.run_id for s in specs)
    stamps = {s.run_id: (run_dir_of(s, root) / "summary.json").read_text() for s in specs}

    # simulate a run killed mid-way: its summary is gone, a half-written metrics file remains
    victim = specs[2]
    (run_dir_of(victim, root) / "summary.json").unlink()
    (run_dir_of(victim, root) / "metrics.csv").write_text("step,train_loss\n1,5.5\n")
    console, out = _console()
    second = execute(specs, root, workers=1, console=console)
    assert "3 of 4 runs already done" in out.getvalue()
    assert len(second) == 4
    for spec in specs:
        text = (run_dir_of(spec, root) / "summary.json").read_text()
        if spec is victim:
            redone = json.loads(text)
            assert redone["status"] == "finished" and redone["steps"] == 20
            assert redone["final_val_loss"] == json.loads(stamps[spec.run_id])["final_val_loss"]
        else:
            assert text == stamps[spec.run_id]  # untouched

    console, out = _console()
    execute(specs, root, workers=1, console=console)
    assert "4 of 4 runs already done" in out.getvalue()
    assert all(store.is_done(run_dir_of(s, root)) for s in specs)


def test_process_pool_gives_the_same_results_as_serial(
    tiny_experiment: Path, tmp_path: Path
) -> None:
    specs = plan_runs(load_experiment(tiny_experiment))[:2]
    console, _ = _console()
    serial = execute(specs, tmp_path / "a", workers=1, threads=1, console=console)
    pooled = execute(specs, tmp_path / "b", workers=2, threads=1, console=console)
    by_id = {s["run_id"]: s["final_val_loss"] for s in serial}
    assert {s["run_id"]: s["final_val_loss"] for s in pooled} == by_id
