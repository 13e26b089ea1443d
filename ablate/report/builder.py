"""The report, rebuilt from the results store alone: the one place that writes its files.

:func:`build_report` reads an experiment's folder (:mod:`ablate.report.load`), has each section
compute its Markdown, tables and figures, and writes into the report folder:

- ``report.md`` and a self-contained ``report.html`` (figures embedded, opens offline): the
  written summary (:mod:`ablate.report.summary`), then the sections' tables and figures;
- with a search, ``comparison.csv`` and ``variants_tuned.csv`` (:mod:`ablate.report.comparison`);
- ``variants.csv`` / ``variants.md``: per variant, final and best val loss mean ± std over
  seeds, the paired difference to the baseline (first) variant with its 95% interval and
  paired t-test, parameters, tokens/s, step time, peak memory, non-finite counts, diverged
  runs, and (when studied) the max-stable-LR bracket and LR sensitivity;
- ``loss_difference.csv``, ``probes_last.csv`` and the figures (:mod:`ablate.report.quality`);
- ``runs.csv`` (one row per run) and the LR-sweep / max-LR / search CSVs
  (:mod:`ablate.report.studies`);
- for a grid, ``factors.csv``; for a ``convert:`` section, ``convert.csv``
  (:mod:`ablate.report.convert`).

:func:`build_scaling_report` writes the scaling report of a ``scale:`` experiment
(:mod:`ablate.report.scaling`) the same way.

It works on partial and still-running experiments: what is missing is listed with its state
(running, failed, not started), and every table and figure uses what is stored. The build
writes ``.built.json`` last, so an interrupted build is never taken as current.
"""

from __future__ import annotations

import base64
import html
import re
import time
from dataclasses import dataclass
from pathlib import Path

import markdown
import pandas as pd

from ablate.core import folders, store
from ablate.core.folders import ExperimentFolder
from ablate.report.context import ReportContext
from ablate.report.estimands import Findings
from ablate.report.figures import save_figure
from ablate.report.load import StoredExperiment, load_experiment_results
from ablate.report.quality import main_label
from ablate.report.scaling import scaling_section
from ablate.report.section import Section
from ablate.report.sections import SECTIONS
from ablate.report.text import quality_markdown


@dataclass(frozen=True)
class Report:
    """Paths of what :func:`build_report` wrote, the variant table, and the verdicts."""

    folder: Path
    markdown: Path
    html: Path
    table: pd.DataFrame
    figures: list[Path]
    missing: list[str]
    found: Findings  # every verdict the report states, as objects

    @property
    def table_markdown(self) -> str:
        """The quality table as Markdown."""
        return quality_markdown(self.table)


FIGURE_SUFFIX = ".png"  # every figure a section names (Section.figures)

HTML_STYLE = """
body { font-family: system-ui, sans-serif; max-width: 1200px; margin: 2em auto; padding: 0 1em;
       color: #222; line-height: 1.45; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }
th { background: #f3f3f3; } td:first-child, th:first-child { text-align: left; }
img { max-width: 100%; } code { background: #f3f3f3; padding: 0 0.2em; }
"""


def markdown_to_html(text: str, folder: Path, title: str) -> str:
    """A self-contained HTML page of a report.md: tables rendered, images embedded as data."""
    body = markdown.markdown(text, extensions=["tables"])

    def embed(match: re.Match[str]) -> str:
        path = folder / html.unescape(match.group(1))
        if not path.is_file():
            return match.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'src="data:image/png;base64,{data}"'

    body = re.sub(r'src="([^"]+\.png)"', embed, body)
    return (
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)}</title><style>{HTML_STYLE}</style></head>\n"
        f"<body>\n{body}\n</body></html>\n"
    )


def write_section(section: Section, folder: Path) -> None:
    """Write a section's tables (CSV) and figures (PNG, each drawn here) into the report folder."""
    for name, frame in section.tables.items():
        folders.write_frame_atomic(folder / name, frame)
    for name, figure in section.figures.items():
        save_figure(figure, folder / name)


def start_build(report_dir: Path) -> float:
    """Make the folder not current until this build completes, and drop every figure in it
    and every file the last build recorded (the sections name what this build writes; a
    figure or table whose data are gone must not survive); the build's start time."""
    report_dir.mkdir(parents=True, exist_ok=True)
    built = report_dir / folders.REPORT_BUILT
    previous = (folders.read_json(built) or {}).get("files", [])
    built.unlink(missing_ok=True)
    for name in previous:
        (report_dir / Path(str(name)).name).unlink(missing_ok=True)
    for old in report_dir.glob(f"*{FIGURE_SUFFIX}"):
        old.unlink()
    return time.time()


def finish_build(report_dir: Path, started: float, built_from: str) -> None:
    """Record, last, the files this build wrote and the digest of the results it read
    (:func:`ablate.core.store.results_digest`): the report is current from now on."""
    written = sorted(
        p.name for p in report_dir.iterdir() if p.is_file() and p.stat().st_mtime >= started - 1
    )
    folders.write_json_atomic(
        report_dir / folders.REPORT_BUILT,
        {"built_from": built_from, "files": [n for n in written if n != folders.REPORT_BUILT]},
    )


def report_sections(stored: StoredExperiment, variants: list[str]) -> tuple[Section, ReportContext]:
    """Every section of :data:`~ablate.report.sections.SECTIONS` in reading order, joined, and
    the one :class:`~ablate.report.context.ReportContext` they were computed over."""
    ctx = ReportContext.of(stored, variants)
    report = Section()
    for section in SECTIONS:
        report.extend(section(ctx))
    return report, ctx


def printed_tables(
    stored: StoredExperiment, table: pd.DataFrame, tuned: pd.DataFrame | None
) -> str:
    """The final-quality tables, each under the name of the runs it holds (tuned first: the
    summary leads with it)."""
    parts = []
    if tuned is not None:
        parts += [
            "Final quality, each variant at its own tuned LR and warmup (leading comparison):",
            "",
            quality_markdown(tuned),
            "",
        ]
    parts += [f"Final quality, {main_label(stored.manifest)}:", "", quality_markdown(table)]
    return "\n".join(parts) + "\n"


def build_report(folder: ExperimentFolder, report_dir: Path) -> Report:
    """Rebuild every table and figure of an experiment from its stored results."""
    built_from = store.results_digest(folder)  # before reading: a result stored meanwhile
    stored = load_experiment_results(folder)  # leaves this build not current
    variants = stored.manifest.variants or sorted(stored.main["variant"].unique())
    started = start_build(report_dir)
    report, ctx = report_sections(stored, variants)
    write_section(report, report_dir)
    text = "\n".join(report.lines)
    printed = printed_tables(stored, ctx.table, ctx.tuned)
    folders.write_text_atomic(report_dir / "variants.md", printed)
    folders.write_text_atomic(report_dir / "report.md", text)
    page = markdown_to_html(text, report_dir, stored.manifest.name)
    folders.write_text_atomic(report_dir / "report.html", page)
    finish_build(report_dir, started, built_from)
    figures = [report_dir / name for name in report.figures]
    return Report(
        report_dir,
        report_dir / "report.md",
        report_dir / "report.html",
        ctx.table,
        figures,
        stored.missing,
        ctx.found,
    )


def build_scaling_report(scaled: ExperimentFolder, report_dir: Path) -> Path:
    """Write the scaling report (Markdown, HTML, CSVs, figures); the Markdown's path."""
    listing = scaled.scale
    manifest = folders.read_json(listing)
    if manifest is None:
        raise FileNotFoundError(f"{listing}: not found")
    section = scaling_section(manifest, scaled)
    report_dir.mkdir(parents=True, exist_ok=True)
    write_section(section, report_dir)
    text = "\n".join(section.lines)
    folders.write_text_atomic(report_dir / "report.md", text)
    page = markdown_to_html(text, report_dir, f"{manifest['name']}: scaling")
    folders.write_text_atomic(report_dir / "report.html", page)
    return report_dir / "report.md"
