"""Normalization layers: one :class:`Norm` module that computes any kind of
:mod:`ablate.core.norm_kinds` (LayerNorm, RMSNorm, DyT); bias, eps, fp32 reduction, kernels.

Every layer shares one shape: a learnable gain ``weight`` (ones at init) and an optional ``bias``
(zeros at init), so parameters keep the same names across norm kinds and the model can initialize
every shared parameter identically; a kind may own learnable scalars (DyT's ``alpha``), each
started from a key of ``model.norm``, and :meth:`Norm.reset_parameters` sets them all. The kind's
entry in :data:`ablate.core.norm_kinds.KINDS` is all a kind is: adding one needs nothing here
unless it has a fast kernel (:data:`KERNELS`).

When ``fp32_reduction`` is set and the input is bf16/fp16, the statistics (mean, variance or
mean square) are computed in fp32 and the normalized value is cast back before the affine step,
the practice the sources recommend for low precision. With ``fp32_reduction`` off, a bf16/fp16
input is reduced in its own dtype op by op (torch's fused CPU LayerNorm would silently
accumulate in fp32, hiding the difference under test).

``impl`` picks the kernel for kinds that have one (see :mod:`ablate.nn.fast_norms`): RMSNorm
runs the C++ kernel on CPU and ``F.rms_norm`` on CUDA under ``auto``; LayerNorm runs
``F.layer_norm`` (``auto``/``torch``), ablate's C++ kernel (``cpp``: the same bits at any thread
count) or the op-by-op formula (``reference``); a kind without kernels (DyT) always runs its
formula. Each layer remembers the implementation its last forward used (``used_impl``), which
every run records.

Example::

    >>> import torch
    >>> from ablate.core.config import NormConfig
    >>> norm = build_norm(NormConfig(kind="rmsnorm", eps=1e-12), 2)
    >>> norm(torch.tensor([[1.0, 2.0]])).detach().round(decimals=3)
    tensor([[0.6320, 1.2650]])
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
import torch.nn.functional as F
from torch import nn

from ablate.core.config import NormConfig
from ablate.core.norm_kinds import KINDS
from ablate.nn.fast_norms import (
    AUTO_ORDER,
    AutoOrder,
    layer_norm_cpp,
    resolve,
    rms_norm_cpp,
    rms_norm_torch,
)

LOW_PRECISION = (torch.bfloat16, torch.float16)


class Norm(nn.Module):
    """A norm of one kind over the last dimension: its formula, gain, bias and scalars."""

    def __init__(
        self,
        kind: str,
        dim: int,
        eps: float,
        bias: bool,
        fp32_reduction: bool,
        impl: str = "auto",
        inits: Mapping[str, float] | None = None,
    ) -> None:
        super().__init__()
        self.kind = kind
        self.spec = KINDS[kind]
        self.dim = dim
        self.eps = eps
        self.fp32_reduction = fp32_reduction
        self.impl = impl
        self.used_impl: str | None = None
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None
        given = inits or {}
        self.inits = {name: float(given[key]) for name, key in self.spec.scalars.items()}
        for name, value in self.inits.items():
            self.register_parameter(name, nn.Parameter(torch.full((), value)))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Gain one, bias zero, scalars at their inits (the state at construction)."""
        self.weight.fill_(1.0)
        if self.bias is not None:
            self.bias.zero_()
        for name, value in self.inits.items():
            getattr(self, name).fill_(value)

    def native_reduction(self, x: torch.Tensor) -> bool:
        """True when a low-precision input must be reduced in its own dtype, op by op."""
        return x.dtype in LOW_PRECISION and not self.fp32_reduction

    def affine(self, y: torch.Tensor) -> torch.Tensor:
        """``y`` plus the bias, if any."""
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        kernels = KERNELS.get(self.kind, {})
        if not kernels or self.native_reduction(x):
            impl = "reference"
        else:
            impl = resolve(self.impl, x.device, AUTO_ORDERS.get(self.kind, AUTO_ORDER))
        self.used_impl = impl  # the kernels accumulate in fp32 for bf16/fp16: fp32_reduction
        return kernels[impl](self, x) if impl != "reference" else self.reference(x)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The formula op by op: normalize (in fp32 if asked), gain, bias."""
        if self.fp32_reduction and x.dtype in LOW_PRECISION:
            y = self.spec.formula(x.float(), self).to(x.dtype)
        else:
            y = self.spec.formula(x, self)
        return self.affine(y * self.weight.to(y.dtype))

    def extra_repr(self) -> str:
        return (
            f"{self.kind}, {self.dim}, eps={self.eps}, bias={self.bias is not None}, "
            f"fp32_reduction={self.fp32_reduction}, impl={self.impl}"
        )


Kernel = Callable[[Norm, torch.Tensor], torch.Tensor]


def _layer_norm_torch(norm: Norm, x: torch.Tensor) -> torch.Tensor:
    bias = norm.bias.to(x.dtype) if norm.bias is not None else None
    return F.layer_norm(x, (norm.dim,), norm.weight.to(x.dtype), bias, norm.eps)


def _layer_norm_cpp(norm: Norm, x: torch.Tensor) -> torch.Tensor:
    return layer_norm_cpp(x, norm.weight, norm.bias, norm.eps)


def _rms_norm_torch(norm: Norm, x: torch.Tensor) -> torch.Tensor:
    return norm.affine(rms_norm_torch(x, norm.weight, norm.eps))


def _rms_norm_cpp(norm: Norm, x: torch.Tensor) -> torch.Tensor:
    return norm.affine(rms_norm_cpp(x, norm.weight, norm.eps))


# the kernels of the kinds that have them (a kind's ``kernels``; a test holds the two equal)
KERNELS: dict[str, dict[str, Kernel]] = {
    "layernorm": {"torch": _layer_norm_torch, "cpp": _layer_norm_cpp},
    "rmsnorm": {"torch": _rms_norm_torch, "cpp": _rms_norm_cpp},
}
# ``auto`` per kind where it is not fast_norms' AUTO_ORDER: LayerNorm's is torch's fused kernel
# on every device (the C++ one is ``cpp``, opt-in)
AUTO_ORDERS: dict[str, AutoOrder] = {"layernorm": {"cpu": ("torch",), "cuda": ("torch",)}}


def build_norm(cfg: NormConfig, dim: int, site: str | None = None) -> Norm:
    """The norm ``cfg`` describes, over ``dim`` features (its section of the config: kind, eps,
    bias, fp32 reduction, kernel, and the keys its kind's scalars start from, at ``site``:
    attn, mlp or final; :meth:`NormConfig.init_of`)."""
    scalars = KINDS[cfg.kind].scalars.values()
    return Norm(
        cfg.kind,
        dim,
        eps=cfg.eps,
        bias=bool(cfg.bias),
        fp32_reduction=cfg.fp32_reduction,
        impl=cfg.impl,
        inits={key: cfg.init_of(key, site) for key in scalars},
    )


def used_impls(model: nn.Module) -> list[str]:
    """The implementations the model's norms used in their last forward, sorted, each once:
    ablate's norms name theirs (``torch``, ``cpp``, ...), another library's norm its package
    and class (``litgpt.RMSNorm``, ``torch.LayerNorm``)."""
    return sorted({impl for m in model.modules() if is_norm(m) and (impl := impl_of(m))})


def impl_of(module: nn.Module) -> str | None:
    """What computed this norm: ablate's chosen kernel, or a foreign class's package.name."""
    if isinstance(module, Norm):
        return module.used_impl
    return f"{type(module).__module__.split('.')[0]}.{type(module).__name__}"


FOREIGN_NORMS = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)


def is_norm(module: nn.Module) -> bool:
    """True for any normalization layer: this registry's, torch's (LayerNorm, RMSNorm,
    GroupNorm) and another library's whose class name ends in ``Norm`` (litgpt's RMSNorm)."""
    if isinstance(module, (Norm, *FOREIGN_NORMS)):
        return True
    return type(module).__name__.endswith("Norm")
