"""What a report section returns: Markdown lines, and the CSV tables and figures it computed.

A section never writes: :func:`ablate.report.builder.build_report` writes every table and
figure under the file name the section gives it, then the Markdown and HTML.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from ablate.report.figures import Drawing


@dataclass
class Section:
    """One part of a report: its lines, and ``{file name: frame or figure to draw}`` to write."""

    lines: list[str] = field(default_factory=list)
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    figures: dict[str, Drawing] = field(default_factory=dict)

    def figure(self, name: str, figure: Drawing | None, title: str, caption: str) -> None:
        """Add ``figure`` as ``name`` with its heading and caption (nothing when it is None)."""
        if figure is not None:
            self.figures[name] = figure
            self.lines += [f"### {title}", "", caption, "", f"![{title}]({name})", ""]

    def extend(self, other: Section) -> None:
        """Append ``other``'s lines, tables and figures to this section."""
        self.lines += other.lines
        self.tables.update(other.tables)
        self.figures.update(other.figures)
