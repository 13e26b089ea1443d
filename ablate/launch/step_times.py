"""Step times measured on this machine, kept between commands, so that pricing a plan does not
time steps again: ``ablate validate --time`` times each distinct model's step and stores it;
plain ``ablate validate`` prices the plan from what is stored (and says which models have no
time yet).

They live in ``step_times.json`` in ablate's cache folder (``$ABLATE_CACHE``, else
``~/.cache/ablate``: :func:`ablate.training.tokens.cache_dir`) as ``{key: {"step_s", "load",
"at"}}``: the key what a step's cost depends on (:func:`ablate.launch.estimate.step_key`), the
thread count and the machine (host, CPU architecture, torch version); the load the machine's
1-minute load average when it was timed. A file that cannot be read counts as empty; one is
replaced whole (written beside it, renamed).
"""

from __future__ import annotations

import json
import os
import platform
import tempfile
from dataclasses import asdict, dataclass
from datetime import UTC, datetime

from ablate.training.tokens import cache_dir

FILE = "step_times.json"


@dataclass(frozen=True)
class StepTime:
    """One model's step time on this machine at a thread count, and the load it was timed at."""

    step_s: float
    load: float
    at: str  # when it was timed (UTC, ISO 8601)


def machine(torch_version: str) -> str:
    """What else a step's time depends on: the host, its CPU architecture and torch."""
    return f"{platform.node()} {platform.machine()} torch {torch_version}"


def time_key(step_key: str, threads: int, torch_version: str) -> str:
    """The key of one model's step time at ``threads`` threads on this machine."""
    return f"{step_key}|threads {threads}|{machine(torch_version)}"


def stored_step_times() -> dict[str, StepTime]:
    """Every step time stored on this machine (none where the file is missing or unreadable)."""
    try:
        raw = json.loads((cache_dir() / FILE).read_text(encoding="utf-8"))
        return {key: StepTime(**entry) for key, entry in raw.items()}
    except (OSError, ValueError, TypeError):
        return {}


def store_step_times(measured: dict[str, StepTime]) -> None:
    """Add ``measured`` to the stored step times (replacing the same keys); a folder that
    cannot be written is skipped silently: the times are a convenience, not a result."""
    merged = {**stored_step_times(), **measured}
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(
            "w", dir=folder, prefix=f".{FILE}.", delete=False, encoding="utf-8"
        ) as out:
            json.dump({key: asdict(t) for key, t in merged.items()}, out, indent=1)
        os.replace(out.name, folder / FILE)
    except OSError:
        return


def now() -> str:
    """The current time, as a stored step time records it."""
    return datetime.now(UTC).isoformat(timespec="seconds")
