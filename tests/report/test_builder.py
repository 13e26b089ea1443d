"""The report rebuilt from a store: every number recomputed from the raw files, every figure made.

A tiny LayerNorm-vs-RMSNorm experiment (3 seeds) is trained once for the module; the checks
recompute the variant table from each run's ``metrics.csv`` / ``probes.csv`` with numpy and the
t distribution (not the code under test), and rebuild the report of a partial copy.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TINY, max_lr_result, stored_manifest, write_experiment
from scipy import stats

from ablate.cli import main
from ablate.core import folders, store
from ablate.core.folders import ExperimentFolder
from ablate.core.stability import Observation
from ablate.core.studies import Probe, StoredStudies
from ablate.nn.fast_norms import build_target
from ablate.report.analysis import mean_difference
from ablate.report.boundaries import boundary_table
from ablate.report.builder import Report, build_report, markdown_to_html
from ablate.report.estimands import findings
from ablate.report.load import load_experiment_results
from ablate.report.plan import MATCHED, SPEED
from ablate.report.setup import compute_of, compute_text
from ablate.report.summary import by_variant, summary_lines
from ablate.report.text import probes_markdown, quality_markdown
from ablate.report.verdict import Word

VARIANTS = ["layernorm", "rmsnorm"]


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Results folder of a finished tiny experiment: 2 variants x 3 seeds, probes every 5."""
    root = tmp_path_factory.mktemp("report")
    train = {**TINY["train"], "probes": {"interval": 5}}
    path = write_experiment(root / "tiny.yaml", seeds=[0, 1, 2], train=train)
    args = ["run", str(path), "--results-dir", str(root / "results")]
    assert main([*args, "--report-dir", str(root / "reports"), "--workers", "1"]) == 0
    return root / "results" / "tiny"


def _raw_runs(exp_dir: Path) -> pd.DataFrame:
    """Per run, the table's inputs recomputed from metrics.csv and probes.csv."""
    rows = []
    for run_dir in sorted(p for p in exp_dir.iterdir() if (p / "summary.json").exists()):
        summary = json.loads((run_dir / "summary.json").read_text())
        metrics = pd.read_csv(run_dir / "metrics.csv")
        probes = pd.read_csv(run_dir / "probes.csv")
        val = metrics["val_loss"].dropna()
        rows.append(
            {
                "variant": summary["variant"],
                "seed": summary["seed"],
                "final": val.iloc[-1],
                "best": val.min(),
                "tokens_per_s": metrics["tokens"].iloc[-1] / metrics["step_time_s"].sum(),
                "step_ms": 1000 * metrics["step_time_s"].median(),
                "memory": summary["peak_memory_mb"],
                "nonfinite": probes.loc[
                    probes["quantity"].str.startswith("nonfinite"), "value"
                ].sum(),
                "n_params": summary["n_params"],
                "learned": val.iloc[-1] < summary["unigram_loss"] - 0.1,  # recomputed verdict
            }
        )
    return pd.DataFrame(rows)


@pytest.mark.trains
def test_every_table_number_recomputed_from_raw_metrics(finished: Path, tmp_path: Path) -> None:
    report = build_report(ExperimentFolder(finished), tmp_path / "rep")
    table = pd.read_csv(tmp_path / "rep" / "variants.csv").set_index("variant")
    raw = _raw_runs(finished)
    assert len(raw) == 6
    for variant, mine in raw.groupby("variant"):
        row = table.loc[variant]
        assert row["runs"] == row["finished"] == 3 and row["diverged"] == 0
        assert row["collapsed"] == (~mine["learned"]).sum()
        assert row["final_val_loss_mean"] == pytest.approx(mine["final"].mean(), rel=1e-9)
        assert row["final_val_loss_std"] == pytest.approx(mine["final"].std(ddof=1), rel=1e-9)
        assert row["best_val_loss_mean"] == pytest.approx(mine["best"].mean(), rel=1e-9)
        assert row["best_val_loss_std"] == pytest.approx(mine["best"].std(ddof=1), rel=1e-9)
        assert row["tokens_per_s_mean"] == pytest.approx(mine["tokens_per_s"].mean(), rel=1e-9)
        assert row["tokens_per_s_std"] == pytest.approx(mine["tokens_per_s"].std(), rel=1e-9)
        assert row["step_time_ms_mean"] == pytest.approx(mine["step_ms"].mean(), rel=1e-9)
        assert row["peak_memory_mb_mean"] == pytest.approx(mine["memory"].mean(), rel=1e-9)
        assert row["peak_memory_mb_mean"] > 50  # a process that imported torch
        assert row["nonfinite_values"] == mine["nonfinite"].sum() == 0
        assert row["n_params"] == mine["n_params"].iloc[0]
    assert table.loc["layernorm", "n_params"] - table.loc["rmsnorm", "n_params"] == 3 * 16
    # paired difference by hand: mean, t-interval, two-sided p
    a = raw[raw["variant"] == "rmsnorm"].set_index("seed")["final"]
    b = raw[raw["variant"] == "layernorm"].set_index("seed")["final"]
    diff = (a - b).to_numpy()
    n, mean, sd = len(diff), diff.mean(), diff.std(ddof=1)
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    p = 2 * stats.t.sf(abs(mean / (sd / math.sqrt(n))), n - 1)
    row = table.loc["rmsnorm"]
    assert row["n_pairs"] == 3
    assert row["diff_vs_baseline"] == pytest.approx(mean, abs=1e-12)
    assert row["diff_ci_low"] == pytest.approx(mean - half, rel=1e-9)
    assert row["diff_ci_high"] == pytest.approx(mean + half, rel=1e-9)
    assert row["paired_t_p"] == pytest.approx(p, rel=1e-6)
    # the difference over steps ends at the table's difference, with the same interval
    curve = pd.read_csv(tmp_path / "rep" / "loss_difference.csv")
    last = curve[curve["step"] == curve["step"].max()].set_index("variant").loc["rmsnorm"]
    assert last["step"] == 20 and last["n_pairs"] == 3
    assert last["mean"] == pytest.approx(mean, abs=1e-12)
    assert last["ci_low"] == pytest.approx(mean - half, rel=1e-9)
    # the noise floor: pooled seed-to-seed std
    noise = math.sqrt(np.mean([g["final"].var(ddof=1) for _, g in raw.groupby("variant")]))
    text = report.markdown.read_text()
    assert f"{noise:.4f}" in text
    assert f"{table.loc['rmsnorm', 'final_val_loss_mean']:.4f}" in text
    assert "ttest_rel" in text and report.missing == []


@pytest.mark.trains
def test_every_figure_and_format_for_a_finished_experiment(finished: Path, tmp_path: Path) -> None:
    report = build_report(ExperimentFolder(finished), tmp_path / "rep")
    names = {p.name for p in report.figures}
    expected = {"loss_curves.png", "loss_difference.png", "loss_time.png", "throughput.png"}
    expected |= {"probes.png", "logits.png"}
    assert expected <= names
    for path in report.figures:
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000
    for name in ("variants.csv", "variants.md", "runs.csv", "probes_last.csv"):
        assert (tmp_path / "rep" / name).stat().st_size > 0, name
    text = report.markdown.read_text()
    for path in report.figures:
        assert f"]({path.name})" in text
    page = report.html.read_text()
    assert page.count("<table>") == len(re.findall(r"^\|[-:| ]+\|$", text, flags=re.MULTILINE))
    assert page.count('src="data:image/png;base64,') == len(report.figures)
    assert not re.search(r'src="(?!data:)', page)  # nothing to fetch: opens offline
    last = pd.read_csv(tmp_path / "rep" / "probes_last.csv")
    assert set(last["step"]) == {20} and len(last) == 6
    assert (last["resid_rms_last_block"] > 0).all() and (last["attn_logit_max"] > 0).all()


def _partial_copy(finished: Path, dest: Path) -> Path:
    """The finished store with one run running, one failed and one never started."""
    shutil.copytree(finished, dest)
    manifest = store.read_manifest(ExperimentFolder(dest))
    rms = [r for r in manifest.runs if r.group == "main" and r.variant == "rmsnorm"]
    running, failed, gone = (dest / r.run_id for r in rms)
    (running / "summary.json").unlink()
    folders.write_json_atomic(running / "status.json", {"status": "running", "pid": os.getpid()})
    summary = json.loads((failed / "summary.json").read_text())
    folders.write_json_atomic(failed / "summary.json", {**summary, "status": "failed"})
    shutil.rmtree(gone)
    return dest


def _assert_no_pair_judged(report: Report) -> None:
    """Without one matched pair, every verdict of the plan is "not estimable" on 0 seeds."""
    words = {f.estimand.key: (f.verdict.word, f.verdict.estimate.seeds) for f in report.found.found}
    assert words == {MATCHED: (Word.NOT_ESTIMABLE, 0), SPEED: (Word.NOT_ESTIMABLE, 0)}


@pytest.mark.trains
def test_partial_experiment_says_what_is_missing(finished: Path, tmp_path: Path) -> None:
    exp = _partial_copy(finished, tmp_path / "tiny")
    report = build_report(ExperimentFolder(exp), tmp_path / "rep")
    states = sorted(m.split(": ")[1] for m in report.missing)
    assert states == ["failed", "not started", "running"]
    assert all(m.startswith("rmsnorm seed=") for m in report.missing)
    table = report.table.set_index("variant")
    assert table.loc["layernorm", "runs"] == 3 and table.loc["rmsnorm", "runs"] == 0
    assert table.loc["rmsnorm", "n_pairs"] == 0
    _assert_no_pair_judged(report)
    for name in ("loss_curves.png", "loss_time.png", "throughput.png", "probes.png", "logits.png"):
        assert (tmp_path / "rep" / name).stat().st_size > 10_000, name
    assert report.html.stat().st_size > 0


@pytest.mark.trains
def test_an_experiment_whose_runs_all_failed_is_reported_not_crashed(
    finished: Path, tmp_path: Path
) -> None:
    """Every run failed before its first step (a model that cannot train): the metrics and
    probes files hold their header only, and the report says what happened."""
    exp = shutil.copytree(finished, tmp_path / "tiny")
    for summary_path in exp.glob("*/summary.json"):
        summary = json.loads(summary_path.read_text())
        losses = {k: None for k in ("final_val_loss", "best_val_loss", "final_train_loss")}
        failed = {**summary, **losses, "status": "failed", "error": "RuntimeError: no"}
        folders.write_json_atomic(summary_path, failed)
        for name in ("metrics.csv", "probes.csv"):
            header = (summary_path.parent / name).read_text().splitlines()[0]
            (summary_path.parent / name).write_text(header + "\n")
    report = build_report(ExperimentFolder(exp), tmp_path / "rep")
    assert len(report.missing) == 6 and all(m.endswith(": failed") for m in report.missing)
    _assert_no_pair_judged(report)


@pytest.mark.trains
def test_cli_report_rebuilds_and_rejects_a_folder_without_results(
    finished: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", str(finished), "--out", str(tmp_path / "rep")]) == 0
    assert (tmp_path / "rep" / "report.html").exists()
    (tmp_path / "empty").mkdir()
    assert main(["report", str(tmp_path / "empty")]) == 2
    err = capsys.readouterr().err
    assert "holds no experiment.json and no run folders" in err and len(err.splitlines()) == 1


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")  # orchestration: files, not pixels
def test_stale_figures_are_removed(finished: Path, tmp_path: Path) -> None:
    out = tmp_path / "rep"
    out.mkdir()
    (out / "stability_map.png").write_bytes(b"old")  # this experiment has no search
    built = build_report(ExperimentFolder(finished), out)
    assert not (out / "stability_map.png").exists()
    assert set(built.figures) == set(out.glob("*.png"))  # exactly the sections' figures
    (out / "search_trials.csv").write_text("a table of a search since removed from the file")
    (out / "notes.txt").write_text("the user's own")
    listed = json.loads((out / ".built.json").read_text())
    listed["files"].append("search_trials.csv")
    (out / ".built.json").write_text(json.dumps(listed))
    build_report(
        ExperimentFolder(finished), out
    )  # the last build's files it does not write again are gone
    assert not (out / "search_trials.csv").exists() and (out / "notes.txt").is_file()


def _table(
    diff: float, low: float, high: float, pairs: int, unstable: int = 0, p: float = 0.01
) -> pd.DataFrame:
    base = {"variant": "ln", "diverged": 0, "collapsed": 0, "runs": 3, "tokens_per_s_mean": 100.0}
    other = {
        "variant": "rms",
        "diverged": unstable,
        "collapsed": unstable,
        "runs": 3,
        "tokens_per_s_mean": 90.0,
        "tokens_per_s_std": 5.0,
        "diff_vs_baseline": diff,
        "diff_ci_low": low,
        "diff_ci_high": high,
        "paired_t_p": p,
        "n_pairs": pairs,
    }
    return pd.DataFrame([{**base, "tokens_per_s_std": 4.0}, other])


def _runs(diffs: list[float]) -> pd.DataFrame:
    """Finished runs of ln and rms whose seed i differs by ``diffs[i]`` (rms − ln)."""
    rows = []
    for seed, diff in enumerate(diffs):
        common = {"seed": seed, "status": "finished", "norm_impl": "torch"}
        rows.append({"variant": "ln", **common, "final_val_loss": 2.5, "tokens_per_s": 100.0})
        rows.append(
            {"variant": "rms", **common, "final_val_loss": 2.5 + diff, "tokens_per_s": 90.0 + seed}
        )
    return pd.DataFrame(rows)


class _Stored:
    missing: list[str] = []
    divergence_moved: list[str] = []
    manifest = stored_manifest(seeds=[0, 1, 2])
    main = _runs([0.01, -0.02, 0.04])
    tuned = pd.DataFrame()
    crossover = pd.DataFrame()
    runs = pd.DataFrame()
    studies = StoredStudies(
        max_lr={
            "ln": max_lr_result("ln", {0: 0.1, 1: 0.11}),
            "rms": max_lr_result("rms", {0: 0.4, 1: 0.44}),
        }
    )


def _evidence(table: pd.DataFrame, stored: _Stored, tuned: pd.DataFrame | None = None) -> str:
    return "\n".join(summary_lines(table, 0.01, stored, tuned, findings(stored)))


@pytest.mark.parametrize(
    "diffs",
    [
        [0.01, -0.02, 0.04],
        [-0.10, -0.11, -0.09, -0.10, -0.12],
        [0.001, -0.002, 0.0015, 0.0005, -0.001],
        [0.03],
    ],
)
def test_the_shared_lr_alone_is_the_primary_and_judged_at_its_level(diffs: list[float]) -> None:
    diff = mean_difference(pd.Series(diffs))
    table = _table(diff.mean, diff.ci_low, diff.ci_high, diff.n_pairs, p=diff.p_value)
    stored = _Stored()
    stored.main = _runs(diffs)
    found = findings(stored)
    quality, speed = found.of(MATCHED, "rms"), found.of(SPEED, "rms")
    assert quality is not None and speed is not None
    # by hand: the primary spends half of α 0.05 (the other half: the speed ratio)
    if len(diffs) < 2:
        assert (quality.verdict.word, quality.verdict.why) == (
            Word.NOT_ESTIMABLE,
            "fewer than 2 seeds",
        )
        assert speed.verdict.word is Word.NOT_ESTIMABLE
    else:
        values = np.array(diffs)
        low, high = stats.ttest_1samp(values, 0.0).confidence_interval(0.975)
        word = (
            Word.EXCEEDS
            if high < -0.02 or low > 0.02
            else Word.EQUIVALENT
            if -0.02 < low and high < 0.02
            else Word.INCONCLUSIVE
        )
        estimate = quality.verdict.estimate
        assert (estimate.low, estimate.high, estimate.level) == pytest.approx((low, high, 0.975))
        assert (quality.verdict.word, estimate.seeds) == (word, len(diffs))
        ratios = (90.0 + np.arange(len(diffs))) / 100.0  # the throughput of _runs
        assert speed.verdict.estimate.value == pytest.approx(stats.gmean(ratios))
    text = _evidence(table, stored)
    assert quality.verdict.text() in text and "Holm" not in text
    # no spread between seeds: the interval is the lattice's, 4 x 2^(±1/8)
    rms = boundary_table(stored.studies).set_index("variant").loc["rms"]
    assert (rms.ratio_to_baseline, rms.ratio_low, rms.ratio_high) == pytest.approx(
        (4.0, 4 * 2 ** (-1 / 8), 4 * 2 ** (1 / 8)), abs=0.005
    )
    assert rms.seeds_bracketed == 2


def test_a_comparison_with_unstable_runs_says_so_instead_of_a_verdict() -> None:
    text = _evidence(_table(-0.1, -0.15, -0.05, 5, 1), _Stored())
    assert (
        "rms − ln: not a quality comparison: rms: 1 of 3 runs diverged and 1 of 3 runs "
        "collapsed**" in text
    )
    assert "excludes zero" not in text
    assert "Unstable main runs: ln 0 diverged of 3, rms 1 diverged + 1 collapsed of 3." in text


def test_the_evidence_leads_with_the_tuned_comparison_without_adjusting_p() -> None:
    stored = _Stored()
    stored.manifest = stored_manifest(runs=[{"group": "tuned", "run_id": "x"}], seeds=[0, 1])
    stored.studies = StoredStudies(
        search_seed=2,
        max_lr={
            "ln": max_lr_result(
                "ln",
                {0: 1e-7},
                probes=[Probe(1e-4, 0, False, False), Probe(3e-3, 0, False, False)],
                monotone=False,
                checked_runs=9,
                contradictions=[Observation("abc", 0.01, True, "sweep", 0)],
            )
        },
    )
    stored.main = _runs([0.03, 0.031])
    stored.tuned = _runs([-0.02, -0.021]).assign(lr=0.003, warmup_steps=10)
    shared = _table(0.03, 0.01, 0.05, 2)
    tuned = _table(-0.02, -0.04, -0.01, 2).assign(paired_t_p=[math.nan, 0.04])
    text = _evidence(shared, stored, tuned)
    lead = text.index("The tuned A/B: each variant at its own tuned LR and warmup")
    assert (
        lead
        < text.index("at tuned settings, rms − ln: -0.0200")
        < text.index("at the shared LR, rms − ln: +0.0300")
    )
    assert "paired t-test p = 0.040" in text and "Holm" not in text
    assert "found on seed 2, scored here on seeds [0, 1]" in text
    assert "**Too few seeds:** 2 per variant" in text
    # both tuned at one setting: the tuned A/B is at matched settings, the primary
    assert "As the plan's estimand (quality at matched settings)" in text
    assert "ln: **no boundary found**: every probe (0.0001 to 0.003) was unstable" in text
    assert "1 of 9 stored runs" in text and "stable sweep run abc seed 0 at lr 0.01" in text


def test_html_embeds_images_and_renders_tables(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(b"\x89PNG fake")
    text = "# t\n\n| x | y |\n|---|---|\n| 1 | 2 |\n\n![a](a.png)\n\n![b](missing.png)\n"
    page = markdown_to_html(text, tmp_path, "t")
    assert "<table>" in page and "<td>1</td>" in page
    assert 'src="data:image/png;base64,iVBORyBmYWtl"' in page  # base64 of the file's bytes
    assert 'src="missing.png"' in page  # a missing file is left as a link, not dropped


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")  # orchestration: files, not pixels
def test_report_is_current_until_a_result_changes_by_content(
    finished: Path, tmp_path: Path
) -> None:
    exp = tmp_path / "tiny"
    shutil.copytree(finished, exp)
    assert not store.report_is_current(ExperimentFolder(exp), tmp_path / "rep")  # no report yet
    build_report(ExperimentFolder(exp), tmp_path / "rep")
    assert store.report_is_current(ExperimentFolder(exp), tmp_path / "rep")
    summary = next(exp.glob("*/summary.json"))
    later = (tmp_path / "rep" / "report.md").stat().st_mtime + 5
    os.utime(summary, (later, later))  # newer, the same bytes: by content, still current
    manifest = exp / "experiment.json"
    manifest.write_text(manifest.read_text())  # rewritten unchanged
    assert store.report_is_current(ExperimentFolder(exp), tmp_path / "rep")
    summary.write_text(summary.read_text().replace('"seed": ', '"seed":  '))  # new bytes
    assert not store.report_is_current(ExperimentFolder(exp), tmp_path / "rep")


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")  # orchestration: files, not pixels
def test_ablate_report_writes_where_the_run_put_the_report(
    finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    exp = tmp_path / "tiny"
    shutil.copytree(finished, exp)
    assert store.remembered_report_dir(ExperimentFolder(exp)) == (
        finished.parent.parent / "reports" / "tiny"
    )
    store.remember_report_dir(ExperimentFolder(exp), tmp_path / "elsewhere")
    monkeypatch.chdir(tmp_path)
    assert main(["report", str(exp)]) == 0
    assert store.report_is_current(ExperimentFolder(exp), tmp_path / "elsewhere")
    assert not (tmp_path / "reports").exists()  # not the ./reports default
    assert main(["report", str(exp), "--out", str(tmp_path / "given")]) == 0
    assert (tmp_path / "given" / "report.md").is_file()  # --out still wins


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")  # orchestration: files, not pixels
def test_a_report_missing_any_of_its_files_is_rebuilt(finished: Path, tmp_path: Path) -> None:
    exp, rep = tmp_path / "tiny", tmp_path / "rep"
    shutil.copytree(finished, exp)
    build_report(ExperimentFolder(exp), rep)
    built = json.loads((rep / ".built.json").read_text())["files"]
    assert {"report.md", "report.html", "variants.md", "variants.csv", "loss_curves.png"} <= set(
        built
    )
    (rep / "report.html").unlink()  # e.g. Ctrl-C between report.md and report.html
    assert not store.report_is_current(ExperimentFolder(exp), rep)
    build_report(ExperimentFolder(exp), rep)
    assert store.report_is_current(ExperimentFolder(exp), rep) and (rep / "report.html").exists()
    (rep / ".built.json").unlink()  # a build that never finished
    assert not store.report_is_current(ExperimentFolder(exp), rep)


@pytest.mark.slow
def test_grid_report_has_factor_tables_recomputed_from_the_runs(tmp_path: Path) -> None:
    path = write_experiment(
        tmp_path / "grid.yaml",
        name="grid",
        variants={},
        grid={"model.norm.kind": ["layernorm", "rmsnorm"], "model.norm.placement": ["pre", "post"]},
        runtime={"backend": "simulate"},  # the factor tables are the report's, not training's
    )
    results, reports = tmp_path / "results", tmp_path / "reports"
    argv = ["run", str(path), "--results-dir", str(results), "--report-dir", str(reports)]
    assert main([*argv, "--workers", "1"]) == 0
    folder = reports / "grid"
    text = (folder / "report.md").read_text(encoding="utf-8")
    assert "## Factors" in text and "### model.norm.kind × model.norm.placement" in text
    assert (folder / "interactions.png").stat().st_size > 10_000
    runs = pd.read_csv(folder / "runs.csv")
    loss = {(r.variant, r.seed): r.final_val_loss for r in runs.itertuples()}
    effects = pd.read_csv(folder / "factors.csv").set_index(["factor", "level"])
    per_seed = [
        np.mean([loss[(f"rmsnorm.{p}", s)] - loss[(f"layernorm.{p}", s)] for p in ("pre", "post")])
        for s in (0, 1)
    ]
    half = stats.t.ppf(0.975, 1) * np.std(per_seed, ddof=1) / math.sqrt(2)
    row = effects.loc[("model.norm.kind", "rmsnorm")]
    assert row["effect"] == pytest.approx(np.mean(per_seed), abs=1e-9)
    assert row["effect_ci_high"] - row["effect_ci_low"] == pytest.approx(2 * half, rel=1e-6)
    post = [loss[(f"{k}.post", s)] for k in ("layernorm", "rmsnorm") for s in (0, 1)]
    assert effects.loc[("model.norm.placement", "post"), "mean"] == pytest.approx(np.mean(post))
    assert "baseline: layernorm.pre" in text
    # the Answer judges each factor at its share of α: half each, 97.5%
    level = stats.t.ppf(1 - 0.025 / 2, 1) * np.std(per_seed, ddof=1) / math.sqrt(2)
    judged = f"model.norm.kind rmsnorm vs layernorm: {np.mean(per_seed):+.4f} nats "
    judged += f"[{np.mean(per_seed) - level:+.4f}, {np.mean(per_seed) + level:+.4f}] (97.5%"
    answer = text.split("## Answer", 1)[1].split("## Analysis plan")[0]
    assert "**Factors at the shared LR (matched settings)**: " + judged in answer
    lead = text.index("**The factors' main effects**")
    assert lead < text.index("  - model.norm.kind = rmsnorm: ") < text.index("## Factors")
    assert "**Too few seeds:** 2 per variant" in text


def test_small_probe_values_keep_their_digits_and_differences_their_sign() -> None:
    per_run = pd.DataFrame(
        {
            "variant": ["dyt", "dyt"],
            "seed": [0, 1],
            "step": [100, 100],
            "resid_rms_last_block": [1.2345, 1.2345],
            "grad_norm_max_block": [9.9e-5, 9.9e-5],  # a DyT run's: 0.000 at three decimals
            "attn_logit_max": [12.5, 12.5],
            "logit_max_abs": [3.25, 3.25],
        }
    )
    assert "| 9.9e-05 |" in probes_markdown(per_run, ["dyt"]).replace("  ", "")
    table = pd.DataFrame(
        {
            "variant": ["ln", "rms"],
            "runs": [3, 3],
            "finished": [3, 3],
            "diverged": [0, 0],
            "collapsed": [0, 0],
            "final_val_loss_mean": [2.5, 2.5013],
            "final_val_loss_std": [0.01, 0.01],
            "best_val_loss_mean": [2.5, 2.5],
            "best_val_loss_std": [0.01, 0.01],
            "diff_vs_baseline": [math.nan, 0.0013],
            "diff_ci_low": [math.nan, -0.0036],
            "diff_ci_high": [math.nan, 0.0061],
            "paired_t_p": [math.nan, 0.00004],
            "n_pairs": [0, 3],
            "n_params": [100, 96],
        }
    )
    shown = quality_markdown(table)
    assert "+0.0013 [-0.0036, +0.0061]" in shown and "4.0e-05 (3)" in shown


def test_unstable_runs_say_when_and_how_each_broke() -> None:
    from ablate.report.text import unstable_runs

    nan = float("nan")
    main = pd.DataFrame(
        {
            "variant": ["b", "a", "a", "b"],
            "seed": [0, 1, 0, 1],
            "status": ["diverged", "finished", "finished", "finished"],
            "stable": [False, False, True, True],
            "diverged_step": [2.0, nan, nan, nan],
            "diverged_reason": ["non-finite loss (nan)", nan, nan, nan],
            "unstable_step": [2.0, 384.0, nan, nan],
            "unstable_reason": ["diverged", "collapsed: final val loss 3.3", nan, nan],
            "nonfinite_activations": [12, 0, 0, 0],
            "nonfinite_grads": [7, 0, 0, 0],
        }
    )
    table = unstable_runs(main, ["a", "b"])
    assert list(table["variant"]) == ["a", "b"]  # variant order, not file order
    assert list(table["status"]) == ["collapsed", "diverged"]
    assert list(table["step"]) == ["384", "2"]
    assert list(table["how"]) == ["collapsed: final val loss 3.3", "non-finite loss (nan)"]
    assert list(table["non-finite activations / grads (probes)"]) == ["0 / 0", "12 / 7"]
    assert unstable_runs(main[main["stable"]], ["a", "b"]).empty


@pytest.mark.trains
def test_a_stored_inference_table_adds_the_inference_section(
    finished: Path, tmp_path: Path
) -> None:
    exp = shutil.copytree(finished, tmp_path / "tiny")
    table = pd.DataFrame(
        {
            "variant": VARIANTS,
            "mode": "fp32",
            "batch": 1,
            "prompt": 16,
            "new_tokens": 16,
            "prefill_tokens_per_s": [5000.0, 5200.0],
            "tpot_ms": [2.0, 1.9],
            "tpot_ms_min": [1.9, 1.8],
            "tpot_ms_max": [2.1, 2.0],
            "norm_share": [0.12, 0.10],
            "peak_memory_mb": 300.0,
            "rounds": 3,
        }
    )
    folders.write_frame_atomic(folders.ExperimentFolder(exp).inference, table)
    report = build_report(ExperimentFolder(exp), tmp_path / "rep")
    text = report.markdown.read_text()
    assert "## Inference" in text and "rmsnorm/layernorm TPOT 0.950" in text
    assert (tmp_path / "rep" / "inference.csv").is_file()


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")  # orchestration: files, not pixels
def test_the_setup_section_says_what_was_trained(finished: Path, tmp_path: Path) -> None:
    report = build_report(ExperimentFolder(finished), tmp_path / "rep")
    text = report.markdown.read_text()
    setup = text.split("## Set-up")[1].split("\n## ")[0]
    assert "ablate's GPT: 1 block, d_model 16, 2 heads, MLP gelu (d_ff 64)" in setup
    summaries = [json.loads(p.read_text()) for p in finished.glob("*/summary.json")]
    counts = {s["variant"]: s["n_params"] for s in summaries}
    assert f"parameters layernorm {counts['layernorm']:,}, rmsnorm {counts['rmsnorm']:,}" in setup
    assert "layernorm: layernorm (pre, eps 1e-05, bias True" in setup and "ran cpp" in setup
    assert "builtin_text, tokenizer byte, vocabulary 256" in setup
    assert "20 steps x batch 4 x context 16 = 1,280 tokens" in setup
    assert "shared LR 0.003, warmup 3 steps" in setup and "main 6 runs of 20 steps" in setup
    assert "main 6 runs of 20 steps; 6 distinct runs in all." in setup  # none in two stages
    job = json.loads((finished / "jobs.jsonl").read_text())
    cost = compute_of(load_experiment_results(ExperimentFolder(finished)))
    assert (cost.runs, cost.invocations, cost.cut_short, cost.unused) == (6, 1, 0, 0)
    minutes = sum(s["wall_time_s"] for s in summaries) / 60
    assert (cost.run_minutes, cost.wall_minutes) == pytest.approx((minutes, job["wall_s"] / 60))
    assert (cost.setups, cost.cpus) == ({(1, 1)}, {(job["cores"], job["cpu"])})
    assert f"- **Compute:** {compute_text(cost)}." in setup.splitlines()
    capability = torch.backends.cpu.get_cpu_capability()  # AVX2 where conftest's pin took
    assert f"CPU capability {capability}" in setup
    assert f"kernel build target: {build_target()}" in setup
    assert "## Final quality: shared LR (every variant at lr 0.003, warmup 3)" in text
    assert "Not a pure norm comparison" not in text
    printed = (tmp_path / "rep" / "variants.md").read_text()
    assert printed.startswith("Final quality, shared LR (every variant at lr 0.003, warmup 3):")


@pytest.mark.trains
@pytest.mark.usefixtures("unrendered_figures")  # orchestration: files, not pixels
def test_a_variant_that_changes_more_than_the_norm_is_flagged(
    finished: Path, tmp_path: Path
) -> None:
    copy = tmp_path / "tiny"
    shutil.copytree(finished, copy)
    for path in copy.glob("*/config.json"):
        stored = json.loads(path.read_text())
        if stored["variant"] == "rmsnorm":
            stored["config"]["model"]["d_ff"] = 32
            stored["config"]["train"]["lr"] = 0.01
            path.write_text(json.dumps(stored))
    text = build_report(ExperimentFolder(copy), tmp_path / "rep").markdown.read_text()
    head = text.split("## Summary")[0]
    assert "**Not a pure norm comparison:** against layernorm, rmsnorm also changes " in head
    assert "model.d_ff, train.lr" in head


def test_a_speed_ratio_says_when_the_seeds_disagree_and_a_simulated_one_is_not_given() -> None:
    from ablate.report.summary import speed_lines

    stored = _Stored()
    stored.main = _runs([0.0, 0.0, 0.0])
    (line,) = speed_lines(stored, by_variant(findings(stored), SPEED))
    assert line.startswith("- Training throughput, rms / ln (the main runs, paired by seed): ×0.91")
    assert "shared" not in line
    stored.main = stored.main.assign(
        tokens_per_s=[100.0, 90.0, 100.0, 60.0, 100.0, 95.0]  # the second seed ran beside others
    )
    (line,) = speed_lines(stored, by_variant(findings(stored), SPEED))
    assert "the seeds' ratios lie 58% apart: a shared or loaded machine" in line
    stored.main = stored.main.assign(norm_impl="simulated")
    assert by_variant(findings(stored), SPEED) == {}


def test_the_leading_comparisons_curves_come_first_and_every_budget_is_named(
    tmp_path: Path, unrendered_figures: None
) -> None:
    from ablate.core.load import load_experiment
    from ablate.launch.pipeline import run_experiment

    curve = {"seeds": [3, 4], "lr_min": 1e-3, "lr_max": 4e-3}
    path = write_experiment(tmp_path / "e.yaml", runtime={"backend": "simulate"}, curve=curve)
    result = run_experiment(load_experiment(path), tmp_path / "results", tmp_path / "reports")
    text = (result.report_dir / "report.md").read_text()
    figures = text.split("## Figures", 1)[1]
    tuned, main_runs = figures.index("loss_curves_tuned.png"), figures.index("(loss_curves.png)")
    assert tuned < main_runs and "loss_difference_tuned.png" in figures
    assert "Of the tuned runs, each variant at its own (LR, warmup): the leading comparison; " in (
        figures
    )
    assert "; 20 steps, " in figures and " tokens per run." in figures
