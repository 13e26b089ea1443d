"""The RMSNorm and LayerNorm kernels give the same bytes whatever instruction set they were
compiled for and at any thread count.

The row arithmetic (``csrc/rms_norm_rows.h``, ``csrc/layer_norm_rows.h``) is compiled here on
its own, with ablate's flags,
for two x86-64 levels whose machine code differs (SSE only against AVX2 or AVX-512 registers),
and run on the same inputs; the outputs must be equal to the byte, and equal to what ablate's
torch extension computes on this machine.
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
import torch

from ablate.core.numerics import cpu_flags
from ablate.nn import fast_norms

pytestmark = pytest.mark.skipif(
    platform.machine() != "x86_64" or shutil.which("g++") is None,
    reason="the instruction-set comparison is for x86-64 with g++",
)

WRAPPER = """
#include "layer_norm_rows.h"
#include "rms_norm_rows.h"
namespace { inline float same(float v) { return v; } }
extern "C" void fwd(const float* x, const float* w, float* y, float* r, long n, long d,
                    float eps) {
  ablate_rms::forward_rows(x, w, y, r, 0, n, d, eps, same, same);
}
extern "C" void bwd(const float* g, const float* x, const float* w, const float* r, float* dx,
                    float* partial, float* dw, long n, long d) {
  const long blocks = ablate_rms::blocks_for(n);
  for (long b = 0; b < blocks; ++b) {
    ablate_rms::backward_block(g, x, w, r, dx, partial + b * d, b, n, d, same, same);
  }
  ablate_rms::sum_blocks(partial, dw, blocks, d, 0, d);
}
extern "C" void ln_fwd(const float* x, const float* w, const float* b, float* y, float* m,
                       float* r, long n, long d, float eps) {
  ablate_ln::forward_rows(x, w, b, y, m, r, 0, n, d, eps, same, same);
}
extern "C" void ln_bwd(const float* g, const float* x, const float* w, const float* m,
                       const float* r, float* dx, float* pw, float* pb, float* dw, float* db,
                       long n, long d) {
  const long blocks = ablate_rms::blocks_for(n);
  for (long k = 0; k < blocks; ++k) {
    ablate_ln::backward_block(g, x, w, m, r, dx, pw + k * d, pb + k * d, k, n, d, same, same);
  }
  ablate_rms::sum_blocks(pw, dw, blocks, d, 0, d);
  ablate_rms::sum_blocks(pb, db, blocks, d, 0, d);
}
"""


def _wide_target() -> str:
    """The widest x86-64 level this CPU runs (v4: AVX-512, else v3: AVX2)."""
    flags = set(cpu_flags())
    return "x86-64-v4" if {"avx512f", "avx512bw", "avx512vl"} <= flags else "x86-64-v3"


def _compile(target: str, folder: Path) -> Path:
    source = folder / "wrapper.cpp"
    source.write_text(WRAPPER)
    library = folder / f"rows_{target}.so"
    flags = [f for f in fast_norms.compile_flags(target) if f != "-fopenmp"]
    include = f"-I{fast_norms.CSRC}"
    command = ["g++", *flags, "-shared", "-fPIC", include, str(source), "-o", str(library)]
    subprocess.run(command, check=True)
    return library


def _pointer(array: np.ndarray) -> ctypes.c_void_p:
    return array.ctypes.data_as(ctypes.c_void_p)


def _run(library: Path, x: np.ndarray, w: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
    """y, r, dx and dw of the compiled rows on these inputs."""
    lib = ctypes.CDLL(str(library))
    pointer, size = ctypes.c_void_p, ctypes.c_long
    lib.fwd.argtypes = [pointer] * 4 + [size, size, ctypes.c_float]
    lib.bwd.argtypes = [pointer] * 7 + [size, size]
    n, d = x.shape
    y, dx = np.empty_like(x), np.empty_like(x)
    r = np.empty(n, np.float32)
    partial = np.empty(((n + 63) // 64, d), np.float32)
    dw = np.empty(d, np.float32)
    lib.fwd(_pointer(x), _pointer(w), _pointer(y), _pointer(r), n, d, 1e-5)
    lib.bwd(
        _pointer(g),
        _pointer(x),
        _pointer(w),
        _pointer(r),
        _pointer(dx),
        _pointer(partial),
        _pointer(dw),
        n,
        d,
    )
    return [y, r, dx, dw]


def _bias(w: np.ndarray) -> np.ndarray:
    """The LayerNorm bias of these tests: 0.1 - w / 10."""
    return (0.1 - w / 10).astype(np.float32)


def _run_ln(library: Path, x: np.ndarray, w: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
    """y, mean, r, dx, dw and db of the compiled LayerNorm rows (bias :func:`_bias`)."""
    lib = ctypes.CDLL(str(library))
    pointer, size = ctypes.c_void_p, ctypes.c_long
    lib.ln_fwd.argtypes = [pointer] * 6 + [size, size, ctypes.c_float]
    lib.ln_bwd.argtypes = [pointer] * 10 + [size, size]
    n, d = x.shape
    b = _bias(w)
    y, dx = np.empty_like(x), np.empty_like(x)
    m, r = np.empty(n, np.float32), np.empty(n, np.float32)
    partial = np.empty((2, (n + 63) // 64, d), np.float32)
    dw, db = np.empty(d, np.float32), np.empty(d, np.float32)
    lib.ln_fwd(*map(_pointer, (x, w, b, y, m, r)), n, d, 1e-5)
    lib.ln_bwd(*map(_pointer, (g, x, w, m, r, dx, partial[0], partial[1], dw, db)), n, d)
    return [y, m, r, dx, dw, db]


RUNNERS = {"rmsnorm": _run, "layernorm": _run_ln}


def _inputs(n: int, d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(d)
    x = (3 * rng.standard_normal((n, d))).astype(np.float32)
    w = (1 + 0.3 * rng.standard_normal(d)).astype(np.float32)
    g = rng.standard_normal((n, d)).astype(np.float32)
    return x, w, g


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("kernel_bits")
    return {target: _compile(target, folder) for target in ("x86-64-v2", _wide_target())}


def test_the_two_builds_are_different_machine_code(builds: dict[str, Path]) -> None:
    narrow, wide = builds.values()
    assert narrow.read_bytes() != wide.read_bytes()


@pytest.mark.parametrize("kind", RUNNERS)
@pytest.mark.parametrize("shape", [(3, 33), (130, 128), (70, 1000), (1, 4096)])
def test_every_output_is_the_same_bytes_for_both_instruction_sets(
    builds: dict[str, Path], shape: tuple[int, int], kind: str
) -> None:
    inputs = _inputs(*shape)
    narrow, wide = (RUNNERS[kind](library, *inputs) for library in builds.values())
    for a, b in zip(narrow, wide, strict=True):
        assert a.tobytes() == b.tobytes()


def _extension(kind: str, x: np.ndarray, w: np.ndarray, g: np.ndarray) -> list[np.ndarray]:
    """y and the gradients (dx, dw, and db for LayerNorm) of ablate's torch extension."""
    xt = torch.from_numpy(x).requires_grad_()
    params = [torch.from_numpy(w).requires_grad_()]
    if kind == "layernorm":
        params.append(torch.from_numpy(_bias(w)).requires_grad_())
        y = fast_norms.layer_norm_cpp(xt, *params, 1e-5)
    else:
        y = fast_norms.rms_norm_cpp(xt, *params, 1e-5)
    y.backward(torch.from_numpy(g))
    return [t.numpy() for t in (y.detach(), xt.grad, *(p.grad for p in params))]


# where y, dx, dw (and db) sit among each runner's outputs (the rest are saved statistics)
COMPARED = {"rmsnorm": [0, 2, 3], "layernorm": [0, 3, 4, 5]}


@pytest.mark.parametrize("kind", RUNNERS)
@pytest.mark.parametrize("threads", [1, 2, 4])
def test_the_extension_computes_the_same_bytes_as_the_rows_alone(
    builds: dict[str, Path], threads: int, kind: str
) -> None:
    x, w, g = _inputs(130, 128)
    expected = RUNNERS[kind](builds["x86-64-v2"], x, w, g)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)  # dw is summed over fixed blocks: no thread count changes it
    try:
        got = _extension(kind, x, w, g)
    finally:
        torch.set_num_threads(previous)
    for array, index in zip(got, COMPARED[kind], strict=True):
        assert array.tobytes() == expected[index].tobytes()
