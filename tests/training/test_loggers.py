"""Lightning loggers: CSV always, TensorBoard when named, a clear error for a missing package."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import TINY, tiny_config, write_experiment

from ablate.cli import main
from ablate.core import load
from ablate.core.errors import ConfigError
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec
from ablate.training import loggers
from ablate.training.run import execute_run


@pytest.mark.trains
def test_csv_logger_gets_metrics_probes_and_hyperparameters(tmp_path: Path) -> None:
    spec = RunSpec("lg", "ln", 0, tiny_config(**{"runtime.log_every_n_steps": 5}))
    execute_run(spec, tmp_path)
    logs = tmp_path / "lg" / spec.run_id / "logs" / "csv"
    logged = pd.read_csv(logs / "metrics.csv")
    train = logged.dropna(subset=["train/loss"])
    assert list(train["step"]) == [5, 10, 15, 20]
    ours = pd.read_csv(tmp_path / "lg" / spec.run_id / "metrics.csv").set_index("step")
    assert train.set_index("step")["train/loss"].tolist() == pytest.approx(
        ours.loc[[5, 10, 15, 20], "train_loss"].tolist()
    )
    assert list(logged.dropna(subset=["val/loss"])["step"]) == [10, 20]
    assert logged["probe/resid_rms/blocks.0"].notna().sum() == 2  # steps 1 and 20
    hparams = yaml.safe_load((logs / "hparams.yaml").read_text())
    assert hparams["config.model.norm.kind"] == "layernorm" and hparams["seed"] == 0


@pytest.mark.trains
def test_tensorboard_logger_writes_event_files(tmp_path: Path) -> None:
    spec = RunSpec("lg", "ln", 0, tiny_config(**{"runtime.loggers": ["tensorboard"]}))
    execute_run(spec, tmp_path)
    events = list((tmp_path / "lg" / spec.run_id / "logs" / "tensorboard").glob("events.*"))
    assert len(events) == 1 and events[0].stat().st_size > 1000


def test_a_logger_without_its_package_is_a_one_line_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(load.LOGGER_PACKAGES, "wandb", ("no_such_package_ablate",))
    runtime = {"loggers": ["wandb"]}
    path = write_experiment(tmp_path / "x.yaml", runtime=runtime)
    with pytest.raises(ConfigError, match=r"runtime\.loggers: 'wandb' needs the no_such_pack"):
        load_experiment(path)
    assert main(["run", str(path), "--results-dir", str(tmp_path / "r")]) == 2
    assert len(capsys.readouterr().err.splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_an_unknown_logger_names_the_allowed_ones(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "x.yaml", runtime={"loggers": ["neptune"]})
    with pytest.raises(ConfigError, match="tensorboard.*mlflow.*wandb"):
        load_experiment(path)


def test_loggers_do_not_change_the_run_id() -> None:
    plain = RunSpec("lg", "ln", 0, tiny_config())
    logged = RunSpec("lg", "ln", 0, tiny_config(**{"runtime.loggers": ["tensorboard"]}))
    assert plain.run_id == logged.run_id
    probed = RunSpec("lg", "ln", 0, tiny_config(**{"train.probes.interval": 3}))
    assert probed.run_id != plain.run_id  # probes change what a run records


def test_flatten_gives_dotted_keys() -> None:
    flat = loggers.flatten({"a": {"b": {"c": 1}}, "d": [1, 2], "e": None})
    assert flat == {"a.b.c": 1, "d": "[1, 2]", "e": "None"}
    assert "train.lr" in loggers.flatten(TINY)


def test_a_wandb_run_is_filed_as_the_file_says_and_named_by_stage_variant_seed() -> None:
    from ablate.core.plan import RunSpec
    from ablate.training.loggers import wandb_settings

    plain = RunSpec("ln_vs_rms", "rmsnorm", 3, tiny_config(), group="curve")
    found = wandb_settings(plain)
    assert found["project"] == found["group"] == "ln_vs_rms" and found["entity"] is None
    assert found["name"] == "curve-rmsnorm-seed3" and found["id"] == plain.run_id
    assert found["tags"] == ["curve", "rmsnorm", "seed3"]
    wandb = {"project": "norms", "entity": "lab", "group": "dec", "tags": ["cpu"]}
    filed = RunSpec("ln_vs_rms", "rmsnorm", 3, tiny_config(**{"runtime.wandb": wandb}))
    found = wandb_settings(filed)
    assert (found["project"], found["entity"], found["group"]) == ("norms", "lab", "dec")
    assert (
        found["tags"][0] == "cpu"
        and filed.run_id == RunSpec("ln_vs_rms", "rmsnorm", 3, tiny_config()).run_id
    )  # where it is logged changes no run
