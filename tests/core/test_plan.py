"""Run specs: one per variant x seed, with content-hash ids."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from conftest import REPO, tiny_config, write_experiment

from ablate.core.load import load_experiment
from ablate.core.plan import (
    RunSpec,
    plan_runs,
    plan_sweep,
    seed_run_ids,
    with_train,
)
from ablate.core.stages import planned_groups, study_runs


def test_plan_is_variants_times_seeds_seed_major(tiny_experiment: Path) -> None:
    specs = plan_runs(load_experiment(tiny_experiment))
    assert [(s.variant, s.seed) for s in specs] == [
        ("layernorm", 0),
        ("rmsnorm", 0),
        ("layernorm", 1),
        ("rmsnorm", 1),
    ]
    assert len({s.run_id for s in specs}) == 4


def test_run_id_is_a_stable_content_hash() -> None:
    a = RunSpec("e", "v", 0, tiny_config())
    assert a.run_id == RunSpec("e", "v", 0, tiny_config()).run_id
    assert len(a.run_id) == 12
    assert a.run_id != RunSpec("e", "v", 1, tiny_config()).run_id
    assert a.run_id != RunSpec("e", "v", 0, tiny_config(**{"train.lr": 0.01})).run_id
    assert a.run_id != RunSpec("e", "w", 0, tiny_config()).run_id
    # how a run executes (workers, threads) does not change what it computes
    assert a.run_id == RunSpec("e", "v", 0, tiny_config(**{"runtime.threads": 3})).run_id


def test_seed_run_ids_are_the_run_ids_of_the_spec_at_each_seed() -> None:
    simulated = tiny_config(**{"runtime.backend": "simulate", "data.seed": 9})
    for cfg in (tiny_config(), simulated):
        spec = RunSpec("e", "v", 0, cfg)
        seeds = [0, 1, 7, 12345]
        assert seed_run_ids(spec, seeds) == [RunSpec("e", "v", s, cfg).run_id for s in seeds]


def test_spec_round_trips_through_json() -> None:
    spec = RunSpec("e", "v", 4, tiny_config(**{"data.seed": 9}))
    again = RunSpec.from_json(spec.to_json())
    assert again == spec and again.run_id == spec.run_id
    assert spec.data_seed == 9 and RunSpec("e", "v", 4, tiny_config()).data_seed == 4


def test_sweep_plan_covers_variants_lrs_and_seeds(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "e.yaml",
        sweep={"lr_min": 1e-3, "lr_max": 1e-1, "points": 3, "seeds": [5], "tokens": 640},
    )
    experiment = load_experiment(path)
    sweep = plan_sweep(experiment)
    assert [(s.variant, s.seed, round(s.config.train.lr, 6)) for s in sweep] == [
        ("layernorm", 5, 0.001),
        ("rmsnorm", 5, 0.001),
        ("layernorm", 5, 0.01),
        ("rmsnorm", 5, 0.01),
        ("layernorm", 5, 0.1),
        ("rmsnorm", 5, 0.1),
    ]
    assert all(s.group == "sweep" and s.config.steps() == 10 for s in sweep)
    # only lr and the budget change: the rest of each variant's config is untouched
    base = experiment.variants["rmsnorm"]
    assert sweep[1].config.model == base.model and sweep[1].config.data == base.data
    assert plan_sweep(load_experiment(write_experiment(tmp_path / "n.yaml"))) == []


def test_group_is_not_part_of_the_run_id() -> None:
    config = tiny_config()
    assert RunSpec("e", "v", 0, config).run_id == RunSpec("e", "v", 0, config, "sweep").run_id
    with_lr = with_train(config, lr=0.5)
    assert with_lr.train.lr == 0.5 and with_lr.model == config.model


@pytest.mark.parametrize(
    "name",
    [
        "ln_vs_rms",
        "llama_style",
        "lr_stability",
        "placement",
        "deepnorm",
        "precision",
        "convert",
        "litgpt_pythia",
        "own_model",
    ],
)
def test_the_runs_of_every_committed_report_keep_their_ids(name: str) -> None:
    """A key added to the config must not change the ids of stored runs (they would be trained
    again instead of reused): every main run each shipped file plans is in its report."""
    if name == "litgpt_pythia":
        pytest.importorskip("litgpt")  # loading the file checks the extra is installed
    planned = {s.run_id for s in plan_runs(load_experiment(REPO / "experiments" / f"{name}.yaml"))}
    stored = set(pd.read_csv(REPO / "reports" / name / "runs.csv")["run_id"])
    assert planned and planned <= stored


def test_a_key_the_norm_kind_does_not_read_is_not_a_difference() -> None:
    from ablate.core.overrides import differences

    dyt = tiny_config(**{"model.norm.kind": "dyt"})
    dyt_eps = tiny_config(**{"model.norm.kind": "dyt", "model.norm.eps": 1e-3})
    assert RunSpec("e", "dyt", 0, dyt).run_id == RunSpec("e", "dyt", 0, dyt_eps).run_id
    assert differences(dyt, dyt_eps) == {}
    ln_eps = tiny_config(**{"model.norm.eps": 1e-3})  # LayerNorm reads its eps
    assert RunSpec("e", "ln", 0, tiny_config()).run_id != RunSpec("e", "ln", 0, ln_eps).run_id
    assert differences(tiny_config(), ln_eps) == {"model.norm.eps": (1e-5, 1e-3)}


def test_decide_plans_at_most_its_added_seeds_and_is_a_stage(tmp_path: Path) -> None:
    path = write_experiment(tmp_path / "e.yaml", seeds=[0, 1, 2], decide={"max_seeds": 7})
    experiment = load_experiment(path)
    config = experiment.variants["rmsnorm"]
    assert study_runs(experiment, config, "rmsnorm")["decide"] == (4, config.steps())
    assert planned_groups(experiment) == ["main", "decide"]
    seeds = {s.seed for s in plan_runs(experiment, [0, 1, 2, 3, 4])}
    assert seeds == {0, 1, 2, 3, 4}


def test_recent_keys_count_in_the_run_id_only_away_from_their_defaults() -> None:
    base = RunSpec("e", "v", 0, tiny_config()).run_id
    defaults = {
        "model.norm.mix_post_layers": 0,
        "model.norm.depth_scale": False,
        "model.norm.alpha_init_attn": None,
        "model.softcap_attn": None,
        "model.softcap_output": None,
        "train.z_loss": 0.0,
    }
    assert RunSpec("e", "v", 0, tiny_config(**defaults)).run_id == base
    changed = {
        "model.norm.depth_scale": True,
        "model.norm.placement": "reordered",
        "model.softcap_output": 30.0,
        "train.z_loss": 1e-4,
    }
    ids = {RunSpec("e", "v", 0, tiny_config(**{k: v})).run_id for k, v in changed.items()}
    assert len(ids) == len(changed) and base not in ids
    dyt = tiny_config(**{"model.norm.kind": "dyt"})
    dyt_attn = tiny_config(**{"model.norm.kind": "dyt", "model.norm.alpha_init_attn": 0.8})
    assert RunSpec("e", "v", 0, dyt).run_id != RunSpec("e", "v", 0, dyt_attn).run_id
