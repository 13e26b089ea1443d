"""The learning-rate schedule, the optimizer's parameter groups and the DDP batch shares."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from ablate.core.config import DataConfig, ModelConfig
from ablate.nn.model import build_gpt, parameter_groups
from ablate.training.data import batch_offsets, eval_offsets, gather_windows, load_corpus
from ablate.training.task import RunData, lr_factor


def test_warmup_is_linear_then_cosine_decays_to_the_floor() -> None:
    f = [lr_factor(s, warmup=4, total=14, schedule="cosine", min_ratio=0.1) for s in range(15)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]
    assert f[4] == pytest.approx(1.0)
    assert f[9] == pytest.approx(0.1 + 0.9 * 0.5)  # halfway through the decay
    assert f[14] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(f[4:], f[5:], strict=False))


def test_constant_schedule_and_no_warmup() -> None:
    assert [lr_factor(s, 2, 10, "constant", 0.1) for s in range(4)] == [0.5, 1.0, 1.0, 1.0]
    assert lr_factor(0, 0, 10, "cosine", 0.0) == pytest.approx(1.0)


def test_decay_groups_split_matrices_from_vectors() -> None:
    model = build_gpt(ModelConfig(d_model=16, n_layers=1, n_heads=2, seq_len=8), 20, 0)
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() >= 2 for p in decay["params"]) and all(
        p.dim() < 2 for p in no_decay["params"]
    )
    n = sum(p.numel() for g in (decay, no_decay) for p in g["params"])
    assert n == sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("world", [1, 2, 4])
def test_ddp_processes_split_every_batch_into_equal_shares(world: int) -> None:
    corpus = load_corpus(DataConfig(), 16)
    offsets = batch_offsets(len(corpus.train), 16, 8, 5, seed=0)
    val_offsets = eval_offsets(len(corpus.val), 16, 8, 2)
    whole = [gather_windows(corpus.train, row, 16) for row in offsets]
    shares = []
    for rank in range(world):
        data = RunData(corpus, offsets, val_offsets, 16)
        data.trainer = SimpleNamespace(global_rank=rank, world_size=world, global_step=0)
        shares.append(list(data.train_dataloader()))
    for step, batch in enumerate(whole):
        parts = [share[step] for share in shares]
        assert all(part.shape == (8 // world, 17) for part in parts)
        assert torch.equal(torch.cat(parts), batch)  # rank r holds rows r*B/W .. (r+1)*B/W
    (val,) = RunData(corpus, offsets, val_offsets, 16).val_dataloader()
    assert [b.shape for b in val] == [(8, 17), (8, 17)]  # every process: all val windows


def test_a_resumed_run_is_fed_the_batches_after_its_step() -> None:
    corpus = load_corpus(DataConfig(), 16)
    offsets = batch_offsets(len(corpus.train), 16, 8, 5, seed=0)
    data = RunData(corpus, offsets, eval_offsets(len(corpus.val), 16, 8, 2), 16)
    data.trainer = SimpleNamespace(global_rank=0, world_size=1, global_step=3)
    batches = data.train_dataloader()
    assert len(batches) == 5  # the whole run's: Lightning counts 3 as fetched
    rng = torch.get_rng_state()
    fed = list(batches)
    assert torch.equal(torch.get_rng_state(), rng)  # starting it drew nothing
    assert len(fed) == 2
    assert all(
        torch.equal(b, gather_windows(corpus.train, offsets[3 + i], 16)) for i, b in enumerate(fed)
    )
