"""What a variant changes: a key its config does not read is found, one it reads is not."""

from __future__ import annotations

import pytest
from conftest import tiny_config

from ablate.core.overrides import unread_key


@pytest.mark.parametrize(
    ("overrides", "key", "unread"),
    [
        ({"model.norm.kind": "dyt"}, "model.norm.alpha_init", False),
        ({"model.norm.kind": "layernorm"}, "model.norm.alpha_init", True),
        ({"model.norm.kind": "dyt"}, "model.norm.eps", True),
        ({"model.norm.kind": "rmsnorm"}, "model.norm.eps", False),
        ({"train.precision": "bf16-mixed"}, "model.norm.fp32_reduction", False),
        ({"train.precision": "32"}, "model.norm.fp32_reduction", True),
        ({"model.norm.placement": "none"}, "model.norm.kind", True),
        ({"model.norm.placement": "none", "model.norm.qk_norm": True}, "model.norm.kind", False),
        ({"model.norm.placement": "none"}, "model.norm.placement", False),
        ({"model.norm.kind": "layernorm"}, "train.lr", False),
    ],
)
def test_a_key_is_unread_only_where_the_config_cannot_use_it(
    overrides: dict, key: str, unread: bool
) -> None:
    found = unread_key(tiny_config(**overrides), [key])
    assert (found is not None) == unread
    assert found is None or found[0] == key
