"""stability.json's contract: a pipeline stores exactly the keys ablate.core.studies defines,
and what only one process saw (reused probes, runs it trained) never reaches the file."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import simulated_experiment

from ablate.core import store
from ablate.core.folders import ExperimentFolder
from ablate.core.studies import (
    BOUNDARY_KEYS,
    INTERVAL_KEYS,
    MARGIN_KEYS,
    PROBE_KEYS,
    SEARCH_KEYS,
    SEED_BOUNDARY_KEYS,
    STABILITY_KEYS,
)
from ablate.launch.pipeline import Context, run_studies_only


def test_stability_json_holds_the_contracts_keys_and_a_rerun_the_same_bytes(
    tmp_path: Path,
) -> None:
    exp = simulated_experiment(
        tmp_path,
        search={"n_trials": 2, "pruner": "none", "warmup_max": 3},
        max_lr={"seeds": [0, 1], "start": 0.05, "factor": 8.0, "per_octave": 2},
    )
    root = tmp_path / "results"
    first = run_studies_only(Context(exp, root, tmp_path / "reports"))
    path = root / "tiny" / "stability.json"
    stored, before = json.loads(path.read_text()), path.read_bytes()
    assert set(stored) == set(STABILITY_KEYS)
    for variant in exp.variants:
        assert set(stored["search"][variant]) == set(SEARCH_KEYS)
        found = stored["max_lr"][variant]
        assert set(found) == set(BOUNDARY_KEYS) and set(found["boundary"]) == set(INTERVAL_KEYS)
        assert all(set(p) == set(PROBE_KEYS) for p in found["probes"])
        assert all(set(b) == set(SEED_BOUNDARY_KEYS) for b in found["seed_bounds"])
        assert found["margins"] and all(set(m) == set(MARGIN_KEYS) for m in found["margins"])
        assert first.max_lr[variant].trained == first.max_lr[variant].runs_total  # all new
    read = store.read_studies(
        ExperimentFolder(root / "tiny")
    )  # typed, and written again: the same file
    assert read.stored() == stored
    for variant in exp.variants:
        assert read.search[variant].trial_table == first.search[variant].trial_table
        assert read.search[variant].best == first.search[variant].best is not None
        assert read.max_lr[variant].boundary == first.max_lr[variant].boundary is not None
        assert read.max_lr[variant].margins[0].boundary == first.max_lr[variant].margins[0].boundary
    again = run_studies_only(Context(exp, root, tmp_path / "reports"))
    assert all(r.trained == 0 and all(p.reused for p in r.probes) for r in again.max_lr.values())
    assert path.read_bytes() == before  # what only this process saw is not stored
