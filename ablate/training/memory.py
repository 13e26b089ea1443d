"""Peak memory of a piece of work: the CUDA allocator's peak on a GPU, the process's peak
resident set on a CPU (Linux ``/proc``; interpreter and libraries included).

Used by the training callback :class:`ablate.training.callbacks.PeakMemory` and by the benchmarks.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch


def read_peak_rss_mb() -> float | None:
    """The process's peak resident set since start or the last reset, in MiB (Linux only)."""
    return _status_mb("VmHWM")


def read_rss_mb() -> float | None:
    """The process's resident set now, in MiB (Linux only)."""
    return _status_mb("VmRSS")


def _status_mb(field: str) -> float | None:
    """A ``kB`` field of ``/proc/self/status`` in MiB; None where there is none."""
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return None
    found = re.search(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) / 1024 if found else None


def reset_peak_rss() -> bool:
    """Reset the peak resident set to the current one; False where /proc does not allow it."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # Linux: reset the peak RSS (VmHWM)
    except OSError:
        return False
    return True


def reset_peak_memory(device: torch.device) -> bool:
    """Start a peak-memory measurement on ``device``; False where none is possible."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return True
    return reset_peak_rss()


def read_peak_memory(device: torch.device) -> tuple[float | None, str]:
    """(peak MiB since :func:`reset_peak_memory`, what was measured)."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20, "cuda_max_allocated"
    peak = read_peak_rss_mb()
    return peak, "process_peak_rss" if peak is not None else "unavailable"
