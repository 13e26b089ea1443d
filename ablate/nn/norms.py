"""Normalization layers and their registry: LayerNorm, RMSNorm, DyT; bias, eps, fp32 reduction.

Every layer shares one shape: a learnable gain ``weight`` (ones at init) and an optional ``bias``
(zeros at init), so parameters keep the same names across norm kinds and the model can initialize
every shared parameter identically; a kind may own more (DyT's scalar ``alpha``), and
:meth:`_Norm.reset_parameters` sets them all. Adding a norm is one class with the
``@register("name")`` line here, plus its name in :data:`ablate.core.config.NormKind` (the config
stays torch-free; a test checks the two lists agree).

When ``fp32_reduction`` is set and the input is bf16/fp16, the statistics (mean, variance or
mean square) are computed in fp32 and the normalized value is cast back before the affine step,
the practice the sources recommend for low precision. With ``fp32_reduction`` off, a bf16/fp16
input is reduced in its own dtype op by op (torch's fused CPU LayerNorm would silently
accumulate in fp32, hiding the difference under test).

``impl`` picks the kernel (see :mod:`ablate.nn.fast_norms`): RMSNorm runs the C++ kernel on CPU
and ``F.rms_norm`` on CUDA under ``auto``; LayerNorm runs ``F.layer_norm`` (``auto``/``torch``),
ablate's C++ kernel (``cpp``: the same bits at any thread count) or the op-by-op formula
(``reference``). Each layer remembers the implementation its last
forward used (``used_impl``), which every run records.

Example::

    >>> import torch
    >>> from ablate.core.config import NormConfig
    >>> norm = build_norm(NormConfig(kind="rmsnorm", eps=1e-12), 2)
    >>> norm(torch.tensor([[1.0, 2.0]])).detach().round(decimals=3)
    tensor([[0.6320, 1.2650]])
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ablate.core.config import NormConfig
from ablate.nn.fast_norms import (
    AutoOrder,
    layer_norm_cpp,
    resolve,
    rms_norm_cpp,
    rms_norm_torch,
)

LOW_PRECISION = (torch.bfloat16, torch.float16)


class _Norm(nn.Module):
    """Shared parameters and affine step of every norm over the last dimension."""

    default_bias = False  # the kind's usual choice when the config leaves ``bias`` unset

    def __init__(
        self, dim: int, eps: float, bias: bool, fp32_reduction: bool, impl: str = "auto"
    ) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.fp32_reduction = fp32_reduction
        self.impl = impl
        self.used_impl: str | None = None
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Gain one, bias zero (the state at construction)."""
        self.weight.fill_(1.0)
        if self.bias is not None:
            self.bias.zero_()

    def native_reduction(self, x: torch.Tensor) -> bool:
        """True when a low-precision input must be reduced in its own dtype, op by op."""
        return x.dtype in LOW_PRECISION and not self.fp32_reduction

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """The normalized input before gain and bias, in ``x``'s dtype."""
        raise NotImplementedError

    def affine(self, y: torch.Tensor) -> torch.Tensor:
        """``y`` plus the bias, if any."""
        return y + self.bias.to(y.dtype) if self.bias is not None else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.used_impl = "reference"
        return self.reference(x)

    def reference(self, x: torch.Tensor) -> torch.Tensor:
        """The formula op by op: normalize (in fp32 if asked), gain, bias."""
        if self.fp32_reduction and x.dtype in LOW_PRECISION:
            y = self.normalize(x.float()).to(x.dtype)
        else:
            y = self.normalize(x)
        return self.affine(y * self.weight.to(y.dtype))

    def extra_repr(self) -> str:
        return (
            f"{self.dim}, eps={self.eps}, bias={self.bias is not None}, "
            f"fp32_reduction={self.fp32_reduction}, impl={self.impl}"
        )


NORMS: dict[str, type[_Norm]] = {}


def register(name: str) -> Callable[[type[_Norm]], type[_Norm]]:
    """Class decorator: make a norm buildable as ``model.norm.kind: name``."""

    def add(cls: type[_Norm]) -> type[_Norm]:
        NORMS[name] = cls
        return cls

    return add


# LayerNorm's ``auto``: torch's fused kernel on every device (the C++ one is ``cpp``, opt-in)
LN_AUTO: AutoOrder = {"cpu": ("torch",), "cuda": ("torch",)}


@register("layernorm")
class LayerNorm(_Norm):
    """y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias (Ba et al. 2016)."""

    default_bias = True

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        centered = x - x.mean(dim=-1, keepdim=True)
        return centered * torch.rsqrt(centered.pow(2).mean(dim=-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        impl = "reference" if self.native_reduction(x) else resolve(self.impl, x.device, LN_AUTO)
        if impl == "reference":
            return super().forward(x)
        self.used_impl = impl  # both accumulate in fp32 for bf16/fp16: what fp32_reduction asks
        if impl == "cpp":
            return layer_norm_cpp(x, self.weight, self.bias, self.eps)
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.layer_norm(x, (self.dim,), self.weight.to(x.dtype), bias, self.eps)


@register("rmsnorm")
class RMSNorm(_Norm):
    """y = x / sqrt(mean(x^2) + eps) * weight (+ bias) (Zhang & Sennrich 2019)."""

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        impl = "reference" if self.native_reduction(x) else resolve(self.impl, x.device)
        if impl == "reference":
            return super().forward(x)
        self.used_impl = impl
        kernel = rms_norm_cpp if impl == "cpp" else rms_norm_torch
        return self.affine(kernel(x, self.weight, self.eps))


@register("dyt")
class DyT(_Norm):
    """Dynamic Tanh, y = tanh(alpha * x) * weight + bias (Zhu et al. 2025): no statistics at all.

    ``alpha`` is one learnable scalar, ``alpha_init`` at the start (0.5, the paper's default);
    ``eps`` is unused. With ``fp32_reduction`` a bf16/fp16 input is squashed in fp32.
    """

    default_bias = True

    def __init__(
        self,
        dim: int,
        eps: float,
        bias: bool,
        fp32_reduction: bool,
        impl: str = "auto",
        alpha_init: float = 0.5,
    ) -> None:
        super().__init__(dim, eps, bias, fp32_reduction, impl)
        self.alpha_init = alpha_init
        self.alpha = nn.Parameter(torch.full((), alpha_init))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        super().reset_parameters()
        self.alpha.fill_(self.alpha_init)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.alpha.to(x.dtype) * x)


def build_norm(cfg: NormConfig, dim: int) -> _Norm:
    """The norm ``cfg`` describes, over ``dim`` features (its section of the config: kind, eps,
    bias, fp32 reduction, kernel; DyT's ``alpha_init``)."""
    cls = NORMS[cfg.kind]
    extra = (
        {"alpha_init": cfg.alpha_init} if "alpha_init" in inspect.signature(cls).parameters else {}
    )
    return cls(
        dim,
        eps=cfg.eps,
        bias=bool(cfg.bias),
        fp32_reduction=cfg.fp32_reduction,
        impl=cfg.impl,
        **extra,
    )


def used_impls(model: nn.Module) -> list[str]:
    """The implementations the model's norms used in their last forward, sorted, each once:
    ablate's norms name theirs (``torch``, ``cpp``, ...), another library's norm its package
    and class (``litgpt.RMSNorm``, ``torch.LayerNorm``)."""
    return sorted({impl for m in model.modules() if is_norm(m) and (impl := impl_of(m))})


def impl_of(module: nn.Module) -> str | None:
    """What computed this norm: ablate's chosen kernel, or a foreign class's package.name."""
    if isinstance(module, _Norm):
        return module.used_impl
    return f"{type(module).__module__.split('.')[0]}.{type(module).__name__}"


FOREIGN_NORMS = (nn.LayerNorm, nn.RMSNorm, nn.GroupNorm)


def is_norm(module: nn.Module) -> bool:
    """True for any normalization layer: this registry's, torch's (LayerNorm, RMSNorm,
    GroupNorm) and another library's whose class name ends in ``Norm`` (litgpt's RMSNorm)."""
    if isinstance(module, (_Norm, *FOREIGN_NORMS)):
        return True
    return type(module).__name__.endswith("Norm")
