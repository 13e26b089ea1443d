"""A run cut between checkpoints resumes from the last one and stores what the uninterrupted
run stores, having trained only the steps after it (runtime.checkpoint_steps)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import pandas as pd
import pytest
import torch
from conftest import tiny_config

from ablate.core.folders import ExperimentFolder, RunFolder
from ablate.core.plan import RunSpec
from ablate.training.callbacks import EarlyStop
from ablate.training.run import execute_run

pytestmark = pytest.mark.trains

STEPS = 40  # 4 * 16 * 40 tokens; evaluations every 10 steps, probes every 5


def _spec(**overrides: object) -> RunSpec:
    config = tiny_config(
        **{
            "train.tokens": 4 * 16 * STEPS,
            "model.dropout": 0.1,  # draws from the RNG: the checkpoint must hold its state
            "train.probes.interval": 5,
            **overrides,
        }
    )
    return RunSpec("tiny", "layernorm", 0, config)


class CutAt(EarlyStop):
    """Records the steps this process trains; raises Ctrl-C after step ``cut`` (as Ctrl-C or
    Slurm's SIGTERM does, between two checkpoints)."""

    def __init__(self, cut: int | None) -> None:
        super().__init__()
        self.cut = cut
        self.trained: list[int] = []

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int
    ) -> None:
        self.trained.append(batch_idx + 1)
        if batch_idx + 1 == self.cut:
            raise KeyboardInterrupt


def _stored(run: RunFolder) -> tuple[pd.DataFrame, pd.DataFrame, dict[str, torch.Tensor]]:
    metrics = pd.read_csv(run.metrics).drop(columns=["step_time_s", "elapsed_s"])
    return metrics, pd.read_csv(run.probes), torch.load(run.weights, weights_only=True)


@pytest.mark.parametrize(
    ("every", "cut", "precision"),
    [
        (10, 17, "32"),  # the last checkpoint at an evaluation step (10)
        (7, 26, "32"),  # between two (21)
        (10, 17, "16-mixed"),  # fp16 with loss scaling: the scaler's state resumes too
    ],
)
def test_a_cut_run_resumes_bitwise_equal(
    tmp_path: Path, every: int, cut: int, precision: str
) -> None:
    whole = execute_run(_spec(**{"train.precision": precision}), tmp_path / "whole")
    spec = _spec(**{"runtime.checkpoint_steps": every, "train.precision": precision})
    assert spec.run_id == whole.run_id  # the checkpoint cadence is no part of the run
    root = tmp_path / "cut"
    run = ExperimentFolder.of(root, "tiny").run(spec.run_id)
    first = CutAt(cut)
    with pytest.raises(KeyboardInterrupt):
        execute_run(spec, root, stoppers=[first])
    assert first.trained == list(range(1, cut + 1))
    record = run.read_any_record()
    assert record is not None and record.status == "interrupted"
    assert run.checkpoint.is_file()  # kept for the resume

    second = CutAt(None)
    resumed = execute_run(spec, root, stoppers=[second])
    last_checkpoint = cut // every * every
    assert second.trained == list(range(last_checkpoint + 1, STEPS + 1))
    assert resumed.extra == {"resumed_from_step": last_checkpoint}
    assert not run.checkpoint.exists()  # stored: deleted

    for name in ("status", "steps", "final_val_loss", "best_val_loss", "final_train_loss"):
        assert getattr(resumed, name) == getattr(whole, name), name
    assert resumed.probe_steps == whole.probe_steps
    expected = _stored(ExperimentFolder.of(tmp_path / "whole", "tiny").run(spec.run_id))
    metrics, probes, weights = _stored(run)
    pd.testing.assert_frame_equal(metrics, expected[0], check_exact=True)
    pd.testing.assert_frame_equal(probes, expected[1], check_exact=True)
    assert weights.keys() == expected[2].keys()
    assert all(torch.equal(weights[k], expected[2][k]) for k in weights)
    elapsed = pd.read_csv(run.metrics)["elapsed_s"]
    assert elapsed.is_monotonic_increasing  # the resumed rows go on from the checkpoint's


def test_a_run_stored_whole_leaves_no_checkpoint(tmp_path: Path) -> None:
    spec = _spec(**{"runtime.checkpoint_steps": 10})
    record = execute_run(spec, tmp_path)
    assert record.status == "finished" and record.extra == {}
    run = ExperimentFolder.of(tmp_path, "tiny").run(spec.run_id)
    assert not run.checkpoint.exists()
    assert not list(run.path.glob(".*partial"))


def test_a_paused_run_trained_on_resumes_bitwise_equal(tmp_path: Path) -> None:
    whole = execute_run(_spec(), tmp_path / "whole")
    root = tmp_path / "paused"
    run = ExperimentFolder.of(root, "tiny").run(whole.run_id)
    first = CutAt(None)
    paused = execute_run(_spec(**{"runtime.pause_step": 20}), root, stoppers=[first])
    assert first.trained == list(range(1, 21))
    assert (paused.status, paused.steps, paused.stable) == ("paused", 20, None)
    frame = pd.read_csv(run.metrics)
    assert paused.final_val_loss == frame.loc[frame["step"] == 20, "val_loss"].item()
    assert run.checkpoint.is_file() and run.is_done()

    second = CutAt(None)  # the run itself, not held: trained on from its checkpoint
    resumed = execute_run(_spec(), root, stoppers=[second])
    assert second.trained == list(range(21, STEPS + 1))
    assert resumed.extra == {"resumed_from_step": 20}
    for name in ("status", "steps", "final_val_loss", "best_val_loss", "final_train_loss"):
        assert getattr(resumed, name) == getattr(whole, name), name
    expected = _stored(ExperimentFolder.of(tmp_path / "whole", "tiny").run(whole.run_id))
    pd.testing.assert_frame_equal(_stored(run)[0], expected[0], check_exact=True)
    assert not run.checkpoint.exists()


def test_a_run_resumed_at_its_pause_step_is_held_there_at_once(tmp_path: Path) -> None:
    spec = _spec(**{"runtime.checkpoint_steps": 10})
    with pytest.raises(KeyboardInterrupt):
        execute_run(spec, tmp_path, stoppers=[CutAt(25)])  # its checkpoint at step 20
    again = CutAt(None)
    held = execute_run(_spec(**{"runtime.pause_step": 20}), tmp_path, stoppers=[again])
    assert again.trained == [] and (held.status, held.steps) == ("paused", 20)
    assert ExperimentFolder.of(tmp_path, "tiny").run(spec.run_id).checkpoint.is_file()
