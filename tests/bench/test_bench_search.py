"""The distributed-search benchmark's experiment: one variant, a fresh search, nothing else."""

from __future__ import annotations

from pathlib import Path

from conftest import REPO

from ablate.bench.search import search_only
from ablate.core.load import load_experiment


def test_search_only_keeps_the_first_variant_and_sizes_the_search(tmp_path: Path) -> None:
    source = REPO / "experiments" / "smoke.yaml"
    cut = load_experiment(search_only(source, tmp_path / "b.yaml", "bench_x", trials=5, steps=7))
    original = load_experiment(source)
    first = next(iter(original.variants))
    assert cut.name == "bench_x" and list(cut.variants) == [first]
    assert cut.sweep is None and cut.max_lr is None and cut.convert is None
    assert cut.search is not None and cut.search.n_trials == 5 and cut.search.pruner == "none"
    assert cut.search.tokens == 7 * original.variants[first].tokens_per_step()
    assert cut.search.lr_min == original.search.lr_min  # the rest of the search is kept
    assert cut.variants[first].model == original.variants[first].model
