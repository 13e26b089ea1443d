"""Shared fixtures: a tiny run configuration and experiment file that train in under a second."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from ablate.config import RunConfig, apply_overrides, build_run_config

REPO = Path(__file__).resolve().parent.parent

TINY: dict[str, Any] = {
    "data": {"source": "builtin_text"},
    "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "seq_len": 16},
    "train": {
        "batch_size": 4,
        "tokens": 4 * 16 * 20,
        "lr": 3e-3,
        "warmup_steps": 3,
        "eval_interval": 10,
        "eval_batches": 2,
    },
}


def tiny_config(**overrides: Any) -> RunConfig:
    """The tiny config with dotted-key overrides, e.g. ``tiny_config(**{"train.lr": 1.0})``."""
    return build_run_config(apply_overrides(TINY, overrides, "test"), "test")


def write_experiment(path: Path, **extra: Any) -> Path:
    """Write a tiny two-variant experiment file (LayerNorm vs RMSNorm, 2 seeds) to ``path``."""
    doc: dict[str, Any] = {
        "name": "tiny",
        "seeds": [0, 1],
        **TINY,
        "variants": {
            "layernorm": {"model.norm.kind": "layernorm"},
            "rmsnorm": {"model.norm.kind": "rmsnorm"},
        },
    }
    doc.update(extra)
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    return path


@pytest.fixture
def tiny_experiment(tmp_path: Path) -> Path:
    """Path of a tiny experiment file in a temporary folder."""
    return write_experiment(tmp_path / "tiny.yaml")
