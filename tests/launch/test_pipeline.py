"""The staged protocol from Python: shared A/B, search, tuned A/B, max LR, report; one executor."""

from __future__ import annotations

import io
import json
import math
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pandas as pd
import pytest
import yaml
from conftest import REPO, TINY, simulated_experiment, write_experiment
from rich.console import Console

from ablate.core.folders import ExperimentFolder
from ablate.core.jobs import JobClock, read_jobs
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec
from ablate.core.record import RunRecord
from ablate.launch import pipeline
from ablate.launch.execute import Request
from ablate.launch.pipeline import Context, run_experiment, run_studies_only
from ablate.launch.resources import Resources
from ablate.launch.simulator import SimulatedExecutor
from ablate.launch.stages import job, training_stages
from ablate.launch.stages.job import record_job
from ablate.launch.stages.max_lr import margin_boundaries
from ablate.launch.storage import open_storage, storage_url


def _smoke_like(tmp_path: Path, **extra: object) -> Path:
    """The smoke model (learns beyond unigram statistics in 400 steps) with a 2-trial search."""
    doc = yaml.safe_load((REPO / "experiments" / "smoke.yaml").read_text())
    for section in ("sweep", "max_lr"):
        doc.pop(section)
    doc["search"] = {
        "n_trials": 2,
        "lr_min": 5e-3,
        "lr_max": 2e-2,
        "warmup_max": 10,
        "pruner": "none",
    }
    doc.update(extra)
    path = tmp_path / "smoke_like.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _summaries(folder: ExperimentFolder) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(folder.path.glob("*/summary.json"))]


SIMULATED = {"backend": "simulate"}  # orchestration: no model needs to train


@pytest.mark.usefixtures("unrendered_figures")
def test_pipeline_runs_the_tuned_ab_at_the_searchs_best_on_every_final_seed(
    tmp_path: Path,
) -> None:
    path = _smoke_like(tmp_path, runtime=SIMULATED)
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports")
    assert result.missing == [] and result.report_rebuilt
    runs = _summaries(result.folder)
    search = result.studies.search
    assert [s["seed"] for s in runs if s["group"] == "search"] == [2] * 4  # max(seeds) + 1
    tuned = [s for s in runs if s["group"] == "tuned"]
    assert sorted((s["variant"], s["seed"]) for s in tuned) == [
        ("layernorm", 0),
        ("layernorm", 1),
        ("rmsnorm", 0),
        ("rmsnorm", 1),
    ]
    for s in tuned:
        best = search[s["variant"]].best
        assert (s["lr"], s["warmup_steps"]) == (best.lr, best.warmup_steps)
        assert s["planned_steps"] == 400  # the full budget, not the search's
    assert sorted((s["variant"], s["seed"]) for s in runs if s["group"] == "main") == sorted(
        (s["variant"], s["seed"]) for s in tuned
    )  # matched init and batches per seed: tests/training/test_run.py
    report = (result.report_dir / "report.md").read_text()
    assert "## Shared LR and tuned settings" in report
    assert (result.report_dir / "comparison.csv").exists()
    again = run_experiment(result.experiment, tmp_path / "results", tmp_path / "reports")
    assert not again.report_rebuilt and _summaries(result.folder) == runs  # nothing retrained


def _tiny_with_search(tmp_path: Path, n_trials: int) -> Path:
    """The tiny experiment whose search runs on seed 0 over a range that holds the base's LR."""
    doc = {
        "name": "tiny",
        "seeds": [0],
        **TINY,
        "variants": {
            "layernorm": {"model.norm.kind": "layernorm"},
            "rmsnorm": {"model.norm.kind": "rmsnorm"},
        },
        "search": {"n_trials": n_trials, "seed": 0, "lr_min": 1e-3, "lr_max": 1e-2},
        "runtime": SIMULATED,
    }
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _enqueue_base(path: Path, root: Path, variant: str) -> None:
    """Ask the variant's search to try the base's own LR and warmup next."""
    experiment = load_experiment(path)
    url = storage_url(experiment, root)
    study = optuna.create_study(
        study_name=f"tiny.{variant}.search",
        storage=open_storage(url),
        direction="minimize",
        load_if_exists=True,
    )
    train = experiment.base.train
    study.enqueue_trial({"lr": train.lr, "warmup_steps": train.warmup_steps})


@pytest.mark.usefixtures("unrendered_figures")
def test_a_search_trial_and_a_main_run_are_one_run_whichever_comes_first(
    tmp_path: Path,
) -> None:
    root = tmp_path / "results"
    first = _tiny_with_search(tmp_path, n_trials=1)
    _enqueue_base(first, root, "layernorm")
    experiment = load_experiment(first)
    run_studies_only(Context(experiment, root, tmp_path / "reports", workers=1, threads=1))
    by_id = {s["run_id"]: s for s in _summaries(ExperimentFolder(root / "tiny"))}
    trial_run = next(s for s in by_id.values() if s["variant"] == "layernorm")
    assert trial_run["group"] == "search" and trial_run["lr"] == TINY["train"]["lr"]

    more = _tiny_with_search(tmp_path, n_trials=2)  # n_trials is not part of any run's id
    _enqueue_base(more, root, "rmsnorm")
    result = run_experiment(more, root, tmp_path / "reports", workers=1, threads=1)
    after = {s["run_id"]: s for s in _summaries(ExperimentFolder(root / "tiny"))}
    main = {s.variant: s.run_id for s in result.specs if s.group == "main"}
    assert main["layernorm"] == trial_run["run_id"]  # the main run is the trial's run ...
    assert after[main["layernorm"]] == trial_run  # ... reused, not trained again
    trials = optuna.load_study(
        study_name="tiny.rmsnorm.search", storage=open_storage(storage_url(result.experiment, root))
    ).trials
    reused = [t for t in trials if t.params["lr"] == TINY["train"]["lr"]]
    assert [t.user_attrs["run_id"] for t in reused] == [main["rmsnorm"]]  # the trial reused ...
    assert after[main["rmsnorm"]]["group"] == "main"  # ... the run the shared A/B trained
    assert reused[0].value == after[main["rmsnorm"]]["final_val_loss"]  # min(loss, ℓ0) = loss
    assert len(ExperimentFolder(root / "tiny").runs()) == len(
        after
    )  # every run folder is a finished run


def _sourced_experiment(tmp_path: Path, model: dict, variants: dict) -> Path:
    """The tiny experiment with a model from another source: 2 variants x 2 seeds."""
    doc = {
        "name": "sourced",
        "seeds": [0, 1],
        "data": TINY["data"],
        "model": {"seq_len": 16, **model},
        "train": {**TINY["train"], "stability": {"floor": "initial"}},
        "variants": variants,
    }
    path = tmp_path / "sourced.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _lands_in_the_report(tmp_path: Path, path: Path, norm_impls: dict[str, str]) -> None:
    """Every run trains, matched seeds share their non-norm weights across the variants, the
    probes ran, and the report compares the variants."""
    result = run_experiment(path, tmp_path / "results", tmp_path / "reports", workers=1)
    summaries = _summaries(result.folder)
    assert len(summaries) == 4 and {s["status"] for s in summaries} == {"finished"}
    assert {s["variant"]: s["norm_impl"] for s in summaries} == norm_impls
    for seed in (0, 1):
        digests = {s["init_digest"] for s in summaries if s["seed"] == seed}
        assert len(digests) == 1
    probes = {s["variant"]: s["probe_steps"] for s in summaries}
    assert min(probes.values()) >= 2
    report = (result.report_dir / "report.md").read_text()
    for variant in norm_impls:
        assert f"| {variant}" in report
    assert "Δ final vs baseline" in report
    _timed_once(result, tmp_path, path)


def _timed_once(result: Any, tmp_path: Path, path: Path) -> None:
    """The invocation that trained is stored with its runs and copied into the report; one
    that trains nothing adds no record and leaves the report current."""
    jobs = read_jobs(result.folder.jobs)
    assert list(jobs["runs_trained"]) == [4] and list(jobs["outcome"]) == ["finished"]
    assert list(jobs["workers"]) == [1] and jobs["wall_s"].iloc[0] > 0
    copied = pd.read_csv(result.report_dir / "jobs.csv")
    assert list(copied["runs_trained"]) == [4]
    again = run_experiment(path, tmp_path / "results", tmp_path / "reports", workers=1)
    assert len(read_jobs(result.folder.jobs)) == 1 and not again.report_rebuilt


def test_a_simulated_experiment_runs_and_reports_without_loading_torch(tmp_path: Path) -> None:
    """Its checks, its progress lines (the steps left) and its report: no torch (~1.5 s)."""
    path = write_experiment(tmp_path / "e.yaml", runtime={"backend": "simulate"})
    code = (
        "import sys; from ablate.cli import main; code = main(sys.argv[1:]); "
        "print('torch' in sys.modules); sys.exit(code)"
    )
    args = ["run", str(path), "--results-dir", str(tmp_path / "r"), "--report-dir", "rep"]
    out = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=tmp_path, capture_output=True, text=True
    )
    assert out.returncode == 0, out.stderr
    assert "80 steps left at most" in out.stdout  # the progress line counted them
    assert out.stdout.strip().splitlines()[-1] == "False", out.stdout


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")
def test_a_litgpt_model_trains_and_lands_in_the_report(tmp_path: Path) -> None:
    pytest.importorskip("litgpt")
    litgpt = {"name": "pythia-14m", "n_layer": 1, "n_embd": 16, "n_head": 2}
    path = _sourced_experiment(
        tmp_path,
        {"source": "litgpt", "litgpt": litgpt},
        {
            "layernorm": {"model.litgpt.norm_class_name": "LayerNorm"},
            "rmsnorm": {"model.litgpt.norm_class_name": "RMSNorm"},
        },
    )
    _lands_in_the_report(
        tmp_path, path, {"layernorm": "torch.LayerNorm", "rmsnorm": "litgpt.RMSNorm"}
    )


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")
def test_a_factory_model_trains_and_lands_in_the_report(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)  # experiments.own_model imports from the repository root
    path = _sourced_experiment(
        tmp_path,
        {"source": "python", "factory": "experiments.own_model:build", "d_model": 16},
        {
            "layernorm": {"model.norm.kind": "layernorm"},
            "rmsnorm": {"model.norm.kind": "rmsnorm"},
        },
    )
    _lands_in_the_report(tmp_path, path, {"layernorm": "torch", "rmsnorm": "cpp"})


def test_the_quality_boundary_moves_with_the_collapse_margin(tmp_path: Path) -> None:
    exp = simulated_experiment(tmp_path, max_lr={"seeds": [0], "margins": [0.05, 0.3]})
    floor = 3.25  # the runs' unigram loss; a wall climbing to it and past, then a divergence
    lrs = [0.01, 0.02, 0.04, 0.08, 0.16, 0.32]
    losses = [2.5, 2.9, 3.1, 3.18, 3.3, None]
    runs = pd.DataFrame(
        {
            "variant": "rmsnorm",
            "seed": 0,
            "lr": lrs,
            "status": ["finished"] * 5 + ["diverged"],
            "final_val_loss": losses,
            "initial_loss": math.log(256),
            "unigram_loss": floor,
        }
    )
    found = {m.margin: m for m in margin_boundaries(exp, "rmsnorm", [0], runs)}
    assert sorted(found) == [0.05, 0.1, 0.3]  # the criterion's own margin is always there
    brackets = {
        m: (f.seed_bounds[0].last_stable, f.seed_bounds[0].first_unstable) for m, f in found.items()
    }
    assert brackets == {0.05: (0.08, 0.16), 0.1: (0.04, 0.08), 0.3: (0.02, 0.04)}
    assert found[0.05].boundary.value > found[0.3].boundary.value


def test_a_new_stage_is_one_entry_that_sees_the_plan_and_adds_to_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ablate.core.plan import RunSpec, with_train
    from ablate.launch.context import Stage

    seen: dict[str, object] = {}

    def extra_lr(ctx: Context) -> None:  # a stage: one run per variant at twice the base LR
        seen["groups"] = sorted({s.group for s in ctx.plan.specs})
        runs = [
            RunSpec(ctx.experiment.name, v, 0, with_train(c, lr=2 * c.train.lr), group="extra")
            for v, c in ctx.experiment.variants.items()
        ]
        ctx.plan.specs += runs
        ctx.write_manifest()
        seen["stored"] = len(ctx.execute(runs))

    at = [s.name for s in pipeline.STAGES].index("report")
    stages = (
        *pipeline.STAGES[:at],
        Stage("extra", lambda ctx: True, extra_lr),
        pipeline.STAGES[at],
    )
    monkeypatch.setattr(pipeline, "STAGES", stages)
    result = run_experiment(simulated_experiment(tmp_path), tmp_path / "r", tmp_path / "rep")
    assert seen == {"groups": ["main"], "stored": 2}  # it ran after the A/B, before the report
    assert sorted(s.group for s in result.specs) == ["extra", "extra"] + ["main"] * 4
    manifest = json.loads(result.folder.manifest.read_text())
    assert sorted(r["group"] for r in manifest["runs"]) == ["extra", "extra"] + ["main"] * 4
    assert result.report_rebuilt and not result.missing


@pytest.mark.parametrize(
    ("backend", "trained", "outcome", "stored"),
    [
        ("train", 3, "finished", 1),
        ("train", 0, "finished", 0),  # a rerun that trained nothing: no record
        ("train", 0, "interrupted", 1),  # cut before a run was stored: its time still counts
        ("simulate", 3, "finished", 0),  # the simulator's time is not the experiment's
    ],
)
def test_a_job_is_recorded_where_it_trained_or_was_cut(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    backend: str,
    trained: int,
    outcome: str,
    stored: int,
) -> None:
    folder = ExperimentFolder(tmp_path / "tiny")
    folder.path.mkdir()
    runtime = SimpleNamespace(backend=backend, launcher="local")
    ctx = SimpleNamespace(
        experiment=SimpleNamespace(base=SimpleNamespace(runtime=runtime)),
        folder=folder,
        job=JobClock.start(runs_stored=0),
        resources=lambda jobs: Resources(2, 1),
    )
    monkeypatch.setattr(job, "runs_stored", lambda folder: trained)
    record_job(ctx, outcome)  # type: ignore[arg-type]
    record_job(ctx, outcome)  # type: ignore[arg-type]  # once per invocation
    assert len(read_jobs(folder.jobs)) == stored


def test_the_stages_run_in_their_order() -> None:
    from ablate.launch.stages import STAGES

    assert [s.name for s in STAGES] == [
        "shared", "search", "curve", "tuned", "crossover", "decide", "usable", "max_lr",
        "studies", "convert", "job", "report",
    ]  # fmt: skip  # docs/architecture.md's stage map too: tests/test_docs.py


@dataclass
class CutOnce(SimulatedExecutor):
    """The simulator, cut by a Ctrl-C when a ``group`` run is asked for after ``after`` of
    them are stored (once: the marker file says it was cut)."""

    group: str = "search"
    after: int = 1
    marker: Path = Path("cut")

    def _maybe_cut(self, specs: list[RunSpec]) -> None:
        if self.marker.exists() or all(s.group != self.group for s in specs):
            return
        stored = [p for p in self.root.glob("*/*/summary.json") if _group(p) == self.group]
        if len(stored) >= self.after:
            self.marker.touch()
            raise KeyboardInterrupt

    def obtain(self, request: Request, *args: Any, **kwargs: Any) -> RunRecord:
        self._maybe_cut([request.spec])
        return super().obtain(request, *args, **kwargs)

    def run(self, specs: list[RunSpec]) -> list[RunRecord]:
        self._maybe_cut(specs)
        return super().run(specs)


def _group(summary: Path) -> str:
    return json.loads(summary.read_text())["group"]


STUDIES = {  # a stage's study -> the experiment's sections that make it
    "search": {"search": {"n_trials": 6, "lr_min": 1e-3, "lr_max": 3e-2, "warmup_max": 10}},
    "warmup": {"curve": {"lr_min": 1e-3, "lr_max": 3e-2, "warmup_trials": 4, "warmup_startup": 2}},
    "max_lr": {
        "search": {"n_trials": 2, "lr_min": 1e-3, "lr_max": 3e-2, "pruner": "none"},
        "max_lr": {"factor": 2.0, "lr_max": 10.0},
    },
}


def _studied(tmp_path: Path, study: str) -> Path:
    """The tiny experiment on the simulator with the sections that make ``study`` (the
    search's 6 trials put the median pruner to work), its studies in a SQLite file."""
    tmp_path.mkdir()
    truth = {"variants": {"layernorm": {"opt_lr": 0.004}, "rmsnorm": {"opt_lr": 0.009}}}
    return write_experiment(
        tmp_path / "e.yaml",
        **STUDIES[study],
        runtime={"backend": "simulate", "simulate": truth},
        storage=f"sqlite:///{tmp_path / 'studies.db'}",
    )


def _outcome(home: Path) -> tuple[Any, ...]:
    """What the answer of the experiment in ``home`` is made of: every stored run's id and
    result, the search trials, and the report without the re-run note (its own folder's name
    taken out)."""
    runs = {
        p.parent.name: (s["group"], s["final_val_loss"], s["status"])
        for p in home.glob("results/tiny/*/summary.json")
        for s in [json.loads(p.read_text())]
    }
    table = home / "rep/tiny/search_trials.csv"
    trials = pd.read_csv(table).to_dict("list") if table.exists() else None
    kept = [
        line.replace(str(home), "HOME")
        for line in (home / "rep/tiny/report.md").read_text().splitlines()
        if line and not line.startswith("Re-run after being cut short")
    ]
    return runs, trials, kept


@pytest.mark.usefixtures("unrendered_figures")
@pytest.mark.parametrize(("group", "after"), [("search", 2), ("warmup", 1), ("max_lr", 1)])
def test_an_interrupted_study_gives_the_uninterrupted_answer(
    tmp_path: Path, group: str, after: int
) -> None:
    whole = run_experiment(
        _studied(tmp_path / "a", group), tmp_path / "a/results", tmp_path / "a/rep"
    )
    path = _studied(tmp_path / "b", group)
    cut = CutOnce(tmp_path / "b/results", group=group, after=after, marker=tmp_path / "cut")
    with pytest.raises(KeyboardInterrupt):
        run_experiment(path, tmp_path / "b/results", tmp_path / "b/rep", executor=cut)
    again = run_experiment(path, tmp_path / "b/results", tmp_path / "b/rep")
    assert (tmp_path / "cut").exists() and again.missing == []
    assert _outcome(tmp_path / "b") == _outcome(tmp_path / "a")
    reruns = {v: r.reruns for v, r in again.studies.search.items() if r.reruns}
    assert reruns == ({"layernorm": [after]} if group == "search" else {})
    named = f"layernorm #{after}" in (tmp_path / "b/rep/tiny/report.md").read_text()
    assert named == (group == "search")  # the report names the trial re-run
    assert all(not r.reruns for r in whole.studies.search.values())


KILLED = """
import os, signal, sys
from pathlib import Path
from ablate.launch.pipeline import run_experiment
from ablate.launch.stages.max_lr import margin_boundaries
from ablate.launch.stages.job import record_job
from ablate.launch.simulator import SimulatedExecutor

class KilledAt(SimulatedExecutor):
    def run(self, specs):
        stored = [p for p in self.root.glob("*/*/summary.json") if '"warmup"' in p.read_text()]
        if any(s.group == "warmup" for s in specs) and stored:
            os.kill(os.getpid(), signal.SIGKILL)  # no handler runs: the trial stays RUNNING
        return super().run(specs)

home = Path(sys.argv[1])
run_experiment(home / "e.yaml", home / "results", home / "rep", executor=KilledAt(home / "results"))
"""


@pytest.mark.usefixtures("unrendered_figures")
def test_a_warmup_trial_killed_with_its_process_is_rerun_as_it_was(tmp_path: Path) -> None:
    run_experiment(_studied(tmp_path / "a", "warmup"), tmp_path / "a/results", tmp_path / "a/rep")
    path = _studied(tmp_path / "b", "warmup")
    killed = subprocess.run([sys.executable, "-c", KILLED, str(tmp_path / "b")], check=False)
    assert killed.returncode == -signal.SIGKILL
    run_experiment(path, tmp_path / "b/results", tmp_path / "b/rep")
    assert _outcome(tmp_path / "b") == _outcome(tmp_path / "a")


@pytest.mark.usefixtures("unrendered_figures")
def test_each_stage_that_trains_opens_with_its_place_and_the_time_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ablate.launch import progress

    paced: list[str] = []  # every text the experiment's pace gave
    counted: list[int | None] = []  # the steps it had counted as left, each time
    text = progress.ExperimentPace.text

    def recorded(pace: progress.ExperimentPace) -> str:
        paced.append(text(pace))
        counted.append(pace.steps_left)
        return paced[-1]

    monkeypatch.setattr(progress.ExperimentPace, "text", recorded)
    out = io.StringIO()
    experiment = simulated_experiment(tmp_path, search={"n_trials": 2, "pruner": "none"})
    console = Console(file=out, width=300)
    run_experiment(experiment, tmp_path / "r", tmp_path / "rep", console=console)
    headers = [line for line in out.getvalue().splitlines() if line.startswith("stage ")]
    assert [line.split(":", 1)[0] for line in headers] == [
        f"stage {k} of 4" for k in range(1, 5)
    ]  # shared, search, tuned, cross-over
    assert all(any(line.endswith(f"; {p}") for p in paced) for line in headers)  # the time left
    assert counted and None not in counted  # the store was counted for each
    assert training_stages(experiment) == ["shared", "search", "tuned", "crossover"]
