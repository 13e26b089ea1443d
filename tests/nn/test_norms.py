"""Norms against torch's reference layers, the worked example and their invariances."""

from __future__ import annotations

import math

import pytest
import torch

from ablate.core.config import NormConfig
from ablate.nn.norms import KERNELS, build_norm

ALPHA_KEYS = ("alpha_init", "alpha_init_attn", "alpha_init_mlp", "alpha_init_final")


def _norm(kind: str, dim: int, **settings: object) -> torch.nn.Module:
    """The norm of ``kind`` with these ``model.norm`` settings, as the model builds it."""
    return build_norm(NormConfig(kind=kind, **settings), dim)


def _x(shape: tuple[int, ...] = (4, 7, 32), seed: int = 0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 3 + 0.5


def _randomize(norm: torch.nn.Module, seed: int = 1) -> None:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in norm.parameters():
            p.copy_(torch.randn(p.shape, generator=g))


def test_layernorm_equals_torch_layernorm_values_and_grads() -> None:
    ours, ref = _norm("layernorm", 32, eps=1e-5, bias=True), torch.nn.LayerNorm(32)
    _randomize(ours)
    ref.load_state_dict(ours.state_dict())
    x1, x2 = _x().requires_grad_(), _x().requires_grad_()
    y1, y2 = ours(x1), ref(x2)
    assert torch.allclose(y1, y2, atol=1e-6, rtol=0)
    y1.pow(2).sum().backward()
    y2.pow(2).sum().backward()
    assert torch.allclose(x1.grad, x2.grad, atol=1e-5, rtol=1e-6)
    assert torch.allclose(ours.weight.grad, ref.weight.grad, atol=1e-4, rtol=1e-6)


def test_rmsnorm_equals_torch_rmsnorm() -> None:
    ours, ref = (
        _norm("rmsnorm", 32, eps=1e-6, bias=False),
        torch.nn.RMSNorm(32, eps=1e-6),
    )
    _randomize(ours)
    ref.load_state_dict(ours.state_dict())
    x = _x()
    assert torch.allclose(ours(x), ref(x), atol=1e-6, rtol=0)


def test_layernorm_without_bias_has_no_bias_parameter() -> None:
    assert [n for n, _ in _norm("layernorm", 8, bias=False).named_parameters()] == ["weight"]
    assert [n for n, _ in _norm("rmsnorm", 8).named_parameters()] == ["weight"]
    assert [n for n, _ in _norm("rmsnorm", 8, bias=True).named_parameters()] == [
        "weight",
        "bias",
    ]


def test_worked_example_from_the_sources() -> None:
    x = torch.tensor([[1.0, 2.0]])
    ln = _norm("layernorm", 2, eps=1e-12, bias=True)(x)
    rms = _norm("rmsnorm", 2, eps=1e-12, bias=False)(x)
    assert torch.allclose(ln, torch.tensor([[-1.0, 1.0]]), atol=1e-6)
    assert torch.allclose(rms, torch.tensor([[1 / math.sqrt(2.5), 2 / math.sqrt(2.5)]]), atol=1e-6)
    assert [round(v, 3) for v in rms[0].tolist()] == [0.632, 1.265]


def test_rmsnorm_output_has_unit_mean_square_before_gain() -> None:
    y = _norm("rmsnorm", 64, eps=1e-8, bias=False)(_x((10, 64)))
    assert torch.allclose(y.pow(2).mean(-1), torch.ones(10), atol=1e-5)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_scale_invariance(kind: str) -> None:
    norm = _norm(kind, 32, eps=1e-12)
    _randomize(norm)
    x = _x()
    assert torch.allclose(norm(x), norm(7.5 * x), atol=1e-5)
    assert not torch.allclose(norm(x), norm(-x), atol=1e-3)  # a negative scale flips the sign


def test_shift_invariance_layernorm_only() -> None:
    x = _x()
    ln, rms = _norm("layernorm", 32, eps=1e-12), _norm("rmsnorm", 32, eps=1e-12)
    assert torch.allclose(ln(x), ln(x + 4.0), atol=1e-4)
    assert (rms(x) - rms(x + 4.0)).abs().max() > 0.1


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_zero_input_is_finite(kind: str) -> None:
    y = _norm(kind, 16)(torch.zeros(3, 16))
    assert torch.isfinite(y).all()
    assert torch.equal(y, torch.zeros(3, 16))


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_fp32_reduction_under_bf16_is_closer_to_fp32(kind: str) -> None:
    x = (_x((64, 256)) * 50 + 100).bfloat16()  # large mean: bf16 statistics lose precision
    exact = _norm(kind, 256)(x.float())
    fp32 = _norm(kind, 256, fp32_reduction=True)(x)
    native = _norm(kind, 256, fp32_reduction=False)(x)
    assert fp32.dtype == native.dtype == torch.bfloat16
    err_fp32 = (fp32.float() - exact).abs().mean()
    err_native = (native.float() - exact).abs().mean()
    assert err_fp32 < 0.8 * err_native
    assert err_fp32 < 2e-3  # only the final rounding to bf16 remains


def test_unknown_kind_names_the_allowed_ones() -> None:
    from ablate.core.norm_kinds import KINDS

    with pytest.raises(ValueError, match="'layernorm', 'rmsnorm'") as caught:
        _norm("batchnorm", 4)
    assert all(f"'{kind}'" in str(caught.value) for kind in KINDS)


def test_dyt_is_tanh_of_alpha_x_times_gain_plus_bias() -> None:
    norm = _norm("dyt", 32, alpha_init=0.7)
    assert [n for n, _ in norm.named_parameters()] == ["weight", "bias", "alpha"]
    assert norm.alpha.detach().item() == pytest.approx(0.7)
    _randomize(norm)
    x = _x().double()
    expected = torch.tanh(norm.alpha.double() * x) * norm.weight.double() + norm.bias.double()
    assert torch.allclose(norm(x.float()).double(), expected, atol=1e-6, rtol=0)
    norm.reset_parameters()
    assert norm.alpha.detach().item() == pytest.approx(0.7) and bool((norm.weight == 1).all())


def test_dyt_gradient_reaches_alpha() -> None:
    norm = _norm("dyt", 8, alpha_init=0.5)
    x = _x((3, 8))
    norm(x).sum().backward()
    # d/dalpha sum tanh(alpha x) = sum x (1 - tanh^2(alpha x))
    expected = (x * (1 - torch.tanh(0.5 * x) ** 2)).sum()
    assert float(norm.alpha.grad) == pytest.approx(float(expected), rel=1e-5)


@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("bias", [True, False])
def test_layernorm_and_rmsnorm_follow_their_formula_with_and_without_bias(
    kind: str, bias: bool
) -> None:
    norm = _norm(kind, 32, eps=1e-5, bias=bias, impl="auto")
    _randomize(norm)
    x = _x().double()
    centered = x - x.mean(-1, keepdim=True) if kind == "layernorm" else x
    y = centered / torch.sqrt(centered.pow(2).mean(-1, keepdim=True) + 1e-5)
    y = y * norm.weight.double() + (norm.bias.double() if bias else 0.0)
    assert torch.allclose(norm(x.float()).double(), y, atol=2e-5, rtol=0)


def test_every_kind_builds_with_its_bias_default_scalars_and_kernels() -> None:
    from typing import get_args

    from ablate.core.config import NormKind
    from ablate.core.norm_kinds import KINDS

    assert get_args(NormKind) == tuple(KINDS)
    for name, kind in KINDS.items():
        built = _norm(name, 4)
        assert NormConfig(kind=name).bias == (built.bias is not None) == kind.bias
        owned = [n for n, _ in built.named_parameters() if n not in ("weight", "bias")]
        assert owned == list(kind.scalars)
        assert tuple(KERNELS.get(name, {})) == kind.kernels  # each declared kernel exists
        assert set(kind.reads) | set(kind.unused()) == {"eps", *ALPHA_KEYS}


def _rms_error(scale: float, eps: float, fp32_reduction: bool) -> float:
    """Largest error of RMSNorm on fp16 inputs of RMS ``scale`` against the float64 formula,
    relative to the largest output (inf when an output is not finite)."""
    x = torch.randn(8, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64) * scale
    reference = x / (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    cfg = NormConfig(kind="rmsnorm", eps=eps, fp32_reduction=fp32_reduction, impl="reference")
    y = build_norm(cfg, 64)(x.half()).detach().double()
    if not torch.isfinite(y).all():
        return math.inf
    return float((y - reference).abs().max() / reference.abs().max())


def test_fp16_statistics_underflow_without_the_fp32_reduction() -> None:
    """The seed's failure: in fp16, x² of small activations underflows (and eps 1e-8 is 0), so
    the op-by-op RMSNorm divides by ~0; accumulating the statistics in fp32 matches float64."""
    for scale in (1e-4, 1e-3):
        for eps in (1e-5, 1e-8):
            assert _rms_error(scale, eps, fp32_reduction=True) < 1e-3
    assert _rms_error(1e-4, 1e-8, fp32_reduction=False) == math.inf  # x² and eps round to 0
    assert _rms_error(1e-3, 1e-8, fp32_reduction=False) > 3e-3  # x² subnormal: off scale
