"""The plan's record: variants, seeds and run ids in order, and ``decide:``'s record only where
it ran (so the bytes of a file without it do not change)."""

from __future__ import annotations

import json
from pathlib import Path

from conftest import write_experiment

from ablate.core.load import load_experiment
from ablate.core.manifest import RUN_KEYS, Manifest, plan_manifest
from ablate.core.plan import plan_runs


def test_the_record_lists_variants_seeds_and_run_ids_in_order(tiny_experiment: Path) -> None:
    experiment = load_experiment(tiny_experiment)
    specs = plan_runs(experiment)
    manifest = plan_manifest(experiment, specs)
    assert manifest.variants == ["layernorm", "rmsnorm"] and manifest.seeds == [0, 1]
    assert [r.run_id for r in manifest.runs] == [s.run_id for s in specs]
    assert manifest.stages == ["main"]


def test_decides_record_is_kept_only_where_it_ran(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "e.yaml", seeds=[0, 1, 2], decide={"max_seeds": 7})
    experiment = load_experiment(path)
    manifest = plan_manifest(experiment, plan_runs(experiment), {"seeds": [0, 1, 2]})
    assert manifest.decide == {"seeds": [0, 1, 2]}
    assert "decide" not in plan_manifest(experiment, plan_runs(experiment)).stored()


def test_the_record_reads_back_as_it_was_written_and_an_older_one_with_defaults(
    tmp_path: Path,
) -> None:
    path = write_experiment(tmp_path / "e.yaml", seeds=[0, 1, 2], decide={"max_seeds": 7})
    experiment = load_experiment(path)
    manifest = plan_manifest(experiment, plan_runs(experiment), {"seeds": [0, 1, 2]})
    stored = json.loads(json.dumps(manifest.stored()))
    assert Manifest.from_stored(stored) == manifest
    assert list(stored)[:4] == ["name", "description", "source", "variants"]
    assert list(stored)[-1] == "runs" and list(stored["runs"][0]) == list(RUN_KEYS)
    older = {k: v for k, v in stored.items() if k not in ("stages", "analysis", "spike_window")}
    read = Manifest.from_stored(older)
    assert (read.stages, read.analysis, read.spike_window) == (None, None, None)
    assert read.runs == manifest.runs
