"""Reporting: analysis (pandas, scipy), the factorial design, figures, sections and the builder.

Sections compute and return their text, tables and figures; only
:func:`ablate.report.builder.build_report` writes files.
"""
