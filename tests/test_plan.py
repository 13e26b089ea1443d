"""Run specs: one per variant x seed, with content-hash ids."""

from __future__ import annotations

from pathlib import Path

from conftest import tiny_config

from ablate.config import load_experiment
from ablate.plan import RunSpec, plan_manifest, plan_runs


def test_plan_is_variants_times_seeds_seed_major(tiny_experiment: Path) -> None:
    specs = plan_runs(load_experiment(tiny_experiment))
    assert [(s.variant, s.seed) for s in specs] == [
        ("layernorm", 0),
        ("rmsnorm", 0),
        ("layernorm", 1),
        ("rmsnorm", 1),
    ]
    assert len({s.run_id for s in specs}) == 4
    manifest = plan_manifest(load_experiment(tiny_experiment), specs)
    assert manifest["variants"] == ["layernorm", "rmsnorm"] and manifest["seeds"] == [0, 1]
    assert [r["run_id"] for r in manifest["runs"]] == [s.run_id for s in specs]


def test_run_id_is_a_stable_content_hash() -> None:
    a = RunSpec("e", "v", 0, tiny_config())
    assert a.run_id == RunSpec("e", "v", 0, tiny_config()).run_id
    assert len(a.run_id) == 12
    assert a.run_id != RunSpec("e", "v", 1, tiny_config()).run_id
    assert a.run_id != RunSpec("e", "v", 0, tiny_config(**{"train.lr": 0.01})).run_id
    assert a.run_id != RunSpec("e", "w", 0, tiny_config()).run_id
    # how a run executes (workers, threads) does not change what it computes
    assert a.run_id == RunSpec("e", "v", 0, tiny_config(**{"runtime.threads": 3})).run_id


def test_spec_round_trips_through_json() -> None:
    spec = RunSpec("e", "v", 4, tiny_config(**{"data.seed": 9}))
    again = RunSpec.from_json(spec.to_json())
    assert again == spec and again.run_id == spec.run_id
    assert spec.data_seed == 9 and RunSpec("e", "v", 4, tiny_config()).data_seed == 4
