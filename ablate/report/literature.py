"""``reports/literature/``: every committed literature report's claims in one table.

Each experiment of ``experiments/literature/`` tests one or more published claims
(:mod:`ablate.core.claims`); its report writes ``claims.csv`` (:mod:`ablate.report.claims`).
:func:`gather` reads them all and judges the evidence again as one family, Holm over every
evidence claim of the suite (mechanism checks and tuned claims tested at one LR are outside
it), and :func:`summary_markdown` writes the tables the README links::

    python -m ablate.report.literature reports/literature   # rewrites summary.md and .csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from ablate.report.claims import EVIDENCE, MECHANISM, NOT_THE_CLAIM, claims_markdown, judged
from ablate.report.text import p_text
from ablate.report.verdict import ALPHA

SUMMARY = ("summary.csv", "summary.md")


def gather(folder: Path) -> pd.DataFrame:
    """Every ``<folder>/<report>/claims.csv`` in report order, with the report's name, and the
    suite's own verdicts: Holm over every evidence claim of the suite (:func:`ablate.report.
    claims.judged`; a report adjusts over its own)."""
    frames = [
        pd.read_csv(path).assign(report=path.parent.name)
        for path in sorted(folder.glob("*/claims.csv"))
    ]
    if not frames:
        raise FileNotFoundError(f"{folder}: no */claims.csv (run the literature experiments)")
    frame = pd.concat(frames, ignore_index=True)
    frame["note"] = frame["note"].fillna("")
    return judged(frame.drop(columns=["p_holm", "verdict"]))


def summary_markdown(frame: pd.DataFrame) -> str:
    """The suite's tables, evidence first and the mechanism checks apart, each claim's report
    linked, and how to read them."""
    links = ", ".join(f"[{name}]({name}/report.md)" for name in dict.fromkeys(frame["report"]))
    evidence = frame[frame["role"] == EVIDENCE]
    other = frame[frame["role"] == NOT_THE_CLAIM]
    mechanism = frame[frame["role"] == MECHANISM]

    def holm_column(rows: pd.DataFrame) -> dict[str, list[str]]:
        return {"p, Holm over the evidence": [p_text(p) for p in rows["p_holm"]]}

    parts = [
        "# Published claims tested",
        "",
        "Each row is a claim from the literature as a predicted direction of one quantity, "
        "measured on matched seeds in a small model on 2 CPU cores; each experiment file in "
        "`experiments/literature/` states the claim, its source, its estimand (one LR, or each "
        "model tuned), the direction and a larger setting. A small model is not the paper's "
        "setting: *agrees* means the direction holds here, not that the paper's size of effect "
        "does.",
        "",
        "## The evidence",
        "",
        claims_markdown(evidence, holm_column(evidence)),
        "",
        f"The family: the {len(evidence)} evidence claims, Holm over the "
        f"{int(evidence['p_value'].notna().sum())} tests of no effect they have at α "
        f"{ALPHA:g} (this table's verdicts; a report's own adjust over its claims only). "
        "*agrees* / *disagrees*: the Holm-adjusted p passes, the estimate on the predicted / "
        "the other side; *inconclusive*: it does not, with the seeds that would detect the "
        "measured effect at 80% power. A diverged run is an outcome: for a loss, spikes or LR "
        'sensitivity it ranks worst and the claim is tested on ranks ("(ranks)"); for a '
        "probe of a trained model there is no verdict, and the row says which side the "
        "trained pairs lie on and what it would take.",
        "",
    ]
    if len(other):
        parts += [
            "## Tested at one LR: not the claim",
            "",
            "These claims are about each model at its own tuned LR; at one LR they are not "
            "evidence for or against it (no verdict, outside the family).",
            "",
            claims_markdown(other),
            "",
        ]
    if len(mechanism):
        parts += [
            "## Mechanism checks",
            "",
            "These hold by construction: the variant normalises, penalises, caps or scales the "
            "very quantity. Each checks the mechanism works here, at its own p (95%), outside "
            "the family: no evidence for the claim.",
            "",
            claims_markdown(mechanism),
            "",
        ]
    return "\n".join([*parts, f"Reports: {links}.", ""])


def write_summary(folder: Path) -> list[Path]:
    """Gather ``folder``'s claims and write its summary files; their paths."""
    frame = gather(folder)
    csv_path, md_path = (folder / name for name in SUMMARY)
    frame.to_csv(csv_path, index=False)
    md_path.write_text(summary_markdown(frame), encoding="utf-8")
    return [csv_path, md_path]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ablate.report.literature", description=__doc__.splitlines()[0]
    )
    parser.add_argument("folder", type=Path, nargs="?", default=Path("reports/literature"))
    args = parser.parse_args(argv)
    try:
        paths = write_summary(args.folder)
    except FileNotFoundError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\n".join(str(p) for p in paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
