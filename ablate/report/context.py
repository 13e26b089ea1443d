"""What every report section is given: one :class:`ReportContext`, computed once from the
stored experiment before any section (:meth:`ReportContext.of`).

It holds the stored experiment and its variants in order, the quality tables (the main runs',
with the studies' max stable LR and LR sensitivity attached, and the tuned A/B's), the seed
noise floor, the answer's findings (the analysis plan's estimands and their verdict objects,
:mod:`ablate.report.estimands`), the factorial design with its section and main effects, the
spike settings and the LR sweep's section. Sections read what they need from it and return a
:class:`~ablate.report.section.Section`; :data:`ablate.report.sections.SECTIONS` lists them in
reading order.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from ablate.core.experiment import SPIKE_WINDOW
from ablate.report.analysis import noise_floor
from ablate.report.estimands import Findings, findings
from ablate.report.factorial import Design
from ablate.report.load import StoredExperiment
from ablate.report.quality import factors_section
from ablate.report.section import Section
from ablate.report.studies import attach_studies, sweep_section
from ablate.report.summary import quality_tables


@dataclass(frozen=True)
class ReportContext:
    """The stored experiment and everything computed from it that more than one section reads."""

    stored: StoredExperiment
    variants: list[str]
    table: pd.DataFrame  # the main runs' quality table, studies attached (variants.csv)
    tuned: pd.DataFrame | None  # the tuned A/B's quality table, with a search or curve
    noise: float  # the seed-noise floor of the main runs
    found: Findings  # the analysis plan's estimands, measured and judged
    design: Design | None  # the grid's factorial design, for a grid
    factors: Section  # the grid's factor tables (empty without a grid)
    effects: pd.DataFrame | None  # the grid's main effects
    spikes: tuple[float | None, int]  # (analysis.spike_factor, analysis.spike_window)
    sweep: Section  # the LR sweep's section (empty without a sweep)

    @classmethod
    def of(cls, stored: StoredExperiment, variants: list[str]) -> ReportContext:
        """Compute the context of a report of ``stored`` over ``variants``."""
        manifest = stored.manifest
        table, tuned = quality_tables(stored, variants)
        sweep, sensitivity = sweep_section(stored, variants)
        design = Design.from_manifest(manifest)
        factors, effects = factors_section(stored.main, design) if design else (Section(), None)
        # a manifest from before the spike keys were kept has neither: none counted
        spikes = (manifest.spike_factor, manifest.spike_window or SPIKE_WINDOW)
        return cls(
            stored,
            variants,
            attach_studies(table, sensitivity, stored.studies),
            tuned,
            noise_floor(stored.main),
            findings(stored),
            design,
            factors,
            effects,
            spikes,
            sweep,
        )
