"""The norm kinds (``model.norm.kind``): one entry per kind, and everything else derives from it.

An entry gives the kind's formula, the ``model.norm`` keys it reads, its bias default, the
learnable scalars it owns beside the gain and bias, and the fast kernels ablate has for it.
:mod:`ablate.nn.norms` builds every kind's layer from its entry; the config takes the kinds'
names, bias defaults and unread keys from here (a key a kind does not read is not part of what a
run computes: :meth:`ablate.core.config.NormConfig.as_used`); docs/norms.md's table is
:func:`kinds_table` (a test holds it there). Adding a kind is one :class:`Kind` in :data:`KINDS`
and its row in the docs.

A formula maps the input ``x`` (a float tensor, in the precision the layer computes in) and the
layer (its ``eps`` and scalars as attributes) to the normalized input before gain and bias. It
uses tensor methods only, so this module loads no torch and the config that reads it stays
torch-free. With ``fp32_reduction`` a bf16/fp16 input reaches the formula in fp32.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

Formula = Callable[[Any, Any], Any]  # (input tensor, layer) -> normalized tensor

# keys of model.norm that only some kinds read (a scalar's init key, its per-site keys after it)
KIND_KEYS = ("eps", "alpha_init", "alpha_init_attn", "alpha_init_mlp", "alpha_init_final")


@dataclass(frozen=True)
class Kind:
    """One norm kind: its formula and what it reads, owns and has kernels for."""

    name: str
    formula: Formula
    equation: str  # y = ..., as docs/norms.md writes it (g the gain, b the bias)
    cite: str
    reads: tuple[str, ...] = ("eps",)  # of KIND_KEYS
    bias: bool = True  # the bias default where the config leaves model.norm.bias unset
    # scalar -> key of its init value (per site: the key's _attn, _mlp, _final where set)
    scalars: Mapping[str, str] = field(default_factory=dict)
    kernels: tuple[str, ...] = ()  # torch, cpp: ablate.nn.norms.KERNELS has these for it

    def unused(self) -> tuple[str, ...]:
        """The keys of :data:`KIND_KEYS` this kind does not read."""
        return tuple(key for key in KIND_KEYS if key not in self.reads)


def layer_norm(x: Any, layer: Any) -> Any:
    """(x − mean) / √(var + eps), the variance of the centred input."""
    centered = x - x.mean(dim=-1, keepdim=True)
    return centered * (centered.pow(2).mean(dim=-1, keepdim=True) + layer.eps).rsqrt()


def rms_norm(x: Any, layer: Any) -> Any:
    """x / √(mean(x²) + eps)."""
    return x * (x.pow(2).mean(dim=-1, keepdim=True) + layer.eps).rsqrt()


def dyt(x: Any, layer: Any) -> Any:
    """tanh(α·x): no statistics at all."""
    return (layer.alpha.to(x.dtype) * x).tanh()


KINDS: dict[str, Kind] = {
    kind.name: kind
    for kind in (
        Kind(
            "layernorm",
            layer_norm,
            "(x − mean) / √(var + eps) · g (+ b)",
            "Ba et al. 2016",
            kernels=("torch", "cpp"),
        ),
        Kind(
            "rmsnorm",
            rms_norm,
            "x / √(mean(x²) + eps) · g (+ b)",
            "Zhang & Sennrich 2019",
            bias=False,
            kernels=("torch", "cpp"),
        ),
        Kind(
            "dyt",
            dyt,
            "tanh(α·x) · g (+ b)",
            "Zhu et al. 2025",
            reads=("alpha_init", "alpha_init_attn", "alpha_init_mlp", "alpha_init_final"),
            scalars={"alpha": "alpha_init"},
        ),
    )
}


def with_kernel(impl: str) -> list[str]:
    """The kinds that have the kernel ``impl``."""
    return [name for name, kind in KINDS.items() if impl in kind.kernels]


def kinds_table(defaults: Mapping[str, object]) -> str:
    """docs/norms.md's table of the kinds, from :data:`KINDS` (``defaults``: the config's
    default of each key a scalar starts from)."""
    rows = ["| `kind` | y = | parameters | kernels | source |", "| --- | --- | --- | --- | --- |"]
    for kind in KINDS.values():
        owned = f"gain, bias (default {'on' if kind.bias else 'off'})"
        for scalar, key in kind.scalars.items():
            owned += f", scalar `{scalar}` (init `{key}`, default {defaults[key]})"
        kernels = ", ".join(kind.kernels) or "none (the formula)"
        rows.append(f"| `{kind.name}` | {kind.equation} | {owned} | {kernels} | {kind.cite} |")
    return "\n".join(rows)
