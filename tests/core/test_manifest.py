"""The plan's record: variants, seeds and run ids in order, and ``decide:``'s record only where
it ran (so the bytes of a file without it do not change)."""

from __future__ import annotations

from pathlib import Path

from conftest import write_experiment

from ablate.core.load import load_experiment
from ablate.core.manifest import plan_manifest
from ablate.core.plan import plan_runs


def test_the_record_lists_variants_seeds_and_run_ids_in_order(tiny_experiment: Path) -> None:
    experiment = load_experiment(tiny_experiment)
    specs = plan_runs(experiment)
    manifest = plan_manifest(experiment, specs)
    assert manifest["variants"] == ["layernorm", "rmsnorm"] and manifest["seeds"] == [0, 1]
    assert [r["run_id"] for r in manifest["runs"]] == [s.run_id for s in specs]
    assert manifest["stages"] == ["main"]


def test_decides_record_is_kept_only_where_it_ran(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "e.yaml", seeds=[0, 1, 2], decide={"max_seeds": 7})
    experiment = load_experiment(path)
    manifest = plan_manifest(experiment, plan_runs(experiment), {"seeds": [0, 1, 2]})
    assert manifest["decide"] == {"seeds": [0, 1, 2]}
    assert "decide" not in plan_manifest(experiment, plan_runs(experiment))
