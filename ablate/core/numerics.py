"""What decides a CPU run's bits, and the pin meant to make them the same on x86-64 machines.

Two runs of the same spec at the same torch version and thread count give the same bits only if
every kernel sums in the same order. ablate's RMSNorm kernel does by construction
(``ablate/nn/csrc/rms_norm_rows.h``). torch's own kernels pick their code by the CPU: ATen's
vectorized ops by the capability it dispatches to (on this project's machines AVX2 and AVX-512
differ in softmax and attention), MKL's GEMM and oneDNN's by their own CPU detection.
:func:`pin_cpu_numerics` fixes all three at the AVX2 level, which every x86-64 server CPU since
2013 runs, before torch computes anything: ``ablate`` calls it first thing, and the processes it
spawns inherit it. A variable the user set is left alone (``ATEN_CPU_CAPABILITY=avx512 ablate
run ...`` trades the pin for the CPU's full width). On one machine MKL's AVX2 GEMM still gave
other bits than the committed runs', and other bits at other thread counts (docs/results.md,
"Where that did not hold"). Torch-free: it only sets environment variables and reads
``/proc/cpuinfo``.
"""

from __future__ import annotations

import os
import platform
from collections.abc import MutableMapping
from pathlib import Path

# the variables each library reads once, at its first use, and the AVX2 level they name
PINNED_ENV = {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "AVX2", "ONEDNN_MAX_CPU_ISA": "AVX2"}
AVX2_FLAGS = ("avx2", "fma")


def cpu_flags() -> list[str]:
    """The CPU's feature flags from ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return line.split(":", 1)[1].split()
    except OSError:
        pass
    return []


def is_x86_64() -> bool:
    return platform.machine() in ("x86_64", "AMD64")


def pin_cpu_numerics(environ: MutableMapping[str, str] = os.environ) -> dict[str, str]:
    """Set each of :data:`PINNED_ENV` the user did not set, on an x86-64 CPU with AVX2; returns
    what was set. Call it before torch runs any op (torch reads them once per process)."""
    if not is_x86_64() or not set(AVX2_FLAGS) <= set(cpu_flags()):
        return {}
    added = {key: value for key, value in PINNED_ENV.items() if key not in environ}
    environ.update(added)
    return added


def pinned_settings(environ: MutableMapping[str, str] = os.environ) -> dict[str, str | None]:
    """The values of :data:`PINNED_ENV` in force (None: the library's own choice)."""
    return {key: environ.get(key) for key in PINNED_ENV}
