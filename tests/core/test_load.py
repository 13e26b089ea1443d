"""Reading a file with a ``scale:`` section: one experiment per size, the size's keys in its
base and nowhere else, and one-line errors for what cannot be scaled."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, TINY, write_experiment

from ablate.core.errors import ConfigError
from ablate.core.load import load_experiment, size_experiment

SIZES = [{"d_model": 16}, {"d_model": 32, "n_heads": 4}, {"d_model": 48, "n_layers": 2}]


def _scaled(tmp_path: Path, **extra: Any) -> Path:
    return write_experiment(tmp_path / "s.yaml", scale={"sizes": SIZES}, **extra)


def test_every_size_is_an_experiment_of_its_own_with_the_size_in_every_variant(
    tmp_path: Path,
) -> None:
    experiment = load_experiment(_scaled(tmp_path))
    assert [s.label() for s in experiment.scale.sizes] == ["d16", "d32", "d48-l2"]
    sizes = [size_experiment(experiment, i) for i in range(3)]
    assert [s.name for s in sizes] == ["tiny.d16", "tiny.d32", "tiny.d48-l2"]
    for size, wanted in zip(sizes, SIZES, strict=True):
        assert size.scale is None and list(size.variants) == ["layernorm", "rmsnorm"]
        for config in size.variants.values():
            assert config.model.d_model == wanted["d_model"]
            assert config.model.n_heads == wanted.get("n_heads", 2)
            assert config.model.n_layers == wanted.get("n_layers", 1)
        norms = {v: c.model.norm.kind for v, c in size.variants.items()}
        assert norms == {"layernorm": "layernorm", "rmsnorm": "rmsnorm"}
        layernorm, rmsnorm = size.variants.values()
        assert layernorm.train == rmsnorm.train and layernorm.data == rmsnorm.data
    assert size_experiment(experiment, 1, tokens=4 * 16 * 7).base.train.tokens == 448


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"variants": {"a": {"model.norm.kind": "layernorm"}, "b": {"model.d_model": 8}}},
            "variants.b: model.d_model: the scale: section sets it per size",
        ),
        ({"scale": {"sizes": [{"d_model": 16}, {"d_model": 16}]}}, "'d16' is given twice"),
        (
            {"scale": {"sizes": [{"d_model": 16}]}},
            "scale.sizes: got [{'d_model': 16}]; list should have at least 2 items",
        ),
        (
            {"scale": {"sizes": [{"d_model": 16}, {"d_model": 30, "n_heads": 4}]}},
            "scale.sizes[1] (d30)",
        ),
        (
            {
                "scale": {"sizes": SIZES, "tokens_per_parameter": 20},
                "search": {"n_trials": 2, "tokens": 640},
            },
            "search.tokens: under scale.tokens_per_parameter",
        ),
        (
            {"scale": {"sizes": SIZES}, "convert": {"source": "layernorm", "tokens": 640}},
            "scale: cannot be combined with convert:",
        ),
    ],
)
def test_what_cannot_be_scaled_is_one_line(
    tmp_path: Path, extra: dict[str, Any], message: str
) -> None:
    extra = {"scale": {"sizes": SIZES}, **extra}
    with pytest.raises(ConfigError) as caught:
        load_experiment(write_experiment(tmp_path / "s.yaml", **extra))
    text = str(caught.value)
    assert message in text and "\n" not in text and text.startswith(str(tmp_path / "s.yaml"))


def test_settings_on_the_command_line_are_an_edit_of_the_file_and_are_recorded(
    tmp_path: Path,
) -> None:
    from ablate.core.manifest import plan_manifest
    from ablate.core.plan import plan_runs

    path = write_experiment(tmp_path / "e.yaml")
    set_here = load_experiment(
        path, settings=["train.lr=0.005", "seeds=[4, 5]", "curve.seeds=[7,8]"]
    )
    assert set_here.base.train.lr == 0.005 and set_here.seeds == [4, 5]
    assert set_here.curve is not None and set_here.curve.seeds == [7, 8]
    assert set_here.command_line == {"train.lr": 0.005, "seeds": [4, 5], "curve.seeds": [7, 8]}
    edited = write_experiment(
        tmp_path / "edited.yaml",
        seeds=[4, 5],
        train={**TINY["train"], "lr": 0.005},
        curve={"seeds": [7, 8]},
    )
    same = load_experiment(edited)
    ids = [s.run_id for s in plan_runs(set_here)]
    assert ids == [s.run_id for s in plan_runs(same)]  # the run ids follow the config
    manifest = plan_manifest(set_here, plan_runs(set_here))
    assert manifest.command_line == set_here.command_line
    for bad, says in (
        ("train.lr", "give KEY=VALUE"),
        ("train.lrr=1", "with --set train.lrr=1: train.lrr: unknown key"),
        ("model.d_model.x=1", "model.d_model is a value in the file, not a section"),
        ("train.lr=[1", "the value is not YAML"),
    ):
        with pytest.raises(ConfigError, match=re.escape(says)):
            load_experiment(path, settings=[bad])


# the checks of the machine core cannot make: the model builds (torch), the study storage opens
# (Optuna), sbatch accepts the job (Slurm), runs_per_device runs fit a GPU (measured there);
# every other config error is the loader's
MACHINE_CHECKS = {
    "ablate/launch/preflight.py:check_models",
    "ablate/launch/preflight.py:check_fit",
    "ablate/launch/storage.py:check_storage_opens",
    "ablate/launch/slurm_executor.py:_submit",
    "ablate/launch/slurm_executor.py:_staff",  # a task's check_fit, read from the queue
}


LOADER = (
    "ablate/core/load.py:",
    "ablate/core/validation.py:",
    "ablate/core/overrides.py:",
    "ablate/core/checks.py:",
    "ablate/core/data_paths.py:",
)


def _config_errors_made(path: Path) -> set[str]:
    """``file:function`` of every function of ``path`` that makes a ``ConfigError``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = str(path.relative_to(REPO))
    return {
        f"{where}:{function.name}"
        for function in ast.walk(tree)
        if isinstance(function, ast.FunctionDef)
        for node in ast.walk(function)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id == "ConfigError"
    }


def test_every_config_error_is_made_by_the_loader_or_a_check_of_the_machine() -> None:
    made = set().union(*(_config_errors_made(p) for p in (REPO / "ablate").rglob("*.py")))
    loader = {place for place in made if place.startswith(LOADER)}
    assert len(loader) > 10 and made - loader == MACHINE_CHECKS
