"""What a committed answer cost per verdict, from its report's CSVs alone.

For each report folder given, reads ``cost.csv`` (each stage's runs and run-steps, and the
verdicts its runs feed) and ``answer.csv`` (the Answer's verdicts), and prints the run-steps in
all, how many verdicts were decided, the run-steps per decided verdict, the share of run-steps
that feeds no verdict, and for each verdict the run-steps of the stages that feed it (a stage
feeding two verdicts counts in both; the run-steps in all count each run once).

    python -m ablate.bench.cost reports/ln_vs_rms reports/llama_style
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from ablate.report.cost import ALL

UNDECIDED = ("inconclusive", "not estimable")  # the verdict words that decide nothing


@dataclass(frozen=True)
class AnswerCost:
    """One report's run-steps in all, by verdict (its estimand's title) and feeding none, and
    its verdicts decided and in all."""

    report: str
    run_steps: int
    unused_steps: int
    by_verdict: dict[str, int]
    decided: int
    verdicts: int

    @property
    def per_decided(self) -> float | None:
        """Run-steps per decided verdict; None where none was decided."""
        return self.run_steps / self.decided if self.decided else None


def answer_cost(folder: Path) -> AnswerCost:
    """The :class:`AnswerCost` of the report in ``folder`` (its ``cost.csv`` and
    ``answer.csv``); FileNotFoundError where either is missing."""
    table = pd.read_csv(folder / "cost.csv")
    answer = pd.read_csv(folder / "answer.csv")
    stages = table[table["stage"] != ALL]
    feeds = stages["feeds"].fillna("").str.split("; ")
    by_verdict = {
        title: int(stages.loc[[title in fed for fed in feeds], "run_steps"].sum())
        for title in dict.fromkeys(answer["estimand"])
    }
    none = int(stages.loc[[fed == [""] for fed in feeds], "run_steps"].sum())
    total = int(table.loc[table["stage"] == ALL, "run_steps"].iloc[0])  # distinct runs
    decided = int((~answer["verdict"].isin(UNDECIDED)).sum())
    return AnswerCost(folder.name, total, none, by_verdict, decided, len(answer))


def cost_text(found: AnswerCost) -> str:
    """One report's figures, as the bench prints them."""
    per = found.per_decided
    each = f"{per:,.0f} run-steps per decided verdict" if per else "no verdict decided"
    share = found.unused_steps / found.run_steps if found.run_steps else 0.0
    verdicts = "; ".join(f"{title} {steps:,}" for title, steps in found.by_verdict.items())
    return (
        f"{found.report}: {found.run_steps:,} run-steps, {found.decided} of {found.verdicts} "
        f"verdicts decided: {each}; {share:.0%} of the run-steps feed no verdict; by verdict "
        f"(the stages feeding it): {verdicts}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reports", nargs="+", type=Path, help="committed report folders")
    args = parser.parse_args(argv)
    for folder in args.reports:
        try:
            print(cost_text(answer_cost(folder)))
        except FileNotFoundError as exc:
            print(f"{folder}: {exc.filename}: not found (a report built before cost.csv)")
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
