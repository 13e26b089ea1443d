"""The ``ablate`` command line: parsing, dispatch, exit codes and Ctrl-C (what each command
does: :mod:`ablate.commands`).

Commands: ``run`` (every stage of :mod:`ablate.launch.pipeline`: shared-LR A/B, search, tuned A/B,
max stable LR, convert, report),
``search`` (run or continue the Optuna studies: search and max stable LR), ``validate`` (check
a file and print the plan with its cost), ``report`` (rebuild tables and figures from stored
results), ``status`` (where the runs stand, per stage, with their Slurm jobs), ``bench`` (norm
kernels and training steps, timed).
Exit codes: 0 success, 1 some run failed, 2 bad input (config or data), 130 interrupted.
"""

from __future__ import annotations

import _thread
import argparse
import signal
import sys
from pathlib import Path
from typing import Any

from ablate.commands import (
    COMMANDS,
    EXIT_BAD_INPUT,
    EXIT_INTERRUPTED,
    EXIT_RUN_FAILED,
    UsageError,
)
from ablate.core.launchers import launcher_names


def _add_execution_args(parser: argparse.ArgumentParser) -> None:
    """Options shared by the commands that train: where results go, workers, threads, storage."""
    parser.add_argument("experiment", type=Path, help="experiment YAML file")
    parser.add_argument(
        "--results-dir",
        type=Path,
        default=Path("results"),
        help="root of the results store (default: results/)",
    )
    parser.add_argument(
        "--workers",
        type=int,
        default=None,
        help="runs or studies at once (default: one per core, at most one each)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch threads per run (default: 1 on CPUs, the cores per GPU on GPUs, whatever "
        "else runs: the thread count is part of what decides a run's bits)",
    )
    parser.add_argument(
        "--storage",
        default=None,
        help="Optuna storage: sqlite:///FILE, postgresql://..., journal:PATH "
        "(default: the file's storage:, else results/<experiment>/optuna.db)",
    )
    _add_backend_arg(parser)
    _add_setting_args(parser)
    parser.add_argument(
        "--launcher",
        choices=launcher_names(),
        default=None,
        help="where runs execute: here (local), as Slurm jobs (slurm: runtime.slurm, "
        "docs/distributed.md), or a launcher another package registers; default: the "
        "file's runtime.launcher",
    )


def _add_setting_args(parser: argparse.ArgumentParser) -> None:
    """--set and --seeds: keys of the experiment file changed for this command."""
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a dotted key of the file, its value parsed as YAML (train.lr=0.003, "
        "curve.seeds=[3,4]); repeatable; run ids follow the resulting config",
    )
    parser.add_argument(
        "--seeds", default=None, help="the experiment's seeds, comma-separated (as --set seeds=)"
    )
    parser.add_argument(
        "--primary-only",
        action="store_true",
        help="leave out the file's sections whose stages feed no primary verdict of its "
        "analysis plan (as --set SECTION=null each; e.g. max_lr where tuned runs lead)",
    )


def _add_backend_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=["train", "simulate"],
        default=None,
        help="train runs, or draw them from the known-truth simulator (as <name>-simulated; "
        "docs/simulator.md); default: the file's runtime.backend",
    )


def installed_version() -> str:
    """ablate's version as installed (pyproject.toml's), or "unknown" outside an install."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ablate")
    except PackageNotFoundError:
        return "unknown"


Subcommands = argparse._SubParsersAction  # what add_subparsers returns: one parser per command


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(
        prog="ablate",
        description="Matched-seed normalization ablations (LayerNorm vs RMSNorm, placement) "
        "on a small decoder-only transformer.",
    )
    parser.add_argument("--version", action="version", version=f"ablate {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run(sub)
    _add_search(sub)
    _add_validate(sub)
    _add_bench(sub)
    _add_status(sub)
    _add_report(sub)
    return parser


def _add_run(sub: Subcommands) -> None:
    """``ablate run``: every stage of an experiment and its report."""
    run = sub.add_parser(
        "run",
        help="every stage: shared-LR A/B (+ sweep), search, tuned A/B, max stable LR, convert, "
        "report",
    )
    _add_execution_args(run)
    run.add_argument(
        "--report-dir",
        type=Path,
        default=Path("reports"),
        help="root of the reports; the report goes to <dir>/<experiment>/ (default: reports/)",
    )


def _add_search(sub: Subcommands) -> None:
    """``ablate search``: the Optuna studies alone."""
    search = sub.add_parser(
        "search", help="run or continue only the Optuna studies (search: and max_lr:)"
    )
    _add_execution_args(search)


def _add_validate(sub: Subcommands) -> None:
    """``ablate validate``: the file checked, its plan and cost printed."""
    validate = sub.add_parser("validate", help="check an experiment file; print the plan and cost")
    validate.add_argument("experiment", type=Path, help="experiment YAML file")
    validate.add_argument("--workers", type=int, default=None, help="as for run")
    _add_backend_arg(validate)
    _add_setting_args(validate)
    validate.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="also say which planned runs this results store holds and which would be trained",
    )
    validate.add_argument(
        "--time",
        action="store_true",
        help="time each distinct model's training step on this machine (kept for later "
        "validates, which price the plan from the stored times)",
    )
    validate.add_argument(
        "--simulate",
        action="store_true",
        help="run the whole design on the simulator (at the truth runtime.simulate states) "
        "and print the verdicts and seeds it would reach; nothing is stored",
    )


def _add_bench(sub: Subcommands) -> None:
    """``ablate bench``: the norm kernels and training steps timed, or inference measured."""
    bench = sub.add_parser(
        "bench", help="time every norm kernel and the training step of each variant"
    )
    bench.add_argument(
        "--experiment",
        type=Path,
        default=Path("experiments/ln_vs_rms.yaml"),
        help="whose variants' training steps to time (default: experiments/ln_vs_rms.yaml); "
        "'none' skips the step benchmark",
    )
    bench.add_argument(
        "--dims", default="128,512,1024,4096,8192", help="hidden sizes, comma-separated"
    )
    bench.add_argument("--tokens", default="8192", help="token counts (rows), comma-separated")
    bench.add_argument("--dtypes", default="fp32,bf16", help="fp32 and/or bf16")
    bench.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    bench.add_argument("--threads", type=int, default=None, help="torch threads (default: all)")
    bench.add_argument("--no-compile", action="store_true", help="skip torch.compile'd kernels")
    bench.add_argument("--steps", type=int, default=20, help="timed training steps per variant")
    bench.add_argument("--repeats", type=int, default=3, help="alternating rounds of variants")
    bench.add_argument(
        "--min-run-time", type=float, default=0.2, help="seconds per kernel measurement"
    )
    bench.add_argument("--rounds", type=int, default=3, help="kernel rounds (median kept)")
    bench.add_argument(
        "--out", type=Path, default=Path("reports/bench"), help="folder for CSVs and the figure"
    )
    bench.add_argument(
        "--inference",
        action="store_true",
        help="instead: prefill tokens/s, decode TPOT, memory and the norm's share of decode "
        "time per variant in fp32, bf16 and int8 (docs/benchmarks.md)",
    )
    bench.add_argument("--batches", default="1,8", help="--inference: batch sizes")
    bench.add_argument("--prompts", default="16,32", help="--inference: prompt lengths")
    bench.add_argument("--new-tokens", type=int, default=16, help="--inference: decoded tokens")
    bench.add_argument(
        "--results-dir", type=Path, default=None, help="--inference: use the stored weights"
    )


def _add_status(sub: Subcommands) -> None:
    """``ablate status``: where an experiment's runs stand."""
    status = sub.add_parser(
        "status",
        help="where an experiment's runs stand: per stage done, failed, interrupted, running, "
        "queued (with their Slurm jobs)",
    )
    status.add_argument(
        "results",
        type=Path,
        help="an experiment's results folder, e.g. results/ln_vs_rms (or a root holding one)",
    )


def _add_report(sub: Subcommands) -> None:
    """``ablate report``: the report rebuilt from stored results."""
    report = sub.add_parser("report", help="rebuild tables and figures from stored results")
    report.add_argument(
        "results", type=Path, help="an experiment's results folder, e.g. results/ln_vs_rms"
    )
    report.add_argument(
        "--out",
        type=Path,
        default=None,
        help="report folder (default: where ablate run last wrote this experiment's report, "
        "else reports/<experiment>/)",
    )


def os_error_line(exc: OSError) -> str:
    """One line for a file-system error; stored files are written by rename, so never half."""
    where = f"{exc.filename}: " if exc.filename else ""
    what = exc.strerror or str(exc)
    return (
        f"{where}{what} (errno {exc.errno}); files already stored are unchanged (each is "
        "written to a temporary name and renamed)"
    )


INTERRUPTED = "ablate: interrupted; finished runs are kept, the others redo on the next run"


class CtrlC:
    """Ctrl-C that always ends the command with 130. Python or a library can swallow a
    ``KeyboardInterrupt`` (one raised in an import lock's callback is only printed as
    "Exception ignored"; a bare ``except:`` drops it): a swallowed one that Python reports is
    raised again and not printed, and a command that returns after a Ctrl-C it never saw still
    exits 130."""

    def __init__(self) -> None:
        self.pending = False  # a Ctrl-C came that main has not handled yet

    def __enter__(self) -> CtrlC:
        self.handler = signal.signal(signal.SIGINT, self.on_signal)
        self.hook = sys.unraisablehook
        sys.unraisablehook = self.on_unraisable
        return self

    def __exit__(self, *exc: object) -> None:
        sys.unraisablehook = self.hook
        signal.signal(signal.SIGINT, self.handler)

    def on_signal(self, signum: int, frame: object) -> None:
        """SIGINT: remember it and raise ``KeyboardInterrupt``."""
        self.pending = True
        raise KeyboardInterrupt

    def on_unraisable(self, unraisable: Any) -> None:
        """A swallowed ``KeyboardInterrupt`` is raised again instead of printed. When the
        handler runs at once, inside this hook (where an exception only gets printed as a
        traceback), it is caught: ``pending`` still ends the command with 130."""
        if not issubclass(unraisable.exc_type, KeyboardInterrupt):
            self.hook(unraisable)
            return
        self.pending = True
        try:
            _thread.interrupt_main(signal.SIGINT)
        except KeyboardInterrupt:
            return


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``ablate`` console script. Ctrl-C at any moment, from parsing to the
    report, exits 130 with one line and no traceback. torch's CPU code paths are pinned first
    (:func:`ablate.core.numerics.pin_cpu_numerics`), before anything computes."""
    from ablate.core.numerics import pin_cpu_numerics

    pin_cpu_numerics()
    with CtrlC() as ctrl_c:
        try:
            code = _dispatch(argv)
        except KeyboardInterrupt:
            ctrl_c.pending = True
        if not ctrl_c.pending:
            return code
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C: no traceback
        print(INTERRUPTED, file=sys.stderr)
        return EXIT_INTERRUPTED


def _dispatch(argv: list[str] | None) -> int:
    """Parse, run the command, and turn bad input into one line and exit code 2."""
    args = build_parser().parse_args(argv)
    from rich.console import Console

    from ablate.core.errors import ConfigError, DataError
    from ablate.core.store import StoreFault

    console = Console(soft_wrap=True)  # long lines stay whole in logs
    try:
        return COMMANDS[args.command](args, console)
    except (ConfigError, DataError, UsageError) as exc:
        print(f"ablate {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except StoreFault as exc:  # the store filled up or turned read-only while runs trained
        print(f"ablate {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_RUN_FAILED
    except OSError as exc:  # a read-only or full results folder, a vanished file, ...
        print(f"ablate {args.command}: error: {os_error_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
