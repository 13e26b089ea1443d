"""The results folder's layout and atomic writes; no module outside the store spells a file name."""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import replace
from pathlib import Path

import pytest
from conftest import REPO

from ablate.core import folders
from ablate.core.folders import ExperimentFolder, RunFolder
from ablate.core.record import RunRecord


def test_atomic_json_leaves_no_temporary_and_maps_nan_to_null(tmp_path: Path) -> None:
    path = tmp_path / "a" / "s.json"
    folders.write_json_atomic(path, {"x": math.nan, "y": [1.0, math.inf], "z": "ok"})
    assert json.loads(path.read_text()) == {"x": None, "y": [1.0, None], "z": "ok"}
    assert [p.name for p in path.parent.iterdir()] == ["s.json"]
    assert path.stat().st_mode & 0o777 == 0o666 & ~folders.current_umask()  # like open() would


def test_a_writer_that_fails_leaves_the_old_file_whole(tmp_path: Path) -> None:
    path = tmp_path / "model.bin"
    folders.write_atomic(path, lambda tmp: tmp.write_bytes(b"old"))

    def half_then_fail(tmp: Path) -> None:
        tmp.write_bytes(b"ne")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        folders.write_atomic(path, half_then_fail)
    assert path.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["model.bin"]


def test_a_run_is_done_only_with_a_final_status(tmp_path: Path) -> None:
    run = ExperimentFolder.of(tmp_path, "exp").run("r1")
    assert run.path == tmp_path / "exp" / "r1" and not run.is_run() and not run.is_done()
    folders.write_json_atomic(run.config, {"variant": "a"})
    folders.write_json_atomic(run.summary, {"status": "interrupted"})
    interrupted = run.read_any_record()
    assert run.is_run() and not run.is_done() and run.read_record() is None
    assert interrupted is not None and interrupted.status == "interrupted"
    assert interrupted.final_val_loss is None  # a key it did not store reads as None
    for status in ("finished", "diverged", "pruned"):
        folders.write_json_atomic(run.summary, {"status": status, "source_run": "r0"})
        done = run.read_record()
        assert done is not None and done.status == status and done.extra == {"source_run": "r0"}
    assert ExperimentFolder(tmp_path / "exp").runs() == [run]
    assert ExperimentFolder(tmp_path / "exp").summarized() == {run}


def test_a_record_is_returned_as_it_is_stored(tmp_path: Path) -> None:
    run = ExperimentFolder.of(tmp_path, "exp").run("r1")
    run.path.mkdir(parents=True)
    diverged = replace(
        RunRecord.from_json({"run_id": "r1"}), status="diverged", final_train_loss=math.nan
    )
    stored = run.write_record(diverged)
    assert stored.final_train_loss is None  # NaN is stored as null: the same for every reader
    assert stored == run.read_record() and stored.status == "diverged"


def test_reset_clears_a_half_written_run(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "r")
    folders.write_json_atomic(run.config, {})
    run.metrics.write_text("step\n1\n")
    run.reset()
    assert run.path.is_dir() and list(run.path.iterdir()) == []


def test_reset_keeps_only_a_cut_runs_checkpoint(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "r")
    folders.write_json_atomic(run.config, {})
    (run.logs / "csv").mkdir(parents=True)
    run.checkpoint.write_bytes(b"state")
    run.reset()
    assert list(run.path.iterdir()) == [run.checkpoint]
    assert run.checkpoint.read_bytes() == b"state"


def test_an_empty_or_missing_frame_reads_as_none(tmp_path: Path) -> None:
    run = RunFolder(tmp_path)
    assert run.read_frame(run.metrics) is None
    run.metrics.write_text("")
    assert run.read_frame(run.metrics) is None
    run.metrics.write_text("step,train_loss\n1,2.5\n")
    assert run.read_frame(run.metrics)["train_loss"].tolist() == [2.5]


def _path_names() -> set[str]:
    """The file and folder names the store's layout uses, read off the folder objects."""
    run, exp = RunFolder(Path("r")), ExperimentFolder(Path("e"))
    paths = [getattr(run, p) for p in dir(RunFolder) if isinstance(getattr(RunFolder, p), property)]
    paths += [
        getattr(exp, p)
        for p in dir(ExperimentFolder)
        if isinstance(getattr(ExperimentFolder, p), property)
    ]
    names = {p.name for p in paths if isinstance(p, Path)}
    names |= {exp.claim("x").parent.name, folders.retry_claims(Path("optuna.db")).name}
    return names - {"r", "e"}  # the run id and the experiment name are not file names


def _code_strings(path: Path) -> list[tuple[int, str]]:
    """String constants of a module other than docstrings, without whitespace (not prose)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and not re.search(r"\s", node.value)
    ]


def test_no_module_outside_the_store_spells_a_results_file_name() -> None:
    names = _path_names()
    assert {"summary.json", "metrics.csv", "model.pt", "stability.json", "optuna.db"} <= names
    found = [
        f"{path.relative_to(REPO)}:{line}: {text!r}"
        for path in sorted((REPO / "ablate").rglob("*.py"))
        if path.name != "folders.py"
        for line, text in _code_strings(path)
        if set(re.split(r"[/*]", text)) & names
    ]
    assert found == []


def _joins_onto_an_experiment_folder(path: Path) -> list[int]:
    """Lines of ``path`` that join a path onto a bare experiment folder (``exp_dir / ...``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
            left = node.left
            name = left.id if isinstance(left, ast.Name) else getattr(left, "attr", None)
            if name == "exp_dir":
                lines.append(node.lineno)
    return lines


def test_no_module_outside_the_store_builds_a_path_in_an_experiment_folder() -> None:
    found = [
        f"{path.relative_to(REPO)}:{line}"
        for path in sorted((REPO / "ablate").rglob("*.py"))
        if path.name != "folders.py"
        for line in _joins_onto_an_experiment_folder(path)
    ]
    assert found == []  # ExperimentFolder(exp_dir).run(run_id), .claim(...), ...


CALLERS_WITH_A_PATH = {  # the command line and the notebook's entry: they make the folder object
    "ablate/commands/results.py",
    "ablate/core/folders.py",
    "ablate/core/store.py:load_results",
    "ablate/report/estimands.py:load_answer",
}


def _folders_made_from_paths(path: Path) -> list[str]:
    """Where ``path`` makes an ``ExperimentFolder`` from a path (``ExperimentFolder(p)``, not a
    root and a name) or takes an ``exp_dir`` parameter, as ``file:function:line``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = str(path.relative_to(REPO))
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        params = function.args.args + function.args.kwonlyargs
        made = [
            node.lineno
            for node in ast.walk(function)
            if isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "ExperimentFolder"
        ]
        made += [function.lineno for p in params if p.arg == "exp_dir"]
        found += [f"{where}:{function.name}:{line}" for line in made]
    return found


def test_code_below_the_command_line_is_given_the_folder_object_not_a_path() -> None:
    found = [
        place
        for path in sorted((REPO / "ablate").rglob("*.py"))
        for place in _folders_made_from_paths(path)
        if str(path.relative_to(REPO)) not in CALLERS_WITH_A_PATH
        and place.rsplit(":", 1)[0] not in CALLERS_WITH_A_PATH
    ]
    assert found == []  # take an ExperimentFolder (ctx.folder in a stage), or RunFolder.experiment
