"""The CPU pin: which variables it sets, and that it leaves a user's choice alone."""

from __future__ import annotations

import pytest

from ablate.core import numerics


@pytest.fixture
def avx2_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numerics, "is_x86_64", lambda: True)
    monkeypatch.setattr(numerics, "cpu_flags", lambda: ["sse4_2", "avx", "avx2", "fma"])


def test_the_pin_sets_every_library_to_avx2(avx2_cpu: None) -> None:
    environ: dict[str, str] = {}
    assert numerics.pin_cpu_numerics(environ) == numerics.PINNED_ENV
    assert environ == {
        "ATEN_CPU_CAPABILITY": "avx2",
        "MKL_CBWR": "AVX2",
        "ONEDNN_MAX_CPU_ISA": "AVX2",
    }


def test_a_variable_the_user_set_is_kept(avx2_cpu: None) -> None:
    environ = {"ATEN_CPU_CAPABILITY": "avx512"}
    added = numerics.pin_cpu_numerics(environ)
    assert "ATEN_CPU_CAPABILITY" not in added
    assert environ["ATEN_CPU_CAPABILITY"] == "avx512" and environ["MKL_CBWR"] == "AVX2"
    assert numerics.pinned_settings(environ)["ONEDNN_MAX_CPU_ISA"] == "AVX2"


def test_no_pin_without_avx2(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(numerics, "is_x86_64", lambda: True)
    monkeypatch.setattr(numerics, "cpu_flags", lambda: ["sse4_2"])
    environ: dict[str, str] = {}
    assert numerics.pin_cpu_numerics(environ) == {} and environ == {}
    monkeypatch.setattr(numerics, "is_x86_64", lambda: False)
    monkeypatch.setattr(numerics, "cpu_flags", lambda: ["avx2", "fma"])
    assert numerics.pin_cpu_numerics(environ) == {}
