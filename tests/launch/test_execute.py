"""The executor: finished runs are skipped, incomplete ones redone, and the pool gives the serial
results."""

from __future__ import annotations

import io
import json
import os
from pathlib import Path

import pytest
from conftest import write_experiment
from rich.console import Console

from ablate.core.folders import ExperimentFolder, RunFolder
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec, plan_runs
from ablate.core.record import RunRecord
from ablate.launch.execute import Request, execute


def _folder(root: Path, spec: RunSpec) -> RunFolder:
    return ExperimentFolder.of(root, spec.experiment).run(spec.run_id)


def _console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, width=200), buffer


@pytest.mark.trains
def test_rerun_skips_finished_runs_and_redoes_incomplete_ones(
    tiny_experiment: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ablate.launch import execute as module

    specs = plan_runs(load_experiment(tiny_experiment))
    root = tmp_path / "results"
    console, _ = _console()
    first = execute(specs, root, workers=1, console=console)
    trained: list[str] = []  # the runs obtain is asked to train from here on
    train = module.obtain

    def obtain(spec: RunSpec, root: Path, **kwargs: object) -> RunRecord:
        trained.append(spec.run_id)
        return train(spec, root, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(module, "obtain", obtain)
    assert sorted(s.run_id for s in first) == sorted(s.run_id for s in specs)
    stamps = {s.run_id: _folder(root, s).summary.read_text() for s in specs}

    # simulate a run killed mid-way: its summary is gone, a half-written metrics file remains
    victim = specs[2]
    _folder(root, victim).summary.unlink()
    _folder(root, victim).metrics.write_text("step,train_loss\n1,5.5\n")
    console, _ = _console()
    second = execute(specs, root, workers=1, console=console)
    assert trained == [victim.run_id]  # the 3 runs done were skipped
    assert len(second) == 4
    for spec in specs:
        text = _folder(root, spec).summary.read_text()
        if spec is victim:
            redone = json.loads(text)
            assert redone["status"] == "finished" and redone["steps"] == 20
            assert redone["final_val_loss"] == json.loads(stamps[spec.run_id])["final_val_loss"]
        else:
            assert text == stamps[spec.run_id]  # untouched

    console, _ = _console()
    assert len(execute(specs, root, workers=1, console=console)) == 4
    assert trained == [victim.run_id]  # all 4 done: none trained again
    assert all(_folder(root, s).is_done() for s in specs)


@pytest.mark.trains
def test_process_pool_gives_the_same_results_as_serial(
    tiny_experiment: Path, tmp_path: Path
) -> None:
    specs = plan_runs(load_experiment(tiny_experiment))[:2]
    console, _ = _console()
    serial = execute(specs, tmp_path / "a", workers=1, threads=1, console=console)
    pooled = execute(specs, tmp_path / "b", workers=2, threads=1, console=console)
    by_id = {s.run_id: s.final_val_loss for s in serial}
    assert {s.run_id: s.final_val_loss for s in pooled} == by_id


def test_a_done_runs_claim_left_by_a_dead_process_is_removed_a_live_ones_kept(
    tmp_path: Path,
) -> None:
    import platform
    import subprocess

    from ablate.launch.execute import split_done
    from ablate.launch.simulator import SimulatedExecutor

    path = write_experiment(tmp_path / "e.yaml", runtime={"backend": "simulate"})
    specs = plan_runs(load_experiment(path))[:2]
    for spec in specs:
        SimulatedExecutor(tmp_path / "results").obtain(Request(spec))
    folder = ExperimentFolder.of(tmp_path / "results", "tiny")
    dead = subprocess.Popen(["true"])
    dead.wait()  # killed between storing its summary and releasing its claim
    live = subprocess.Popen(["sleep", "30"])
    try:
        for spec, pid in zip(specs, (dead.pid, live.pid), strict=True):
            claim = folder.claim(spec.run_id)
            claim.write_text(json.dumps({"pid": pid, "hostname": platform.node()}))
        done, pending = split_done(specs, tmp_path / "results")
        assert len(done) == 2 and not pending
        assert not folder.claim(specs[0].run_id).exists()  # dead holder: debris, removed
        assert folder.claim(specs[1].run_id).exists()  # a live holder is never overruled
    finally:
        live.kill()
        live.wait()


def test_a_full_store_stops_the_runs_and_keeps_those_finished(
    tiny_experiment: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from ablate.core import store
    from ablate.launch import execute as module

    specs = plan_runs(load_experiment(tiny_experiment))
    tried: list[str] = []
    full = OSError(errno.ENOSPC, "No space left on device", "the store")

    def obtain(spec: RunSpec, root: Path, **_: object) -> RunRecord:
        tried.append(spec.run_id)
        if len(tried) == 2:
            raise full
        return RunRecord.from_json(
            {"run_id": spec.run_id, "status": "finished", "wall_time_s": 1.0}
        )

    monkeypatch.setattr(module, "obtain", obtain)
    console, out = _console()
    root = tmp_path / "results"
    with pytest.raises(store.StoreFault, match=r"No space left on device .*stopped, no further"):
        execute(specs, root, workers=1, console=console)
    assert len(tried) == 2  # the third and fourth never started
    assert repr(full) in out.getvalue()  # the failed run's line names its error


def test_what_counts_as_a_fault_of_the_store() -> None:
    import errno

    from ablate.core.store import store_fault_cause

    enospc = store_fault_cause(OSError(errno.ENOSPC, "x", "/r/f"))
    assert enospc == f"{os.strerror(errno.ENOSPC)} (/r/f)"  # the OS's cause and the file
    erofs = store_fault_cause(OSError(errno.EROFS, "x"))
    assert erofs is not None and os.strerror(errno.EROFS) in erofs
    torch_short = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 58048")
    short = store_fault_cause(torch_short)
    assert short is not None and str(torch_short) in short
    try:
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError as inner:
            raise ValueError("wrapped") from inner
    except ValueError as outer:
        quota = store_fault_cause(outer)  # the cause found under the wrapping error
        assert quota is not None and os.strerror(errno.EDQUOT) in quota
    assert store_fault_cause(OSError(errno.ENOENT, "gone")) is None
    assert store_fault_cause(RuntimeError("CUDA out of memory")) is None


@pytest.mark.trains
def test_a_run_retrained_alone_gets_the_threads_and_bits_it_had_beside_others(
    tiny_experiment: Path, tmp_path: Path
) -> None:
    specs = [s for s in plan_runs(load_experiment(tiny_experiment)) if s.variant == "layernorm"]
    root = tmp_path / "results"
    console, _ = _console()
    execute(specs, root, console=console)  # two runs at once
    victim = _folder(root, specs[0])
    before = json.loads(victim.summary.read_text())
    threads = json.loads(victim.env.read_text())["torch_threads"]
    victim.summary.unlink()  # as after a Ctrl-C: this run alone is left to train
    execute(specs, root, console=console)
    after = json.loads(victim.summary.read_text())
    assert json.loads(victim.env.read_text())["torch_threads"] == threads == 1
    assert after["final_val_loss"] == before["final_val_loss"]  # bit for bit


@pytest.mark.trains
def test_obtain_all_trains_a_rounds_runs_side_by_side_with_their_bits_alone(
    tmp_path: Path,
) -> None:
    from conftest import tiny_config

    from ablate.launch.execute import LocalExecutor
    from ablate.launch.workers import torch_threads
    from ablate.training.run import execute_run

    specs = [RunSpec("tiny", "layernorm", seed, tiny_config(), group="search") for seed in (0, 1)]
    found = LocalExecutor(tmp_path / "pool", threads=1).obtain_all([Request(s) for s in specs])
    assert all(isinstance(record, RunRecord) for record in found)
    with torch_threads(1):
        alone = [execute_run(spec, tmp_path / "alone") for spec in specs]
    assert [r.final_val_loss for r in found] == [r.final_val_loss for r in alone]
    assert [r.run_id for r in found] == [s.run_id for s in specs]


@pytest.mark.trains
def test_obtain_all_of_one_worker_trains_a_round_here_one_after_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A study beside others that fill the cores (``workers`` 1) starts no pool of its own."""
    from conftest import tiny_config

    from ablate.launch import execute
    from ablate.launch.execute import LocalExecutor

    def no_pool(*args: object, **kwargs: object) -> None:
        raise AssertionError("a pool was started")

    monkeypatch.setattr(execute, "worker_pool", no_pool)
    specs = [RunSpec("tiny", "layernorm", seed, tiny_config(), group="search") for seed in (0, 1)]
    found = LocalExecutor(tmp_path, workers=1, threads=1).obtain_all([Request(s) for s in specs])
    assert [r.run_id for r in found] == [s.run_id for s in specs]
    assert all(isinstance(r, RunRecord) and r.status == "finished" for r in found)
