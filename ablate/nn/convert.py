"""Checkpoint conversion: give a trained model other norms with a documented mapping.

A LayerNorm checkpoint cannot simply be switched to RMSNorm: LayerNorm subtracts the mean and
RMSNorm does not, and no copy of parameters makes up for that. :func:`convert_weights` maps what
can be mapped and the ``convert:`` section of an experiment measures the rest, as the jump of
the validation loss right after the swap and its recovery over continued training.

The mapping, norm by norm (the source and target have the same placement, so the same norms):

- every parameter outside the norms is copied unchanged;
- the gain (``weight``) is copied;
- a bias the target norm also has is copied;
- a bias the target lacks is, with ``bias: fold``, added through the linear layer the norm feeds
  directly, where there is one: the input norms of Pre-Norm and Sandwich blocks feed
  ``attn.qkv`` and ``mlp.fc``, and ``W (g n + b) + c = W (g n) + (c + W b)`` is exact for the
  bias term. Elsewhere (the final norm feeds the bias-free LM head; Post-Norm, DeepNorm and
  Sandwich output norms feed the residual stream; QK-norms feed the dot product) it is dropped.
  With ``bias: drop`` it is always dropped;
- a kind's own scalars (DyT's ``alpha``) have no counterpart in the other kinds: a target
  starts them at their init key (``alpha_init``), a source's that the target lacks are dropped.

Example::

    >>> from ablate.core.config import ModelConfig
    >>> from ablate.nn.model import build_gpt
    >>> ln = build_gpt(ModelConfig(d_model=16, n_layers=1, n_heads=2, seq_len=8), 32, seed=0)
    >>> rms_cfg = ModelConfig(d_model=16, n_layers=1, n_heads=2, seq_len=8,
    ...                       norm={"kind": "rmsnorm"})
    >>> rms = build_gpt(rms_cfg, 32, seed=1)
    >>> sorted(convert_weights(ln, rms, "fold")["folded"])
    ['blocks.0.norm_attn.bias', 'blocks.0.norm_mlp.bias']
"""

from __future__ import annotations

import torch
from torch import nn

from ablate.nn.model import GPT
from ablate.nn.norms import is_norm

BIAS_MAPPINGS = ("fold", "drop")


class ConversionError(ValueError):
    """The two models cannot be mapped onto each other (different shape or placement)."""


def norm_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Every norm layer of ``model`` by module name."""
    return {name: m for name, m in model.named_modules() if is_norm(m)}


Consumer = tuple[nn.Linear, float]  # a linear layer and the scale of the norm output it reads


def consumer_of(model: GPT, norm_name: str) -> Consumer | None:
    """The linear layer (with a bias) that ``norm_name``'s output feeds directly, if any, and
    the factor (LayerNorm Scaling's) on the way."""
    if not norm_name.startswith("blocks."):
        return None
    block_name, _, local = norm_name.partition(".")[2].partition(".")
    block = model.blocks[int(block_name)]
    if block.placement not in ("pre", "sandwich"):
        return None
    consumers = {"norm_attn": block.attn.qkv, "norm_mlp": block.mlp.fc}
    linear = consumers.get(local)
    if linear is None or linear.bias is None:
        return None
    return linear, block.input_scale


@torch.no_grad()
def convert_weights(source: GPT, target: GPT, bias: str = "fold") -> dict[str, list[str]]:
    """Load ``source``'s weights into ``target`` (other norms, same placement); what happened.

    Returns the parameter names that were ``copied``, ``folded`` into a linear bias and
    ``dropped``. ``target`` is changed in place.
    """
    if bias not in BIAS_MAPPINGS:
        raise ConversionError(f"bias mapping {bias!r}; allowed: {', '.join(BIAS_MAPPINGS)}")
    src_norms, tgt_norms = norm_modules(source), norm_modules(target)
    if set(src_norms) != set(tgt_norms):
        raise ConversionError(
            "the models have different norms (placement or qk_norm differ): "
            f"{sorted(set(src_norms) ^ set(tgt_norms))}"
        )
    norm_params = {f"{m}.{p}" for m, mod in src_norms.items() for p, _ in mod.named_parameters()}
    target_params = dict(target.named_parameters())
    report: dict[str, list[str]] = {"copied": [], "folded": [], "dropped": []}
    for name, param in source.named_parameters():
        if name in norm_params:
            continue
        if name not in target_params or target_params[name].shape != param.shape:
            raise ConversionError(
                f"{name}: not in the target model with shape {tuple(param.shape)}"
            )
        target_params[name].copy_(param)
        report["copied"].append(name)
    for name, src in src_norms.items():
        _map_norm(name, src, tgt_norms[name], consumer_of(target, name), bias, report)
    return report


def _map_norm(
    name: str,
    src: nn.Module,
    tgt: nn.Module,
    consumer: Consumer | None,
    bias: str,
    report: dict[str, list[str]],
) -> None:
    """Gain copied; bias copied, folded into ``consumer`` or dropped; scalars the target
    lacks dropped."""
    tgt.weight.copy_(src.weight)
    report["copied"].append(f"{name}.weight")
    if src.bias is not None:
        if tgt.bias is not None:
            tgt.bias.copy_(src.bias)
            report["copied"].append(f"{name}.bias")
        elif bias == "fold" and consumer is not None:
            linear, scale = consumer
            linear.bias.add_(linear.weight.float() @ (scale * src.bias.float()))
            report["folded"].append(f"{name}.bias")
        else:
            report["dropped"].append(f"{name}.bias")
    for scalar in scalars_of(src):
        if scalar not in scalars_of(tgt):
            report["dropped"].append(f"{name}.{scalar}")


def scalars_of(norm: nn.Module) -> list[str]:
    """A norm's learnable scalars (its kind's, e.g. DyT's ``alpha``): its parameters beside the
    gain and bias."""
    return [p for p, _ in norm.named_parameters(recurse=False) if p not in ("weight", "bias")]
