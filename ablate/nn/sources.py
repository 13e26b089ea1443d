"""Where a run's model comes from (``model.source``), and its fair init whatever the source.

- ``ablate``: :class:`ablate.nn.model.GPT`, shaped by the ``model`` keys.
- ``litgpt``: litgpt's ``GPT`` built from a config by name (``model.litgpt.name``, any name
  ``litgpt.Config.from_name`` knows) and litgpt's own field names beside it
  (``model.litgpt.n_layer``, ``norm_class_name``, ...). ablate sets ``block_size`` from
  ``model.seq_len`` and ``vocab_size`` / ``padded_vocab_size`` from the data. Built from the
  config alone: no weights are downloaded. litgpt is an optional extra (``.[litgpt]``).
- ``python``: ``model.factory: package.module:function``, called as
  ``function(cfg, vocab_size, make_norm)`` with the run's :class:`~ablate.core.config.ModelConfig`,
  the vocabulary size and ``make_norm(dim) -> nn.Module`` (ablate's norm as ``model.norm``
  configures it). It returns an ``nn.Module`` mapping token ids (B, T) to logits (B, T, V); one
  forward of two tokens checks that here. The current directory is on the import path.

Every model is then initialized by name from the run seed (:func:`ablate.nn.model.init_by_name`:
norms reset, biases zero, the rest N(0, ``model.init_std``) with ``*proj.weight`` scaled by
1/sqrt(2 * blocks)), so matched seeds give bitwise-equal shared weights across norm variants
whatever the source. The probes find their sites through :mod:`ablate.nn.anatomy`.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ablate.core.config import ModelConfig
from ablate.nn.anatomy import blocks_of
from ablate.nn.model import build_gpt, gpt2_std, init_by_name
from ablate.nn.norms import build_norm

FactoryFn = Callable[[ModelConfig, int, Callable[[int], nn.Module]], nn.Module]


class ModelSourceError(ValueError):
    """A model that cannot be built from its source, as one line naming the key."""


def build_model(cfg: ModelConfig, vocab_size: int, seed: int) -> nn.Module:
    """The run's model from its source, with parameters initialized from ``seed`` by name."""
    if cfg.source == "ablate":
        return build_gpt(cfg, vocab_size, seed)
    model = construct(cfg, vocab_size)
    n_layers = len(blocks_of(model)[1])
    init_by_name(model, seed, lambda name: gpt2_std(name, cfg.init_std, n_layers))
    return model


def construct(cfg: ModelConfig, vocab_size: int) -> nn.Module:
    """A litgpt or python model as its source builds it (not yet initialized by ablate)."""
    if cfg.source == "litgpt":
        return litgpt_model(cfg, vocab_size)
    return factory_model(cfg, vocab_size)


def _litgpt() -> Any:
    try:
        import litgpt
    except ImportError as exc:
        raise ModelSourceError(
            f"model.source: litgpt needs the litgpt package, an optional extra "
            f"(pip install -e '.[litgpt]'): {exc}"
        ) from None
    return litgpt


def litgpt_config(cfg: ModelConfig, vocab_size: int) -> Any:
    """litgpt's ``Config`` for ``model.litgpt``: the named config, its fields as given, the
    context from ``model.seq_len`` and the vocabulary from the data."""
    litgpt = _litgpt()
    assert cfg.litgpt is not None
    fields = cfg.litgpt.fields()
    known = {f.name for f in dataclasses.fields(litgpt.Config)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ModelSourceError(
            f"model.litgpt.{unknown[0]}: not a field of litgpt's Config; e.g. n_layer, n_embd, "
            "n_head, n_query_groups, intermediate_size, norm_class_name, norm_eps, bias"
        )
    sizes = {"block_size": cfg.seq_len, "vocab_size": vocab_size, "padded_vocab_size": vocab_size}
    try:
        return litgpt.Config.from_name(cfg.litgpt.name, **fields, **sizes)
    except ValueError as exc:
        raise ModelSourceError(f"model.litgpt.name: {exc}") from None
    except (AssertionError, TypeError) as exc:
        raise ModelSourceError(
            f"model.litgpt: litgpt refused {cfg.litgpt.name} with {fields}: "
            f"{exc or 'inconsistent sizes (n_embd must divide by n_head, ...)'}"
        ) from None


def litgpt_model(cfg: ModelConfig, vocab_size: int) -> nn.Module:
    """litgpt's GPT for ``model.litgpt`` (weights as litgpt constructs them)."""
    return _litgpt().GPT(litgpt_config(cfg, vocab_size))


def resolve_factory(spec: str) -> FactoryFn:
    """The function ``package.module:function`` names, importable from the current directory."""
    module_name, _, function = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ModelSourceError(
            f"model.factory: cannot import {module_name!r} ({exc}); it must be importable from "
            "the current directory or the environment"
        ) from None
    found = getattr(module, function, None)
    if not callable(found):
        raise ModelSourceError(f"model.factory: {module_name} has no function {function!r}")
    return found


def factory_model(cfg: ModelConfig, vocab_size: int) -> nn.Module:
    """The user's model from ``model.factory``, given ablate's norm builder; checked to map
    (1, 2) ids to (1, 2, vocab_size) logits."""
    assert cfg.factory is not None
    model = resolve_factory(cfg.factory)(cfg, vocab_size, lambda dim: build_norm(cfg.norm, dim))
    if not isinstance(model, nn.Module):
        raise ModelSourceError(
            f"model.factory: {cfg.factory} returned {type(model).__name__}, not a torch nn.Module"
        )
    with torch.no_grad():
        logits = model(torch.zeros(1, 2, dtype=torch.long))
    if not isinstance(logits, torch.Tensor) or tuple(logits.shape) != (1, 2, vocab_size):
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ModelSourceError(
            f"model.factory: {cfg.factory}'s model maps ids (1, 2) to {got}; it must give "
            f"logits (B, T, vocab_size) = (1, 2, {vocab_size})"
        )
    return model
