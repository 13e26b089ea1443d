"""The run record: what every run stores about itself in ``summary.json``, as one type.

Both writers, a trained run's (:func:`ablate.training.summary.summarize`) and a simulated
run's (:func:`ablate.launch.simulator.summary_of`), build a :class:`RunRecord`, so a key one
of them forgets or misspells is an error where it is written, not a hole in a report;
:data:`ablate.core.store.SUMMARY_KEYS` is its field names. docs/results.md describes each. Every
executor returns records, and a stored run is read back as one
(:meth:`ablate.core.folders.RunFolder.read_record`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any


@dataclass(frozen=True)
class RunRecord:
    """One run's outcome: which run it is, how it ended, its losses, its budget, what decided
    its bits, its speed and memory, its probes' counts; ``extra`` holds the keys a continued
    run adds (its source), stored beside the others; ``stored_keys``, the keys its file held
    where it was read from one (a key an older ablate did not write reads as None, whatever
    the field's type)."""

    experiment: str
    run_id: str
    family: str
    variant: str
    seed: int
    data_seed: int
    group: str
    lr: float
    warmup_steps: int
    status: str
    stable: bool | None
    unstable_reason: str | None
    unstable_step: int | None
    final_val_loss: float | None
    best_val_loss: float | None
    final_test_loss: float | None
    best_test_loss: float | None
    final_train_loss: float | None
    diverged_step: int | None
    diverged_reason: str | None
    stopped_reason: str | None
    steps: int
    planned_steps: int
    tokens: int
    planned_tokens: int
    n_params: int
    vocab_size: int
    initial_loss: float
    unigram_loss: float | None
    entropy_floor: float | None
    tokens_per_byte: float | None
    divergence_threshold: float | None
    norm_kind: str
    norm_placement: str
    norm_impl: str | None
    kernel_target: str | None
    torch_version: str | None
    torch_threads: int | None
    cpu_capability: str | None
    wall_time_s: float
    train_time_s: float
    tokens_per_s: float | None
    step_time_median_s: float | None
    peak_memory_mb: float | None
    memory_kind: str | None
    probe_steps: int
    nonfinite_activations: int
    nonfinite_grads: int
    init_digest: str | None
    data_digest: str | None
    error: str | None
    extra: Mapping[str, Any] = field(default_factory=dict)
    stored_keys: tuple[str, ...] = field(default=(), compare=False, repr=False)

    def to_json(self) -> dict[str, Any]:
        """The record as ``summary.json`` stores it: every field in order, ``extra``'s keys
        after them."""
        recorded = {name: getattr(self, name) for name in RECORD_KEYS}
        return {**recorded, **self.extra}

    def to_row(self) -> dict[str, Any]:
        """The record as a row of the runs table: the keys its file held, in the file's order
        (a key an older ablate did not write stays out of the row, as it was out of the
        file); a record not read from a file: :meth:`to_json`."""
        every = self.to_json()
        return {key: every[key] for key in self.stored_keys} if self.stored_keys else every

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RunRecord:
        """The record ``summary.json`` holds: a key an older version did not write reads as
        None, a key that is no field (a continued run's source) goes to ``extra``;
        ``stored_keys`` says which keys the file held."""
        known = {name: data.get(name) for name in RECORD_KEYS}
        extra = {k: v for k, v in data.items() if k not in known}
        return cls(**known, extra=extra, stored_keys=tuple(data))


RECORD_KEYS = tuple(f.name for f in fields(RunRecord) if f.name not in ("extra", "stored_keys"))
