"""Normalization layers and their registry: LayerNorm and RMSNorm with bias, eps and fp32 reduction.

Both layers share one shape: a learnable gain ``weight`` (ones at init) and an optional ``bias``
(zeros at init), so parameters keep the same names across norm kinds and the model can initialize
every shared parameter identically. When ``fp32_reduction`` is set and the input is bf16/fp16,
the statistics (mean, variance or mean square) are computed in fp32 and the normalized value is
cast back before the affine step, the practice the sources recommend for low precision. With
``fp32_reduction`` off, a bf16/fp16 input is reduced in its own dtype op by op (torch's fused
CPU LayerNorm would silently accumulate in fp32, hiding the difference under test).

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

LOW_PRECISION = (torch.bfloat16, torch.float16)


class _Norm(nn.Module):
    """Shared parameters and affine step of every norm over the last dimension."""

    def __init__(self, dim: int, eps: float, bias: bool, fp32_reduction: bool) -> None:
        super().__init__()
        self.dim = dim
        self.eps = eps
        self.fp32_reduction = fp32_reduction
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim)) if bias else None

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """The normalized input before gain and bias, in ``x``'s dtype."""
        raise NotImplementedError

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.fp32_reduction and x.dtype in LOW_PRECISION:
            y = self.normalize(x.float()).to(x.dtype)
        else:
            y = self.normalize(x)
        y = y * self.weight.to(y.dtype)
        if self.bias is not None:
            y = y + self.bias.to(y.dtype)
        return y

    def extra_repr(self) -> str:
        return (
            f"{self.dim}, eps={self.eps}, bias={self.bias is not None}, "
            f"fp32_reduction={self.fp32_reduction}"
        )


class LayerNorm(_Norm):
    """y = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias (Ba et al. 2016)."""

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        if x.dtype in LOW_PRECISION:  # native-dtype reduction, rounded after every op
            centered = x - x.mean(dim=-1, keepdim=True)
            return centered * torch.rsqrt(centered.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return F.layer_norm(x, (self.dim,), None, None, self.eps)


class RMSNorm(_Norm):
    """y = x / sqrt(mean(x^2) + eps) * weight (+ bias) (Zhang & Sennrich 2019)."""

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)


NORMS: dict[str, type[_Norm]] = {"layernorm": LayerNorm, "rmsnorm": RMSNorm}


def build_norm(
    kind: str, dim: int, eps: float = 1e-5, bias: bool | None = None, fp32_reduction: bool = True
) -> _Norm:
    """Instantiate the norm named ``kind``; ``bias=None`` means the kind's usual default."""
    if kind not in NORMS:
        raise ValueError(f"unknown norm kind {kind!r}; allowed: {', '.join(NORMS)}")
    if bias is None:
        bias = kind == "layernorm"
    return NORMS[kind](dim, eps=eps, bias=bias, fp32_reduction=fp32_reduction)


def is_norm(module: nn.Module) -> bool:
    """True for any normalization layer built by this registry."""
    return isinstance(module, _Norm)
