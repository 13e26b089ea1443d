"""What a run trains on, built deterministically from its spec: corpus, batch order, validation
(and test) windows and the initialized model; for continued training, the source run's weights
mapped onto the new model and the loss before and right after the swap.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
from torch import nn

from ablate.core import store
from ablate.core.folders import ExperimentFolder
from ablate.core.plan import RunSpec
from ablate.nn.convert import convert_weights
from ablate.nn.model import GPT
from ablate.nn.sources import build_model
from ablate.training.data import (
    Corpus,
    eval_offsets,
    load_corpus,
    split_offsets,
    train_offsets_of,
)
from ablate.training.trainer import evaluate


@dataclass
class Prepared:
    """Everything a run trains on, built deterministically from its spec."""

    corpus: Corpus
    model: nn.Module
    train_offsets: torch.Tensor
    val_offsets: torch.Tensor
    steps: int
    start: SourceStart | None = None  # continued training: the source and the swap
    final_offsets: torch.Tensor | None = None  # the final evaluation's, when not val_offsets
    test_offsets: torch.Tensor | None = None  # the test split's windows, where there is one
    final_test_offsets: torch.Tensor | None = None  # the final evaluation's on test


def prepare(spec: RunSpec, experiment: ExperimentFolder | None = None) -> Prepared:
    """Corpus, batch order, validation windows and the initialized model of a run.

    A continued-training run (``spec.init_from``) starts from the source run's stored weights
    in ``experiment`` (the folder its own run is in), mapped by
    :func:`ablate.nn.convert.convert_weights`, and draws its batches from a generator of its
    own (the source's batches are not repeated in order).
    """
    cfg = spec.config
    seq_len, batch = cfg.model.seq_len, cfg.train.batch_size
    corpus = load_corpus(cfg.data, seq_len)
    steps = cfg.steps()
    train_offsets = train_offsets_of(spec, corpus)
    val_offsets = eval_offsets(len(corpus.val), seq_len, batch, cfg.train.eval_batches)
    model = build_model(cfg.model, corpus.vocab_size, spec.seed)
    prepared = Prepared(corpus, model, train_offsets, val_offsets, steps)
    if cfg.train.final_eval == "split":
        prepared.final_offsets = split_offsets(len(corpus.val), seq_len, batch)
    if corpus.test is not None:
        n_test = len(corpus.test)
        prepared.test_offsets = eval_offsets(n_test, seq_len, batch, cfg.train.eval_batches)
        if cfg.train.final_eval == "split":
            prepared.final_test_offsets = split_offsets(n_test, seq_len, batch)
    if spec.init_from is not None:
        if experiment is None:
            raise ValueError("a continued-training run needs the results folder of its source")
        prepared.start = start_from_source(spec, prepared, experiment)
    return prepared


def load_source(
    spec: RunSpec, experiment: ExperimentFolder, vocab_size: int
) -> tuple[RunSpec, GPT]:
    """The source run's spec and its final model (``model.pt``), or a clear error."""
    source_dir = experiment.run(str(spec.init_from))
    problem = store.weights_missing(source_dir)
    if problem is not None:
        raise ValueError(f"source run {spec.init_from} {problem}: nothing to continue from")
    source_spec = RunSpec.from_json(source_dir.read_config() or {})
    source = GPT(source_spec.config.model, vocab_size)
    source.load_state_dict(torch.load(source_dir.weights, map_location="cpu", weights_only=True))
    return source_spec, source


@dataclass(frozen=True)
class SourceStart:
    """Where a continued run started: its source run and variant, the val loss of the source
    model and of this run's right after the swap, the parameters folded and dropped (by name); a
    continued run's record stores these beside its own keys (:meth:`as_extra`)."""

    source_run_id: str
    source_variant: str
    loss_before_swap: float
    loss_after_swap: float
    params_folded: list[str]
    params_dropped: list[str]

    def as_extra(self) -> dict[str, Any]:
        """As the record's ``extra`` keys."""
        return asdict(self)


def start_from_source(
    spec: RunSpec, prepared: Prepared, experiment: ExperimentFolder
) -> SourceStart:
    """Load, map and measure: the val loss of the source model and right after the swap."""
    source_spec, source = load_source(spec, experiment, prepared.corpus.vocab_size)
    assert isinstance(prepared.model, GPT), "conversion maps ablate's own model only"
    mapping = convert_weights(source, prepared.model, spec.bias_mapping or "fold")
    seq_len = spec.config.model.seq_len
    return SourceStart(
        source_run_id=str(spec.init_from),
        source_variant=source_spec.variant,
        loss_before_swap=evaluate(source, prepared.corpus.val, prepared.val_offsets, seq_len),
        loss_after_swap=evaluate(
            prepared.model, prepared.corpus.val, prepared.val_offsets, seq_len
        ),
        params_folded=mapping["folded"],
        params_dropped=mapping["dropped"],
    )
