"""What each committed experiment cost, in one generated table: ``reports/times.csv``.

One row per report folder under the root (or folder of measured data, whose card is its
``README.md``): the experiment, its runs and their own time summed
(``runs.csv``), and, where the store recorded the ``ablate run`` invocations that trained them
(``jobs.csv``, :mod:`ablate.core.jobs`), the wall time, workers, CPU and whether the machine
was idle. The README, the docs and ``ablate validate`` take an experiment's time from here, and
a test holds them to it. ``python -m ablate.report.times [reports]`` rewrites it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from ablate.core.folders import write_frame_atomic

TIMES = "times.csv"
COLUMNS = [
    "report",
    "experiment",
    "runs",
    "run_minutes",
    "wall_min",
    "invocations",
    "workers",
    "cores",
    "cpu",
    "machine",
]
TYPES = {"runs": "Int64", "invocations": "Int64", "workers": "string", "cores": "string"}


CARDS = ("report.md", "README.md")  # a built report, or the card of measured data (no report)


def report_folders(root: Path) -> list[Path]:
    """Every folder under ``root`` holding a runs table beside a built report or a data card."""
    found = {p.parent for name in CARDS for p in root.rglob(name)}
    return sorted(f for f in found if (f / "runs.csv").is_file())


def _joined(values: pd.Series) -> str:
    return "/".join(sorted({str(v) for v in values.dropna()}))


def time_row(folder: Path, root: Path) -> dict[str, object]:
    """One report's row: its runs from ``runs.csv``, its wall time from ``jobs.csv``."""
    runs = pd.read_csv(folder / "runs.csv", usecols=["run_id", "experiment", "wall_time_s"])
    runs = runs.drop_duplicates("run_id")
    row: dict[str, object] = {
        "report": folder.relative_to(root).as_posix(),
        "experiment": _joined(runs["experiment"]),
        "runs": len(runs),
        "run_minutes": round(float(runs["wall_time_s"].sum()) / 60, 1),
    }
    jobs_file = folder / "jobs.csv"
    if jobs_file.is_file():
        jobs = pd.read_csv(jobs_file)
        row |= {
            "wall_min": round(float(jobs["wall_s"].sum()) / 60, 1),
            "invocations": len(jobs),
            "workers": _joined(jobs["workers"]),
            "cores": _joined(jobs["cores"]),
            "cpu": _joined(jobs["cpu"]),
            "machine": _joined(jobs["machine"]),
        }
    return row


def times_table(root: Path) -> pd.DataFrame:
    """Every report's row under ``root``, by report folder."""
    rows = [time_row(folder, root) for folder in report_folders(root)]
    return pd.DataFrame(rows, columns=COLUMNS).astype(TYPES)


def read_times(root: Path) -> pd.DataFrame:
    """The committed table (empty where there is none), indexed by report folder."""
    path = root / TIMES
    table = pd.read_csv(path, dtype=TYPES) if path.is_file() else pd.DataFrame(columns=COLUMNS)
    return table.set_index("report")


def times_file(experiment_file: Path) -> Path | None:
    """The ``reports/times.csv`` of the checkout an experiment file is in (the nearest folder
    above it that has one), None for a file outside one."""
    for folder in Path(experiment_file).resolve().parents:
        if (folder / "reports" / TIMES).is_file():
            return folder / "reports" / TIMES
    return None


def committed_time(experiment_file: Path, name: str) -> pd.Series | None:
    """The committed row of experiment ``name``: the report folder named after it, else the
    first with a measured wall time, else the first; None where no report has its runs."""
    path = times_file(experiment_file)
    if path is None:
        return None
    table = read_times(path.parent)
    rows = table[table["experiment"] == name]
    if not len(rows):
        return None
    order = [r for r in rows.index if r == name] + list(rows.index[rows["wall_min"].notna()])
    return rows.loc[(order or list(rows.index))[0]]


def time_line(row: pd.Series) -> str:
    """What ``ablate validate`` prints of a committed row."""
    where = f"reports/{row.name}: reports/{TIMES}"
    if pd.isna(row["wall_min"]):
        return (
            f"committed: {int(row['runs'])} runs, {row['run_minutes']:.1f} run-minutes summed; "
            f"their wall time was not recorded ({where})"
        )
    return (
        f"committed: {row['wall_min']:.1f} min wall for {int(row['runs'])} runs, "
        f"{row['workers']} worker(s) on {row['cores']} cores of {row['cpu']}, machine "
        f"{row['machine']} ({where})"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write reports/times.csv from the reports.")
    parser.add_argument("root", nargs="?", type=Path, default=Path("reports"))
    args = parser.parse_args(argv)
    table = times_table(args.root)
    write_frame_atomic(args.root / TIMES, table)
    measured = table["wall_min"].notna().sum()
    print(f"{args.root / TIMES}: {len(table)} reports, {measured} with a measured wall time")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
