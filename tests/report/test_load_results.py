"""Reading stored results for the report: stability.json in the experiment's variant order."""

from __future__ import annotations

from ablate.report.load import current_studies


def test_studies_come_in_the_experiments_variant_order_not_the_files() -> None:
    # stability.json is written with sorted keys: "layernorm.post" sorts before the baseline
    stored = {
        "experiment": "grid",
        "max_lr": {"ln.post": {"seed_bounds": []}, "ln.pre": {"seed_bounds": []}, "old": {}},
        "search": {"ln.post": {}, "ln.pre": {}},
    }
    found = current_studies(stored, ["ln.pre", "ln.post"])
    assert found is not None and found["experiment"] == "grid"
    assert list(found["max_lr"]) == ["ln.pre", "ln.post"]  # the baseline first; "old" dropped
    assert list(found["search"]) == ["ln.pre", "ln.post"]
