"""ablate's C++ norm kernels (RMSNorm; LayerNorm) and the choice between implementations, per
device.

On this project's CPU torch builds ``F.rms_norm`` is composed of several ops and is 3–8× slower
than the fused ``F.layer_norm`` at the same shape, so an A/B of the norms' *speed* would compare
a fused LayerNorm with an unfused RMSNorm. ablate therefore ships its own RMSNorm kernel for
CPU: one C++ pass per row forward and backward, fp32 accumulation, rows split across threads,
its autograd node in C++ too (``csrc/norms.cpp``), compiled on first use with
``torch.utils.cpp_extension.load_inline`` (about 25 s, once per machine: cached under
``$TORCH_EXTENSIONS_DIR/ablate/``, default ``~/.cache/torch_extensions/ablate/``; later
processes import the built library directly). Its arithmetic (``csrc/rms_norm_rows.h``) has a
fixed summation order and is compiled for a fixed x86-64 level (:func:`build_target`) without
fast-math, so it gives the same bits on every CPU and at every thread count (tested by
compiling it for two instruction sets).

The same extension holds a LayerNorm kernel of the same design (``csrc/layer_norm_rows.h``),
offered as ``impl: cpp`` for LayerNorm: torch's fused CPU LayerNorm sums its weight and bias
gradients in per-thread buffers, so its bits follow the thread count, and this one's do not. Its
forward and backward take 1.1-1.6x torch's time at the experiments' shapes
(reports/bench/layernorm_cpp/), so LayerNorm's ``auto`` stays ``torch`` (the speed comparison
keeps the fastest LayerNorm; docs/results.md says what decides the bits).

Implementations (``model.norm.impl``):

- ``reference``: the op-by-op formula in :mod:`ablate.nn.norms` (autograd backward);
- ``torch``: ``F.rms_norm`` (a fused kernel on CUDA in recent torch), ``F.layer_norm``;
- ``cpp``: the C++ kernels above (CPU; statistics in fp32);
- ``auto``: per device, the fastest *measured* one that is available: for RMSNorm ``cpp`` on
  CPU, ``torch`` on CUDA, else ``reference``; for LayerNorm ``torch``. The choice is
  deterministic (a fixed table, not a timing race), so the same spec gives the same numerics;
  when the C++ build is unavailable (no compiler, no ninja) ``auto`` falls back to
  ``reference`` and says why once.

``python -m ablate.bench.speed`` (``ablate bench``) measures all of them against LayerNorm.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import inspect
import os
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import torch
import torch.nn.functional as F

from ablate.core.numerics import cpu_flags, is_x86_64

IMPLS = ("reference", "torch", "cpp")
CSRC = Path(__file__).parent / "csrc"
SOURCES = (CSRC / "rms_norm_rows.h", CSRC / "layer_norm_rows.h", CSRC / "norms.cpp")
# x86-64 levels from the widest the CPU runs down: all give the same bits (tested); the wider,
# the faster (bf16 most: 8192 x 1024 rows, v4 0.42x LayerNorm's time, v3 0.55x, v2 0.95x)
X86_TARGETS = (
    ("x86-64-v4", ("avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl")),
    ("x86-64-v3", ("avx2", "fma", "bmi2")),
    ("x86-64-v2", ("sse4_2", "popcnt")),
)


STALE_LOCK_S = 600  # a build lock older than this was left by a killed build


def build_directory(name: str) -> Path:
    """Where the kernel is built: ``$TORCH_EXTENSIONS_DIR`` or ``~/.cache/torch_extensions``."""
    root = os.environ.get("TORCH_EXTENSIONS_DIR") or Path.home() / ".cache" / "torch_extensions"
    return Path(root) / "ablate" / name


def _import_built(name: str, folder: Path) -> ModuleType | None:
    """The already built library, imported directly (no build tool, no lock), or None."""
    library = folder / f"{name}.so"
    spec = importlib.util.spec_from_file_location(name, library)
    if not library.is_file() or spec is None or spec.loader is None:
        return None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:  # a truncated library from a killed build: build it again
        return None
    return module


def build_target() -> str:
    """The instruction set the kernel is compiled for: the widest fixed x86-64 level the CPU
    runs (v4: AVX-512, v3: AVX2, v2: SSE4.2), never the build machine's own
    (``-march=native``); off x86-64 the compiler's default. The bits do not depend on the
    level (rms_norm_rows.h, tested)."""
    if not is_x86_64():
        return "default"
    flags = set(cpu_flags())
    for target, needs in X86_TARGETS:
        if flags.issuperset(needs):
            return target
    return "x86-64"


def compile_flags(target: str) -> list[str]:
    """The kernel's compiler flags for ``target``: optimized, IEEE arithmetic in source order
    (no fast-math reassociation, no contracted multiply-adds)."""
    march = [] if target == "default" else [f"-march={target}"]
    return ["-O3", *march, "-fno-fast-math", "-ffp-contract=off", "-fopenmp"]


def _build(name: str, folder: Path, source: str, target: str) -> ModuleType:
    """Compile the kernel (about 25 s) into ``folder``; concurrent builders wait on a lock."""
    from torch.utils.cpp_extension import load_inline

    _put_ninja_on_path()
    folder.mkdir(parents=True, exist_ok=True)
    lock = folder / "lock"
    if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
        lock.unlink(missing_ok=True)  # torch would wait on it forever
    # the source includes what it needs; torch >= 2.6 can leave out <torch/extension.h>
    lean = {"no_implicit_headers": True} if _takes(load_inline, "no_implicit_headers") else {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return load_inline(
            name=name,
            cpp_sources=[source],
            functions=["rms_norm", "rms_norm_forward", "rms_norm_backward", "layer_norm"],
            extra_cflags=compile_flags(target),
            extra_ldflags=["-fopenmp"],
            extra_include_paths=[str(CSRC)],
            build_directory=str(folder),
            verbose=False,
            **lean,
        )


def _takes(function: Callable[..., object], name: str) -> bool:
    """Whether ``function`` has a parameter ``name`` (an option newer torch releases added)."""
    return name in inspect.signature(function).parameters


def load_kernel(target: str) -> ModuleType:
    """The kernel built for ``target``: imported when a build of this source and these flags
    exists, else compiled first."""
    texts = [path.read_text(encoding="utf-8") for path in SOURCES]
    key = hashlib.sha256("\n".join([*texts, *compile_flags(target)]).encode()).hexdigest()
    name = f"ablate_norms_{key[:12]}"  # a new source or target gets a new build
    folder = build_directory(name)
    return _import_built(name, folder) or _build(name, folder, texts[-1], target)


@functools.cache
def _extension() -> tuple[ModuleType | None, str]:
    """(the compiled module, "") or (None, why it is unavailable); loaded once per process."""
    try:
        return load_kernel(build_target()), ""
    except Exception as exc:  # no compiler, no ninja, no headers: fall back, do not fail
        return None, f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:200]}"


def _put_ninja_on_path() -> None:
    """torch calls ``ninja`` by name; the pip-installed one lives beside this interpreter."""
    try:
        import ninja

        bin_dir = ninja.BIN_DIR
    except ImportError:
        return
    path = os.environ.get("PATH", "")
    if bin_dir not in path.split(os.pathsep):
        os.environ["PATH"] = os.pathsep.join([bin_dir, path]) if path else bin_dir


def cpp_unavailable_reason() -> str:
    """Empty when the C++ kernel can be used, else why not (building it if needed)."""
    return _extension()[1]


def rms_norm_cpp(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm with gain through the C++ kernel (CPU tensors, statistics in fp32), forward and
    backward each one C++ call (the autograd node lives in the extension too)."""
    module = _extension()[0]
    assert module is not None
    return module.rms_norm(x, weight.to(x.dtype), eps)


def layer_norm_cpp(
    x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, eps: float
) -> torch.Tensor:
    """LayerNorm with gain (and bias, if any) through the C++ kernel: statistics in fp32, the
    same bits at every thread count (torch's CPU LayerNorm sums its weight gradient in
    per-thread buffers)."""
    module = _extension()[0]
    assert module is not None
    return module.layer_norm(
        x, weight.to(x.dtype), bias.to(x.dtype) if bias is not None else None, eps
    )


def rms_norm_torch(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """RMSNorm with gain through ``F.rms_norm`` (gain cast to the input's dtype)."""
    return F.rms_norm(x, (x.shape[-1],), weight.to(x.dtype), eps)


AutoOrder = dict[str, tuple[str, ...]]
AUTO_ORDER: AutoOrder = {"cpu": ("cpp",), "cuda": ("torch",)}


def available(impl: str, device: torch.device) -> bool:
    """Whether ``impl`` can run on ``device``."""
    if impl == "cpp":
        return device.type == "cpu" and _extension()[0] is not None
    return impl in IMPLS


@functools.cache
def _warn_fallback(reason: str) -> None:
    warnings.warn(
        f"ablate: C++ RMSNorm unavailable, using the reference one ({reason})", stacklevel=3
    )


def resolve(impl: str, device: torch.device, order: AutoOrder = AUTO_ORDER) -> str:
    """The implementation ``impl`` means on ``device`` (``auto`` resolved by ``order``, a
    kind's table of candidates per device; never unavailable)."""
    if impl != "auto":
        if not available(impl, device):
            raise RuntimeError(
                f"model.norm.impl {impl!r} is not available on {device.type}: "
                f"{cpp_unavailable_reason() or 'CPU only'}; use auto or reference"
            )
        return impl
    for candidate in order.get(device.type, ()):
        if available(candidate, device):
            return candidate
    if device.type == "cpu":
        _warn_fallback(cpp_unavailable_reason())
    return "reference"
