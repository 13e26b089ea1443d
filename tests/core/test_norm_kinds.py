"""The norm kinds' registry: what each kind reads and owns, and the docs' table printed from it
(the formulas are computed in tests/nn/test_norms.py)."""

from __future__ import annotations

import pytest
from conftest import REPO

from ablate.core.config import NormConfig
from ablate.core.norm_kinds import KIND_KEYS, KINDS, kinds_table, with_kernel


def test_each_kind_reads_or_leaves_every_kind_key_and_its_scalars_start_from_one() -> None:
    for kind in KINDS.values():
        assert set(kind.reads) <= set(KIND_KEYS) and set(kind.unused()).isdisjoint(kind.reads)
        assert set(kind.scalars.values()) <= set(kind.reads)
        assert set(kind.kernels) <= {"torch", "cpp"}
    alpha = ("alpha_init", "alpha_init_attn", "alpha_init_mlp", "alpha_init_final")
    assert KINDS["dyt"].unused() == ("eps",) and KINDS["rmsnorm"].unused() == alpha
    assert with_kernel("cpp") == ["layernorm", "rmsnorm"]


def test_a_key_a_kind_does_not_read_is_not_part_of_the_run() -> None:
    assert NormConfig(kind="dyt", eps=1e-3).as_used() == NormConfig(kind="dyt").as_used()
    assert (
        NormConfig(kind="rmsnorm", alpha_init=2.0).as_used() == NormConfig(kind="rmsnorm").as_used()
    )
    assert NormConfig(kind="rmsnorm", eps=1e-3).as_used() != NormConfig(kind="rmsnorm").as_used()


def test_the_docs_table_is_the_registry_s() -> None:
    defaults = {key: NormConfig.model_fields[key].default for key in KIND_KEYS}
    table = kinds_table(defaults)
    assert table in (REPO / "docs" / "norms.md").read_text(encoding="utf-8")
    assert table.count("\n") == len(KINDS) + 1
    with pytest.raises(KeyError):
        kinds_table({})  # DyT's alpha starts from alpha_init: its default must be given
