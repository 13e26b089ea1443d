"""Normalization layers and their registry: LayerNorm and RMSNorm with bias, eps and fp32 reduction.

Both layers share one shape: a learnable gain ``weight`` (ones at init) and an optional ``bias``
(zeros at init), so parameters keep the same names across norm kinds and the model can initialize
every shared parameter identically. When ``fp32_reduction`` is set and the input is bf16/fp16,
the statistics (mean, variance or mean square) are computed in fp32 and the normalized value is
cast back before the affine step, the practice the sources recommend for low precision. With
``fp32_reduction`` off, a bf16/fp16 input is reduced in its own dtype op by op (torch's fused
CPU LayerNorm would silently accumulate in fp32, hiding the difference under test).

``impl`` picks the kernel (see :mod:`ablate.fast_norms`): RMSNorm runs the C++ kernel on CPU
and ``F.rms_norm`` on CUDA under ``auto``; LayerNorm runs ``F.layer_norm`` (``auto``/``torch``)
or the op-by-op formula (``reference``). Each layer remembers the implementation its last
forward used (``used_impl``), which every run records.

Example::

    >>> import torch
    >>> norm = build_norm("rmsnorm", 2, eps=0.0)
    >>> norm(torch.tensor([[1.0, 2.0]])).detach().round(decimals=3)
    tensor([[0.6320, 1.2650]])
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ablate.fast_norms import resolve, rms_norm_cpp, rms_norm_torch

LOW_PRECISION = (torch.bfloat16, torch.float16)


class _Norm(nn.Module):
    """Shared parameters and affine step of every norm over the last dimension."""

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


class LayerNorm(_Norm):
    """y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias (Ba et al. 2016)."""

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        centered = x - x.mean(dim=-1, keepdim=True)
        return centered * torch.rsqrt(centered.pow(2).mean(dim=-1, keepdim=True) + self.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.impl == "reference" or self.native_reduction(x):
            return super().forward(x)
        self.used_impl = "torch"  # accumulates in fp32 for bf16/fp16: what fp32_reduction asks
        bias = self.bias.to(x.dtype) if self.bias is not None else None
        return F.layer_norm(x, (self.dim,), self.weight.to(x.dtype), bias, self.eps)


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


NORMS: dict[str, type[_Norm]] = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}


def build_norm(
    kind: str,
    dim: int,
    eps: float = 1e-5,
    bias: bool | None = None,
    fp32_reduction: bool = True,
    impl: str = "auto",
) -> _Norm:
    """Instantiate the norm named ``kind``; ``bias=None`` means the kind's usual default."""
    if kind not in NORMS:
        raise ValueError(f"unknown norm kind {kind!r}; allowed: {', '.join(NORMS)}")
    if bias is None:
        bias = kind == "layernorm"
    return NORMS[kind](dim, eps=eps, bias=bias, fp32_reduction=fp32_reduction, impl=impl)


def used_impls(model: nn.Module) -> list[str]:
    """The implementations the model's norms used in their last forward, sorted, each once."""
    return sorted({m.used_impl for m in model.modules() if is_norm(m) and m.used_impl})


def is_norm(module: nn.Module) -> bool:
    """True for any normalization layer built by this registry."""
    return isinstance(module, _Norm)
