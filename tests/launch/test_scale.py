"""A ``scale:`` experiment: sizes resolved with their budgets, matched inits within a size,
every size through the pipeline, the scaling report, and a size added later trains only itself."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import yaml
from conftest import LENIENT, REPO, write_experiment

from ablate.core.folders import ExperimentFolder, read_json
from ablate.core.load import load_experiment
from ablate.core.plan import plan_runs
from ablate.launch.scale import parameter_count, resolve_sizes, run_scaled
from ablate.nn.model import shared_init_digest
from ablate.nn.sources import build_model
from ablate.report.scaling_answer import gap_verdicts, size_answers
from ablate.report.verdict import Word

SIZES = [{"d_model": 16}, {"d_model": 32, "n_heads": 4}]
STUDIES = {
    "sweep": {"lr_min": 1e-3, "lr_max": 1e-1, "points": 2, "seeds": [0]},
    "search": {"n_trials": 2, "lr_min": 1e-3, "lr_max": 3e-2},
    "max_lr": {"seeds": [0], "factor": 16.0, "per_octave": 1, "lr_max": 10.0},
}


def test_tokens_per_parameter_sets_each_sizes_budget(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "s.yaml", scale={"sizes": SIZES, "tokens_per_parameter": 0.5}
    )
    sizes = resolve_sizes(load_experiment(path))
    assert [s.label for s in sizes] == ["d16", "d32"]
    for size in sizes:
        assert size.n_params == parameter_count(size.experiment)
        assert size.tokens == round(0.5 * size.n_params)
        assert {c.train.tokens for c in size.experiment.variants.values()} == {size.tokens}
    assert sizes[1].n_params > 2 * sizes[0].n_params  # embeddings grow linearly, blocks by d²


def test_matched_seeds_share_their_initial_weights_within_a_size(tmp_path: Path) -> None:
    sizes = resolve_sizes(
        load_experiment(write_experiment(tmp_path / "s.yaml", scale={"sizes": SIZES}))
    )
    seen = set()
    for size in sizes:
        for seed in (0, 1):
            digests = {
                shared_init_digest(build_model(config.model, 256, seed))
                for config in size.experiment.variants.values()
            }
            assert len(digests) == 1  # LayerNorm and RMSNorm start from the same weights
            seen |= digests
    assert len(seen) == 4  # and every (size, seed) from its own


def _summaries(root: Path) -> dict[Path, float]:
    return {p: p.stat().st_mtime_ns for p in root.rglob("summary.json")}


@pytest.mark.slow
@pytest.mark.usefixtures("unrendered_figures")
def test_every_size_runs_every_stage_and_an_added_size_trains_only_itself(
    tmp_path: Path,
) -> None:
    simulated = {"runtime": {"backend": "simulate"}}  # the study's orchestration, in seconds
    path = write_experiment(
        tmp_path / "s.yaml", scale={"sizes": SIZES}, **LENIENT, **STUDIES, **simulated
    )
    root, reports = tmp_path / "results", tmp_path / "reports"
    result = run_scaled(load_experiment(path), root, reports, workers=1, threads=1)
    assert result.missing == []
    table = pd.read_csv(reports / "tiny" / "scaling.csv")
    assert list(table["size"]) == ["d16", "d16", "d32", "d32"]
    assert (table["seeds"] == 2).all() and (table["loss_at"] == "tuned").all()
    assert table["n_params"].iloc[2] > table["n_params"].iloc[0]
    for column in ("final_loss", "best_lr", "max_stable_lr_low", "lr_sensitivity"):
        assert table[column].notna().all(), column
    assert table["diff_vs_baseline"].isna().tolist() == [True, False, True, False]
    scaled = ExperimentFolder(root / "tiny")
    manifest = read_json(scaled.scale)
    answers = size_answers(manifest, scaled)  # the report's Answer: each size's primary ...
    assert [a.size for a in answers["rmsnorm"]] == ["d16", "d32"]
    (gap,) = gap_verdicts(manifest, answers).values()  # ... and the gap against size
    assert gap.word is Word.NOT_ESTIMABLE and gap.estimate.seeds == 2  # 2 sizes: no residual
    fits = pd.read_csv(reports / "tiny" / "scaling_fits.csv")
    assert len(fits) and (fits["sizes"] == 2).all()
    assert not fits["estimable"].any()  # two sizes: no exponent to extend
    for name in ("scaling.png", "scaling_gap.png", "scaling_fits.csv", "report.html"):
        assert (reports / "tiny" / name).is_file(), name
    for size in ("d16", "d32"):  # each size's own report (matched inits: the test above)
        runs = pd.read_csv(reports / "tiny" / f"tiny.{size}" / "runs.csv")
        assert len(runs[runs["group"] == "main"]) == 4

    before = _summaries(root)
    doc = yaml.safe_load(path.read_text())
    doc["scale"]["sizes"].append({"d_model": 24})
    path.write_text(yaml.safe_dump(doc))
    again = run_scaled(load_experiment(path), root, reports, workers=1, threads=1)
    after = _summaries(root)
    assert {p: after[p] for p in before} == before  # nothing of d16 or d32 trained again
    new = set(after) - set(before)
    assert new and all(p.parent.parent.name == "tiny.d24" for p in new)
    assert set(again.sizes) == {"d16", "d32", "d24"}
    table = pd.read_csv(reports / "tiny" / "scaling.csv")
    assert list(table["size"].unique()) == ["d16", "d32", "d24"]
    assert ExperimentFolder(root / "tiny").is_scaled()


def test_the_committed_scaling_report_holds_every_run_the_file_plans() -> None:
    """experiments/scaling.yaml's runs keep their ids: every size's main runs are in its
    committed report, and the scaling table has every variant at every size."""
    experiment = load_experiment(REPO / "experiments" / "scaling.yaml")
    sizes = resolve_sizes(experiment)
    table = pd.read_csv(REPO / "reports" / "scaling" / "scaling.csv")
    assert list(table["size"].unique()) == [s.label for s in sizes]
    for size in sizes:
        stored = pd.read_csv(REPO / "reports" / "scaling" / size.experiment.name / "runs.csv")
        planned = {s.run_id for s in plan_runs(size.experiment)}
        assert planned and planned <= set(stored["run_id"])
