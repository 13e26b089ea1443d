"""Step times kept between commands: stored, read back, keyed by threads; a bad file is empty."""

from __future__ import annotations

from pathlib import Path

import pytest

from ablate.launch.step_times import (
    FILE,
    StepTime,
    store_step_times,
    stored_step_times,
    time_key,
)


def test_step_times_are_kept_by_model_threads_and_machine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path))
    assert stored_step_times() == {}
    one, two = time_key("m", 1, "2.5"), time_key("m", 2, "2.5")
    assert len({one, two, time_key("m", 1, "2.6")}) == 3
    store_step_times({one: StepTime(0.01, 0.2, "2026-12-06T19:00:00+00:00")})
    store_step_times({two: StepTime(0.006, 1.5, "2026-12-06T19:01:00+00:00")})
    assert stored_step_times() == {
        one: StepTime(0.01, 0.2, "2026-12-06T19:00:00+00:00"),
        two: StepTime(0.006, 1.5, "2026-12-06T19:01:00+00:00"),
    }
    (tmp_path / FILE).write_text("{not json", encoding="utf-8")
    assert stored_step_times() == {}
