"""The launchers' names from the installed entry points, and the default's without them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from ablate.core import launchers


@pytest.fixture
def uncached() -> Iterator[None]:
    """The registry read afresh before and after the test."""
    launchers.registered.cache_clear()
    yield
    launchers.registered.cache_clear()


def test_the_installed_launchers_are_ablates_two_local_first(uncached: None) -> None:
    assert launchers.launcher_names()[:1] == ["local"]
    assert {"local", "slurm"} <= set(launchers.launcher_names())
    assert launchers.registered()["slurm"].value == "ablate.launch.slurm:SLURM"


def test_a_checkout_without_the_metadata_still_has_the_local_launcher(
    uncached: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(launchers, "entry_points", lambda group: [])
    assert launchers.launcher_names() == ["local"]
    assert type(launchers.registered()["local"].load()).__name__ == "LocalLauncher"
