"""The section registry: every section is a function of the one report context, and the report
is their lines in the registry's order (the context computed once)."""

from __future__ import annotations

from pathlib import Path

from conftest import simulated_experiment

from ablate.launch.pipeline import run_experiment
from ablate.report.context import ReportContext
from ablate.report.load import load_experiment_results
from ablate.report.section import Section
from ablate.report.sections import SECTIONS, section_name


def test_the_report_is_the_registrys_sections_in_order(tmp_path: Path) -> None:
    exp = simulated_experiment(tmp_path, search={"n_trials": 3}, max_lr={"seeds": [0]})
    result = run_experiment(exp, tmp_path / "r", tmp_path / "rep")
    stored = load_experiment_results(result.folder)
    ctx = ReportContext.of(stored, stored.manifest.variants)
    built = [section(ctx) for section in SECTIONS]
    assert all(isinstance(section, Section) for section in built)
    joined = [line for section in built for line in section.lines]
    written = (result.report_dir / "report.md").read_text(encoding="utf-8")
    headings = [line for line in joined if line.startswith("## ")]
    assert headings == [line for line in written.splitlines() if line.startswith("## ")]
    by_name = {section_name(section): part for section, part in zip(SECTIONS, built, strict=True)}
    assert by_name["title"].lines[0] == f"# {exp.name}"
    assert set(by_name["answer"].tables) == {"answer.csv", "answer_seeds.csv"}
    assert len(by_name["answer"].tables["answer.csv"]) == len(ctx.found.found)
    assert by_name["tuned_comparison"].lines  # the search chose: the tuned A/B is compared
    assert by_name["convert"].lines == [] and by_name["factors"].lines == []  # none planned
