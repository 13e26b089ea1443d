"""The LightningModule (AdamW groups, warmup + cosine/constant schedule, loss and z-loss, clipping,
evaluation on val and, where the data hold one, test) and the DataModule that feeds it.

The module owns the optimization of one run. It records the gradient norm it clips with (so the
metrics carry it at no extra cost), skips the optimizer step for a non-finite loss, and exposes
the last validation loss; the callbacks in :mod:`ablate.training.probes` read these to log
and to stop diverged runs. A checkpoint holds the RNG state with the weights (dropout draws
from it). :class:`RunData` hands each DDP process its share of every batch, from the step a run
resumed at (:class:`TrainBatches`).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import lightning as L
import torch
from torch import nn
from torch.utils.data import DataLoader

from ablate.core.config import TrainConfig
from ablate.nn.model import next_token_loss, next_token_objective, parameter_groups
from ablate.training.data import Corpus, WindowBatches


def lr_factor(step: int, warmup: int, total: int, schedule: str, min_ratio: float) -> float:
    """Multiplier of the peak learning rate at optimizer step ``step`` (0-based)."""
    if warmup > 0 and step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    span = max(1, total - warmup)
    progress = min(1.0, (step - warmup) / span)
    return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


class LanguageModelTask(L.LightningModule):
    """Next-token training of a model (any source: ids (B, T) -> logits (B, T, V)) under a
    :class:`TrainConfig`."""

    def __init__(self, model: nn.Module, cfg: TrainConfig, total_steps: int) -> None:
        super().__init__()
        self.model = model
        self.cfg = cfg
        self.total_steps = total_steps
        self.last_loss: torch.Tensor | None = None
        self.last_grad_norm: torch.Tensor | None = None
        self.last_val_loss: float | None = None
        self.last_test_loss: float | None = None  # where the data hold a test split
        self._sums = [0.0, 0.0]  # val, test: summed window-batch losses of this evaluation
        self._counts = [0, 0]
        self.threads = torch.get_num_threads()  # the run's share of the machine

    def setup(self, stage: str) -> None:
        """Under DDP each process of this machine takes its part of the run's threads."""
        if self.trainer.world_size > 1:
            torch.set_num_threads(max(1, self.threads // self.trainer.num_devices))

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor | None:
        objective, loss = next_token_objective(self.model, batch, self.cfg.z_loss)
        self.last_loss = self.global_mean(loss.detach())  # cross-entropy, z-loss or not
        self.last_grad_norm = None
        if not torch.isfinite(self.last_loss):
            return None  # skip the update (every process alike); the divergence monitor stops
        return objective

    def global_mean(self, value: torch.Tensor) -> torch.Tensor:
        """``value`` averaged over the DDP processes: the loss of the whole global batch."""
        if self.trainer.world_size == 1:
            return value
        return self.trainer.strategy.reduce(value, reduce_op="mean")

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        max_norm = self.cfg.grad_clip if self.cfg.grad_clip is not None else math.inf
        self.last_grad_norm = torch.nn.utils.clip_grad_norm_(self.parameters(), max_norm)

    def on_validation_epoch_start(self) -> None:
        self._sums, self._counts = [0.0, 0.0], [0, 0]

    def validation_step(self, batch: torch.Tensor, batch_idx: int, dataloader_idx: int = 0) -> None:
        """Dataloader 0 is the val split's windows, 1 the test split's (when there is one)."""
        self._sums[dataloader_idx] += float(next_token_loss(self.model, batch))
        self._counts[dataloader_idx] += 1

    def on_validation_epoch_end(self) -> None:
        self.last_val_loss = self._sums[0] / max(1, self._counts[0])
        self.last_test_loss = self._sums[1] / self._counts[1] if self._counts[1] else None

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        """The RNG state too (dropout's; under DDP rank 0's, which saves)."""
        checkpoint["rng_state"] = torch.get_rng_state()
        if torch.cuda.is_available():
            checkpoint["cuda_rng_state"] = torch.cuda.get_rng_state_all()

    def on_load_checkpoint(self, checkpoint: dict) -> None:
        torch.set_rng_state(checkpoint["rng_state"])
        if "cuda_rng_state" in checkpoint and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(checkpoint["cuda_rng_state"])

    def configure_optimizers(self) -> dict:
        cfg = self.cfg
        optimizer = torch.optim.AdamW(
            parameter_groups(self.model, cfg.weight_decay),
            lr=cfg.lr,
            betas=(cfg.beta1, cfg.beta2),
            eps=cfg.adam_eps,
        )
        scheduler = torch.optim.lr_scheduler.LambdaLR(
            optimizer,
            lambda step: lr_factor(
                step, cfg.warmup_steps, self.total_steps, cfg.schedule, cfg.min_lr_ratio
            ),
        )
        return {
            "optimizer": optimizer,
            "lr_scheduler": {"scheduler": scheduler, "interval": "step"},
        }


class RunData(L.LightningDataModule):
    """A run's train and val loaders (and test's, where the corpus holds a test split); each DDP
    process trains on its share of every batch.

    Every process evaluates all validation windows (the same weights give the same loss).
    """

    def __init__(
        self,
        corpus: Corpus,
        train_offsets: torch.Tensor,
        val_offsets: torch.Tensor,
        seq_len: int,
        test_offsets: torch.Tensor | None = None,
    ) -> None:
        super().__init__()
        self.corpus = corpus
        self.train_offsets = train_offsets  # (steps, global batch)
        self.val_offsets = val_offsets
        self.test_offsets = test_offsets
        self.seq_len = seq_len

    def train_dataloader(self) -> TrainBatches:
        """This process's share of every batch, from the step the Trainer starts at (a run
        resumed from a checkpoint: its restored step)."""
        rank, world = self.trainer.global_rank, self.trainer.world_size
        share = self.train_offsets.tensor_split(world, dim=1)[rank]
        batches = WindowBatches(self.corpus.train, share, self.seq_len)
        return TrainBatches(batches, self.trainer.global_step)

    def val_dataloader(self) -> list[DataLoader]:
        """The val split's windows, then the test split's where there is one. Their iterators
        take no seed from the global RNG, which only dropout draws from, so that a run resumed
        from a checkpoint draws what the uninterrupted run drew (Lightning starts the val
        loaders at different moments of the two)."""
        splits = [(self.corpus.val, self.val_offsets)]
        if self.corpus.test is not None and self.test_offsets is not None:
            splits.append((self.corpus.test, self.test_offsets))
        return [  # a generator of their own: starting them draws nothing from the global RNG
            DataLoader(
                WindowBatches(ids, offsets, self.seq_len),
                batch_size=None,
                generator=torch.Generator(),
            )
            for ids, offsets in splits
        ]


class TrainBatches:
    """The run's train batches in order from batch ``start``, iterated in this process.

    Its length is the whole run's: Lightning counts a resumed run's restored steps as already
    fetched, so a run resumed at step k is fed batches k, k+1, ... exactly as the uninterrupted
    run was. It is no DataLoader, so starting it draws nothing from the global RNG (a
    DataLoader's iterator draws a seed), and a resumed run's RNG stream is the uninterrupted
    one's. Its position is the Trainer's restored step, so it has no state of its own to save;
    ``state_dict`` and ``load_state_dict`` tell Lightning it resumes.
    """

    def __init__(self, batches: WindowBatches, start: int) -> None:
        self.batches = batches
        self.start = start

    def __len__(self) -> int:
        return len(self.batches)

    def __iter__(self) -> Iterator[torch.Tensor]:
        return (self.batches[i] for i in range(self.start, len(self.batches)))

    def state_dict(self) -> dict[str, int]:
        return {}

    def load_state_dict(self, state_dict: dict[str, int]) -> None:
        """Nothing to load: the position is the Trainer's step."""
