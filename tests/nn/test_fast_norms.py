"""Every norm implementation equals the reference formula; auto picks per device and falls back."""

from __future__ import annotations

import pytest
import torch

from ablate.core.config import NormConfig
from ablate.nn import fast_norms
from ablate.nn.norms import build_norm, used_impls

TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 3e-2}


def _norm(kind: str, dim: int, **settings: object) -> torch.nn.Module:
    """The norm of ``kind`` with these ``model.norm`` settings, as the model builds it."""
    return build_norm(NormConfig(kind=kind, **settings), dim)


def _exact(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """RMSNorm in float64: the formula itself."""
    x64 = x.double()
    y = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-5) * w.double()
    return y + b.double() if b is not None else y


def _inputs(dtype: torch.dtype, shape: tuple[int, ...]) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    x = (3 * torch.randn(shape, generator=gen)).to(dtype)
    grad = torch.randn(shape, generator=gen).to(dtype)
    return x, grad


@pytest.mark.parametrize("impl", ["reference", "torch", "cpp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(4, 7, 33), (257, 128)])
def test_rmsnorm_implementations_equal_the_formula(
    impl: str, dtype: torch.dtype, bias: bool, shape: tuple[int, ...]
) -> None:
    dim = shape[-1]
    norm = _norm("rmsnorm", dim, bias=bias, impl=impl)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * torch.randn(dim, generator=torch.Generator().manual_seed(1)))
        if bias:
            norm.bias.copy_(0.1 * torch.randn(dim, generator=torch.Generator().manual_seed(2)))
    x, grad = _inputs(dtype, shape)
    x.requires_grad_()
    y = norm(x)
    assert norm.used_impl == impl and y.dtype == dtype
    y.backward(grad)
    # the same through float64 autograd
    x64 = x.detach().double().requires_grad_()
    w64 = norm.weight.detach().double().requires_grad_()
    b64 = norm.bias.detach().double().requires_grad_() if bias else None
    exact = _exact(x64, w64, b64)
    exact.backward(grad.double())
    tol = TOLERANCE[dtype]
    scale = exact.abs().max().item()
    assert (y.double() - exact).abs().max().item() <= tol * scale
    assert (x.grad.double() - x64.grad).abs().max().item() <= tol * x64.grad.abs().max().item()
    w_err = (norm.weight.grad.double() - w64.grad).abs().max().item()
    assert w_err <= tol * w64.grad.abs().max().item()
    if bias:
        assert torch.allclose(norm.bias.grad.double(), b64.grad, rtol=tol, atol=tol * 10)


def test_cpp_kernel_on_a_non_contiguous_input_and_zero_rows() -> None:
    norm = _norm("rmsnorm", 16, impl="cpp")
    x = torch.randn(16, 8).t()  # (8, 16), not contiguous
    x[0] = 0.0  # a zero row stays finite: eps keeps the square root positive
    ref = _norm("rmsnorm", 16, impl="reference")
    assert torch.allclose(norm(x), ref(x), atol=1e-6)
    assert torch.isfinite(norm(x)).all()


def test_auto_picks_the_cpp_kernel_on_cpu() -> None:
    assert fast_norms.cpp_unavailable_reason() == ""  # this machine builds it
    norm = _norm("rmsnorm", 8)
    norm(torch.randn(2, 8))
    assert norm.used_impl == "cpp"


def test_auto_falls_back_to_the_reference_without_a_compiler(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fast_norms, "_extension", lambda: (None, "OSError: no compiler"))
    norm = _norm("rmsnorm", 8)
    with pytest.warns(UserWarning, match="C.. RMSNorm unavailable"):
        norm(torch.randn(2, 8))
    assert norm.used_impl == "reference"
    with pytest.raises(RuntimeError, match="impl 'cpp' is not available on cpu: OSError"):
        _norm("rmsnorm", 8, impl="cpp")(torch.randn(2, 8))


def test_native_low_precision_reduction_always_uses_the_reference() -> None:
    norm = _norm("rmsnorm", 8, fp32_reduction=False)
    norm(torch.randn(2, 8).bfloat16())
    assert norm.used_impl == "reference"


@pytest.mark.parametrize("impl", ["auto", "torch", "reference", "cpp"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_layernorm_implementations_equal_torch(impl: str, dtype: torch.dtype) -> None:
    norm = _norm("layernorm", 32, impl=impl)
    torch_norm = torch.nn.LayerNorm(32, eps=1e-5)
    with torch.no_grad():
        for p in (norm.weight, norm.bias, torch_norm.weight, torch_norm.bias):
            p.copy_(torch.randn(32, generator=torch.Generator().manual_seed(3)))
    x, _ = _inputs(dtype, (5, 32))
    expected = torch_norm(x.float())
    assert torch.allclose(norm(x).float(), expected, atol=TOLERANCE[dtype] * 10)
    assert norm.used_impl == {"auto": "torch"}.get(impl, impl)  # auto: torch's fused kernel


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(4, 7, 33), (257, 128)])
def test_the_cpp_layernorm_and_its_gradients_equal_the_formula(
    dtype: torch.dtype, bias: bool, shape: tuple[int, ...]
) -> None:
    dim = shape[-1]
    norm = _norm("layernorm", dim, bias=bias, impl="cpp")
    with torch.no_grad():
        norm.weight.copy_(1 + 0.3 * torch.randn(dim, generator=torch.Generator().manual_seed(1)))
        if bias:
            norm.bias.copy_(0.1 * torch.randn(dim, generator=torch.Generator().manual_seed(2)))
    x, grad = _inputs(dtype, shape)
    x = (x + 2).requires_grad_()  # a mean far from zero: the centring matters
    y = norm(x)
    assert norm.used_impl == "cpp" and y.dtype == dtype
    y.backward(grad)
    x64 = x.detach().double().requires_grad_()
    w64 = norm.weight.detach().double().requires_grad_()
    b64 = norm.bias.detach().double().requires_grad_() if bias else None
    exact = torch.nn.functional.layer_norm(x64, (dim,), w64, b64, 1e-5)
    exact.backward(grad.double())
    tol = TOLERANCE[dtype]
    pairs = [(y, exact), (x.grad, x64.grad), (norm.weight.grad, w64.grad)]
    if bias:
        pairs.append((norm.bias.grad, b64.grad))
    for got, want in pairs:
        assert (got.double() - want).abs().max().item() <= tol * want.abs().max().item()


def test_used_impls_lists_what_the_model_ran() -> None:
    model = torch.nn.Sequential(_norm("rmsnorm", 4), _norm("layernorm", 4))
    assert used_impls(model) == []
    model(torch.randn(2, 4))
    assert used_impls(model) == ["cpp", "torch"]
