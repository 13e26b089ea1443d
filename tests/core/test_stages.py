"""The run-group table: the orders derived from it, what each committed file plans, and that
every group names a stage the pipeline has."""

from __future__ import annotations

from conftest import REPO

from ablate.core.load import load_experiment
from ablate.core.stages import (
    BEFORE_MAX_LR,
    BY_GROUP,
    REPORT_ORDER,
    RUN_GROUPS,
    STATUS_ORDER,
    planned_groups,
    planned_runs,
    study_runs,
)


def test_the_orders_derive_from_the_one_table() -> None:
    assert STATUS_ORDER == (
        "main", "sweep", "search", "curve", "warmup", "tuned", "crossover", "usable", "max_lr",
        "convert",
    )  # fmt: skip
    assert STATUS_ORDER.index("curve") < STATUS_ORDER.index("convert")  # `ablate status` order
    assert REPORT_ORDER == (
        "main", "sweep", "curve", "warmup", "tuned", "crossover", "usable", "convert",
    )  # fmt: skip
    assert BY_GROUP == {"warmup"} and "decide" not in STATUS_ORDER  # decide's runs are tuned
    assert BEFORE_MAX_LR == {"search", "curve", "warmup", "tuned", "decide", "crossover", "usable"}


def test_each_committed_file_plans_the_groups_its_sections_make() -> None:
    main = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    assert planned_groups(main) == [
        "main", "curve", "tuned", "crossover", "usable", "decide", "max_lr",
    ]  # fmt: skip
    smoke = load_experiment(REPO / "experiments" / "smoke.yaml")
    assert planned_groups(smoke) == [
        "main", "sweep", "search", "tuned", "crossover", "usable", "max_lr",
    ]  # fmt: skip


def test_every_group_is_trained_by_a_stage_of_the_pipeline() -> None:
    from ablate.launch.pipeline import STAGES

    assert {g.stage for g in RUN_GROUPS} <= {s.name for s in STAGES}
    assert len({g.name for g in RUN_GROUPS}) == len(RUN_GROUPS)


def test_each_group_counts_its_runs_for_the_estimate() -> None:
    main = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    runs = planned_runs(main, main.variants["rmsnorm"], "rmsnorm")
    assert runs == {
        "main": (3, 256), "curve": (36, 256), "warmup": (24, 256), "tuned": (3, 256),
        "crossover": (3, 256), "usable": (25, 256), "decide": (6, 256), "max_lr": (150, 256),
    }  # fmt: skip
    smoke = load_experiment(REPO / "experiments" / "smoke.yaml")
    assert study_runs(smoke, smoke.variants["layernorm"], "layernorm") == {
        "sweep": (4, 100), "search": (4, 400), "tuned": (2, 400), "crossover": (2, 400),
        "usable": (10, 400), "max_lr": (56, 400),
    }  # fmt: skip
