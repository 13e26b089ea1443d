"""``reports/literature/``: every committed literature report's claims in one table.

Each experiment of ``experiments/literature/`` tests one or more published claims
(:mod:`ablate.core.claims`); its report writes ``claims.csv`` (:mod:`ablate.report.claims`).
:func:`gather` reads them all, adds Holm-adjusted p-values over every claim together (the family
is the whole suite), and :func:`summary_markdown` writes the table the README links::

    python -m ablate.report.literature reports/literature   # rewrites summary.md and .csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from ablate.report.analysis import holm
from ablate.report.claims import claims_markdown

SUMMARY = ("summary.csv", "summary.md")


def gather(folder: Path) -> pd.DataFrame:
    """Every ``<folder>/<report>/claims.csv`` in report order, with the report's name and the
    Holm-adjusted p-value over all of them."""
    frames = [
        pd.read_csv(path).assign(report=path.parent.name)
        for path in sorted(folder.glob("*/claims.csv"))
    ]
    if not frames:
        raise FileNotFoundError(f"{folder}: no */claims.csv (run the literature experiments)")
    frame = pd.concat(frames, ignore_index=True)
    frame["holm_p"] = holm(list(frame["p_value"]))
    return frame


def summary_markdown(frame: pd.DataFrame) -> str:
    """The suite's table with each claim's report linked, and how to read it."""
    holm_text = [f"{p:.2g}" if pd.notna(p) else "–" for p in frame["holm_p"]]
    table = claims_markdown(frame, {"p, Holm over all claims": holm_text})
    links = ", ".join(f"[{name}]({name}/report.md)" for name in dict.fromkeys(frame["report"]))
    survives = frame[frame["verdict"].isin(["agrees", "disagrees"])]
    tested = int(frame["p_value"].notna().sum())
    fragile = survives[survives["holm_p"] >= 0.05]
    fragile_text = (
        f" Of the {len(survives)} decided claims, "
        + (
            f"{len(fragile)} would not be at α 0.05 after Holm's adjustment over the "
            f"{tested} with a p-value ({'; '.join(map(claim_label, fragile.itertuples()))})."
            if len(fragile)
            else f"every one is still decided after Holm's adjustment over the {tested} with a "
            "p-value."
        )
        if len(survives)
        else ""
    )
    return "\n".join(
        [
            "# Published claims tested",
            "",
            "Each row is a claim from the literature as a predicted direction of one quantity, "
            "measured on matched seeds in a small model on 2 CPU cores; each experiment file "
            "in `experiments/literature/` states the claim, its source, the direction and a "
            "larger setting. A small model is not the paper's setting: *agrees* means the "
            "direction holds here, not that the paper's size of effect does.",
            "",
            table,
            "",
            "*agrees* / *disagrees*: the 95% paired t interval over seeds lies wholly on the "
            "predicted / the other side of no effect; *inconclusive*: it holds no effect, with "
            "the seeds that would detect the measured effect at 80% power; *no verdict*: a "
            "compared run diverged. The last column adjusts each claim's paired t-test p by "
            "Holm over every claim of the suite (a report adjusts over its own comparisons "
            "only)." + fragile_text,
            "",
            f"Reports: {links}.",
            "",
        ]
    )


def claim_label(row: Any) -> str:
    """A claim in a few words: ``mix_ln: mix vs pre, final_val_loss``."""
    return f"{row.report}: {row.variant} vs {row.baseline}, {row.metric}"


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
