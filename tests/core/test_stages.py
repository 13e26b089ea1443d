"""The run-group table: the orders derived from it, what each committed file plans, and that
every group names a stage the pipeline has."""

from __future__ import annotations

import subprocess
import sys

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


def test_every_group_is_trained_by_a_stage_of_the_pipeline_in_its_order() -> None:
    from ablate.launch.stages import STAGES

    names = [s.name for s in STAGES]
    assert {g.stage for g in RUN_GROUPS} <= set(names)
    assert len({g.name for g in RUN_GROUPS}) == len(RUN_GROUPS)
    training = [s.name for s in STAGES if s.title is not None]  # a stage with a header trains
    assert training == list(dict.fromkeys(sorted({g.stage for g in RUN_GROUPS}, key=names.index)))
    # `ablate status` lists the stored groups in the order the pipeline trains them
    at = [names.index(next(g.stage for g in RUN_GROUPS if g.name == n)) for n in STATUS_ORDER]
    assert at == sorted(at)


def test_the_pipeline_loads_no_study_or_report_library_until_a_stage_needs_it() -> None:
    code = (
        "import sys, ablate.launch.pipeline; "
        "heavy = ('optuna', 'scipy', 'matplotlib', 'torch', 'ablate.report.summary'); "
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_each_group_counts_its_runs_for_the_estimate() -> None:
    main = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    runs = planned_runs(main, main.variants["rmsnorm"], "rmsnorm")
    assert runs == {  # the warmup declared; the probes held at step 64, divergence alone
        "main": (3, 256), "curve": (36, 256), "tuned": (3, 256), "crossover": (3, 256),
        "usable": (25, 256), "decide": (12, 256), "max_lr": (65, 64),
    }  # fmt: skip
    smoke = load_experiment(REPO / "experiments" / "smoke.yaml")
    assert study_runs(smoke, smoke.variants["layernorm"], "layernorm") == {
        "sweep": (4, 100), "search": (4, 400), "tuned": (2, 400), "crossover": (2, 400),
        "usable": (10, 400), "max_lr": (56, 400),
    }  # fmt: skip
