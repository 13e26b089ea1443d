"""Where generic probes and estimates attach in any decoder: ablate's, litgpt's or a user's.

A model from any source (:mod:`ablate.nn.sources`) is an ``nn.Module`` mapping token ids
(B, T) to logits (B, T, V). What ablate looks for inside it:

- its **blocks**: the longest ``nn.ModuleList`` (ablate: ``blocks``, litgpt: ``transformer.h``);
- its **norms**: every module :func:`ablate.nn.norms.is_norm` recognizes;
- its **embeddings**: the ``nn.Embedding`` modules outside the blocks;
- its **attention logits**, where the model exposes them: an attention module with a
  ``heads(x) -> (q, k, v)`` method (ablate's protocol, which a user's model may follow) or a
  ``scaled_dot_product_attention(q, k, v, mask)`` method (litgpt's). Other models get no
  attention-logit probe.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

import torch
from torch import nn

QKRecord = Callable[[torch.Tensor, torch.Tensor], None]  # (q, k), each (B, H, T, d_head)


class Removable(Protocol):
    """What a hook returns: something to take it off again."""

    def remove(self) -> None: ...


def blocks_of(model: nn.Module) -> tuple[str, nn.ModuleList]:
    """The model's stack of blocks and its qualified name: its longest ``nn.ModuleList``."""
    found: tuple[str, nn.ModuleList] | None = None
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 0:
            if found is None or len(module) > len(found[1]):
                found = (name, module)
    if found is None:
        raise ValueError(f"{type(model).__name__} has no nn.ModuleList of blocks to probe")
    return found


def embeddings_of(model: nn.Module) -> list[nn.Embedding]:
    """The ``nn.Embedding`` modules outside the blocks (token, and learned positions if any)."""
    prefix = blocks_of(model)[0] + "."
    return [
        module
        for name, module in model.named_modules()
        if isinstance(module, nn.Embedding) and not name.startswith(prefix)
    ]


def width_of(model: nn.Module) -> int:
    """The residual width: the token embedding's dimension."""
    embeddings = embeddings_of(model)
    if not embeddings:
        raise ValueError(f"{type(model).__name__} has no nn.Embedding outside its blocks")
    return embeddings[0].embedding_dim


class _Restore:
    """Takes an instance attribute set over a method off again (the class's method returns)."""

    def __init__(self, module: nn.Module, attribute: str) -> None:
        self.module, self.attribute = module, attribute

    def remove(self) -> None:
        self.module.__dict__.pop(self.attribute, None)


def _heads_hook(attention: nn.Module, record: QKRecord) -> Removable:
    def hook(module: nn.Module, inputs: tuple[torch.Tensor, ...], _out: object) -> None:
        with torch.no_grad():  # the queries and keys again, from the attention's own input
            q, k, _ = module.heads(inputs[0])
        record(q, k)

    return attention.register_forward_hook(hook)


def _sdpa_hook(attention: nn.Module, record: QKRecord) -> Removable:
    original = attention.scaled_dot_product_attention

    def wrapped(q: torch.Tensor, k: torch.Tensor, *args: object, **kwargs: object) -> object:
        record(q, k)
        return original(q, k, *args, **kwargs)

    attention.__dict__["scaled_dot_product_attention"] = wrapped
    return _Restore(attention, "scaled_dot_product_attention")


def hook_attention(block: nn.Module, record: QKRecord) -> Removable | None:
    """Have ``record`` see the queries and keys of ``block``'s attention as its dot product
    does (after QK-norm and rotary), or None where the block exposes neither protocol."""
    for module in block.modules():
        if callable(getattr(module, "heads", None)):
            return _heads_hook(module, record)
        if callable(getattr(module, "scaled_dot_product_attention", None)):
            return _sdpa_hook(module, record)
    return None
