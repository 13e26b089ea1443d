"""The worker benchmark's experiment: main runs only, cut to the asked steps."""

from __future__ import annotations

from pathlib import Path

from conftest import REPO

from ablate.bench.workers import main_runs_only, parse_configs
from ablate.core.load import load_experiment


def test_main_runs_only_drops_studies_and_cuts_the_budget(tmp_path: Path) -> None:
    source = REPO / "experiments" / "smoke.yaml"
    cut = load_experiment(main_runs_only(source, tmp_path / "b.yaml", steps=7))
    original = load_experiment(source)
    assert cut.sweep is None and cut.search is None and cut.max_lr is None
    assert cut.seeds == original.seeds and list(cut.variants) == list(original.variants)
    for name, config in cut.variants.items():
        assert config.steps() == 7
        assert config.model == original.variants[name].model


def test_parse_configs() -> None:
    assert parse_configs("1x1,2X1,1x2") == [(1, 1), (2, 1), (1, 2)]
