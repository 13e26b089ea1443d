"""stability.json's contract: a pipeline stores exactly the keys ablate.core.studies defines,
and what only one process saw (reused probes, runs it trained) never reaches the file."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import simulated_experiment

from ablate.core.studies import BRACKET_KEYS, PROBE_KEYS, SEARCH_KEYS, STABILITY_KEYS
from ablate.launch.pipeline import Context, run_studies_only


def test_stability_json_holds_the_contracts_keys_and_a_rerun_the_same_bytes(
    tmp_path: Path,
) -> None:
    exp = simulated_experiment(
        tmp_path,
        search={"n_trials": 2, "pruner": "none", "warmup_max": 3},
        max_lr={"seeds": [0, 1], "start": 0.05, "factor": 8.0, "precision": 2.0},
    )
    root = tmp_path / "results"
    first = run_studies_only(Context(exp, root, tmp_path / "reports"))
    path = root / "tiny" / "stability.json"
    stored, before = json.loads(path.read_text()), path.read_bytes()
    assert set(stored) == set(STABILITY_KEYS)
    for variant in exp.variants:
        assert set(stored["search"][variant]) == set(SEARCH_KEYS)
        assert set(stored["max_lr"][variant]) == set(BRACKET_KEYS)
        assert all(set(p) == set(PROBE_KEYS) for p in stored["max_lr"][variant]["probes"])
        assert first.max_lr[variant].trained == first.max_lr[variant].runs_total  # all new
    again = run_studies_only(Context(exp, root, tmp_path / "reports"))
    assert all(r.trained == 0 and all(p.reused for p in r.probes) for r in again.max_lr.values())
    assert path.read_bytes() == before  # what only this process saw is not stored
