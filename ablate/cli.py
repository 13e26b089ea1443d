"""The ``ablate`` command line: argument parsing and printing only.

Commands: ``run`` (every stage of :mod:`ablate.launch.pipeline`: shared-LR A/B, search, tuned A/B,
max stable LR, convert, report),
``search`` (run or continue the Optuna studies: search and max stable LR), ``validate`` (check
a file and print the plan with its cost), ``report`` (rebuild tables and figures from stored
results), ``bench`` (norm kernels and training steps, timed).
Exit codes: 0 success, 1 some run failed, 2 bad input (config or data), 130 interrupted.
"""

from __future__ import annotations

import _thread
import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from ablate.core.experiment import Experiment


EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(ValueError):
    """A bad command-line value, as one line."""


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
        help="torch threads per worker (default: cores / workers)",
    )
    parser.add_argument(
        "--storage",
        default=None,
        help="Optuna storage: sqlite:///FILE, postgresql://..., journal:PATH "
        "(default: the file's storage:, else results/<experiment>/optuna.db)",
    )
    _add_backend_arg(parser)


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


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(
        prog="ablate",
        description="Matched-seed normalization ablations (LayerNorm vs RMSNorm, placement) "
        "on a small decoder-only transformer.",
    )
    parser.add_argument("--version", action="version", version=f"ablate {installed_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

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

    search = sub.add_parser(
        "search", help="run or continue only the Optuna studies (search: and max_lr:)"
    )
    _add_execution_args(search)

    validate = sub.add_parser("validate", help="check an experiment file; print the plan and cost")
    validate.add_argument("experiment", type=Path, help="experiment YAML file")
    validate.add_argument("--workers", type=int, default=None, help="as for run")
    _add_backend_arg(validate)
    validate.add_argument(
        "--results-dir",
        type=Path,
        default=None,
        help="also say which planned runs this results store holds and which would be trained",
    )

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
    return parser


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{flag}: got {value}; must be an integer >= 1")


def cmd_validate(args: argparse.Namespace, console: Console) -> int:
    """Print the plan of an experiment file and an estimate of its time (per size under
    ``scale:``)."""
    from ablate.core.load import load_experiment
    from ablate.core.overrides import difference_lines

    experiment = load_experiment(args.experiment, args.backend)
    console.print(f"[bold]{experiment.name}[/bold]: {experiment.description}".rstrip(": "))
    if experiment.scale is None:
        _print_plan(experiment, args, console)
    else:
        from ablate.launch.scale import resolve_sizes

        total = 0.0
        for size in resolve_sizes(experiment):
            console.print(
                f"[bold]size {size.label}[/bold]: {size.n_params:,} parameters, "
                f"{size.tokens:,} tokens per run"
            )
            total += _print_plan(size.experiment, args, console)
        console.print(f"estimated wall time, all sizes: {total / 60:.1f} min")
    lines = difference_lines(experiment)
    for line in lines[: SHOWN_VARIANTS + 1]:  # the heading, then a line per variant
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    _print_more(len(lines) - 1, console)
    _warn_impure(experiment, console)
    return EXIT_OK


SHOWN_VARIANTS = 50  # validate lists a large grid's first variants and counts the rest


def _print_more(variants: int, console: Console) -> None:
    if variants > SHOWN_VARIANTS:
        console.print(f"  ... and {variants - SHOWN_VARIANTS:,} more variants", markup=False)


def _warn_impure(experiment: Experiment, console: Console) -> None:
    """A warning line per variant that changes more than the norm against the baseline."""
    from ablate.core.overrides import impure_variants, impurity_lines

    baseline = next(iter(experiment.variants))
    for line in impurity_lines(impure_variants(experiment), baseline):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def _print_plan(experiment: Experiment, args: argparse.Namespace, console: Console) -> float:
    """The runs, the per-variant estimate table and the wall time of one experiment; the time."""
    from ablate.core.plan import planned_groups
    from ablate.launch.estimate import describe_plan
    from ablate.launch.workers import choose_resources, gpu_count

    n_runs = len(experiment.seeds) * len(experiment.variants)
    res = choose_resources(
        n_runs,
        args.workers or experiment.base.runtime.workers,
        experiment.base.runtime.threads,
        gpus=gpu_count(experiment.base.runtime.accelerator),
    )
    plan = describe_plan(experiment, res.workers, res.threads)
    groups = ", ".join(planned_groups(experiment))
    console.print(
        f"seeds {experiment.seeds}; up to {plan.runs} runs ({groups}); "
        f"{res.workers} worker(s) x {res.threads} thread(s)"
    )
    console.print(
        plan.table.head(SHOWN_VARIANTS).to_markdown(index=False, floatfmt=".1f"),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    _print_more(len(plan.table), console)
    console.print(
        f"estimated wall time: {plan.wall_time_s / 60:.1f} min (measured step time x steps, "
        f"plus evaluation; of which {plan.fixed_s:.0f} s fixed costs: run set-up, pool starts, "
        "start-up and report)"
    )
    if experiment.base.runtime.backend == "simulate":
        console.print(
            "backend simulate: no run trains (each is drawn in milliseconds); the estimate is "
            "what training this plan would take"
        )
    if args.results_dir is not None:
        from ablate.launch.estimate import stored_lines

        for line in stored_lines(experiment, args.results_dir):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return plan.wall_time_s


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    """Run every stage of an experiment (:mod:`ablate.launch.pipeline`) and print the outcome."""
    from ablate.core.load import load_experiment
    from ablate.launch.pipeline import run_experiment

    _positive(args.workers, "--workers")
    _positive(args.threads, "--threads")
    experiment = load_experiment(args.experiment, args.backend)
    _warn_impure(experiment, console)
    if experiment.scale is not None:
        return _run_scaled(args, experiment, console)
    result = run_experiment(
        experiment,
        args.results_dir,
        args.report_dir,
        args.workers,
        args.threads,
        args.storage,
        console,
    )
    _print_studies(result.studies, console)
    table = (result.report_dir / "variants.md").read_text(encoding="utf-8")
    console.print(table, markup=False, highlight=False, soft_wrap=True)
    state = "" if result.report_rebuilt else " (up to date)"
    console.print(f"results: {result.exp_dir}\nreport:  {result.report_dir / 'report.md'}{state}")
    if result.missing:
        console.print(
            f"{len(result.missing)} planned run(s) not done (failed, or still trained by "
            f"another process): see {result.report_dir / 'report.md'}",
            markup=False,
        )
    return EXIT_RUN_FAILED if result.missing else EXIT_OK


def _run_scaled(args: argparse.Namespace, experiment: Experiment, console: Console) -> int:
    """``ablate run`` of a file with a ``scale:`` section: every size, then the scaling report."""
    from ablate.launch.scale import run_scaled

    result = run_scaled(
        experiment,
        args.results_dir,
        args.report_dir,
        args.workers,
        args.threads,
        args.storage,
        console,
    )
    _print_scaling_summary(result.report, console)
    if result.missing:
        console.print(f"{len(result.missing)} planned run(s) not done: {'; '.join(result.missing)}")
    return EXIT_RUN_FAILED if result.missing else EXIT_OK


def _print_scaling_summary(report: Path, console: Console) -> None:
    """The scaling report's opening (sizes and written summary) and where the rest is."""
    summary = report.read_text(encoding="utf-8").split("\n## ")[0]
    console.print(summary.strip(), markup=False, highlight=False, soft_wrap=True)
    console.print(f"scaling report: {report}")


def _print_studies(studies: dict, console: Console) -> None:
    from ablate.launch.studies import result_lines

    for line in result_lines(studies):
        console.print(line, markup=False)


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    """Run (or continue) the experiment's search and max-LR studies."""
    from ablate.core.load import load_experiment
    from ablate.launch.estimate import check_inputs
    from ablate.launch.freshness import check_stored_data
    from ablate.launch.pipeline import Context, run_studies_only

    _positive(args.workers, "--workers")
    _positive(args.threads, "--threads")
    experiment = load_experiment(args.experiment, args.backend)
    if experiment.scale is not None:
        raise UsageError(f"{args.experiment}: has a scale: section; run it with ablate run")
    if experiment.search is None and experiment.max_lr is None:
        raise UsageError(f"{args.experiment}: has no search: or max_lr: section to run")
    check_stored_data(experiment, args.results_dir, check_inputs(experiment))
    ctx = Context(
        experiment, args.results_dir, Path("reports"), args.workers, args.threads, args.storage
    )
    ctx.console = console
    _print_studies(run_studies_only(ctx), console)
    return EXIT_OK


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    """Rebuild the report of one experiment's results folder."""
    from ablate.core import store
    from ablate.core.folders import ExperimentFolder
    from ablate.report.builder import build_report

    if not args.results.is_dir():
        raise UsageError(
            f"{args.results}: results folder not found "
            "(give results/<experiment>, as written by ablate run)"
        )
    if not (store.is_experiment(args.results) or ExperimentFolder(args.results).is_scaled()):
        raise UsageError(
            f"{args.results}: holds no experiment.json and no run folders; "
            "give results/<experiment>, as written by ablate run"
        )
    if ExperimentFolder(args.results).is_scaled():
        from ablate.report.builder import build_scaling_report

        path = build_scaling_report(args.results, args.out or Path("reports") / args.results.name)
        _print_scaling_summary(path, console)
        return EXIT_OK
    out = args.out or store.remembered_report_dir(args.results)
    out = out or Path("reports") / args.results.name
    report = build_report(args.results, out)
    console.print(report.table_markdown, markup=False, highlight=False, soft_wrap=True)
    if report.missing:
        console.print(f"incomplete: {len(report.missing)} planned run(s) have no result yet")
    console.print(f"report: {report.markdown}, {report.html}")
    return EXIT_OK


def _int_list(text: str, flag: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a comma-separated list of integers") from None
    if not values or min(values) < 1:
        raise UsageError(f"{flag}: {text!r}: give integers >= 1")
    return values


def cmd_bench(args: argparse.Namespace, console: Console) -> int:
    """Kernel and step benchmarks; tables printed, CSVs and a figure written."""
    import torch

    from ablate.bench.speed import DTYPES, BenchSettings, run_benchmarks
    from ablate.core.load import load_experiment

    dims, tokens = _int_list(args.dims, "--dims"), _int_list(args.tokens, "--tokens")
    dtypes = [d for d in args.dtypes.split(",") if d]
    if not dtypes or set(dtypes) - set(DTYPES):
        raise UsageError(f"--dtypes: {args.dtypes!r}; allowed: {', '.join(DTYPES)}")
    _positive(args.threads, "--threads")
    _positive(args.steps, "--steps")
    _positive(args.repeats, "--repeats")
    _positive(args.rounds, "--rounds")
    if args.device == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available")
    cuda = args.device == "cuda" or (args.device == "auto" and torch.cuda.is_available())
    device = torch.device("cuda" if cuda else "cpu")
    experiment = None if str(args.experiment) == "none" else load_experiment(args.experiment)
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    if args.inference:
        return _bench_inference(args, experiment, device, console)
    settings = BenchSettings(
        dims,
        tokens,
        dtypes,
        args.steps,
        args.repeats,
        args.rounds,
        args.min_run_time,
        not args.no_compile,
        args.out,
    )
    for path in run_benchmarks(experiment, device, threads, settings, console):
        console.print(f"wrote {path}")
    return EXIT_OK


def _bench_inference(
    args: argparse.Namespace, experiment: Experiment | None, device: Any, console: Console
) -> int:
    """``ablate bench --inference``: the inference table of the experiment's variants."""
    from ablate.bench.inference import InferenceSettings, run_inference

    if experiment is None:
        raise UsageError("--inference: needs an --experiment whose variants to decode with")
    _positive(args.new_tokens, "--new-tokens")
    settings = InferenceSettings(
        tuple(_int_list(args.batches, "--batches")),
        tuple(_int_list(args.prompts, "--prompts")),
        args.new_tokens,
        rounds=args.repeats,
    )
    for name, cfg in experiment.variants.items():
        if cfg.model.source != "ablate":
            raise UsageError(
                f"--inference: variant {name} is a model.source: {cfg.model.source} model; "
                "the KV-cache decoding path is ablate's own model's"
            )
        longest = max(settings.prompts) + settings.new_tokens
        if longest > cfg.model.seq_len:
            raise UsageError(
                f"--prompts/--new-tokens: {longest} positions > model.seq_len "
                f"{cfg.model.seq_len} of variant {name}"
            )
    path = run_inference(experiment, device, settings, args.results_dir, args.out, console)
    console.print(f"wrote {path}")
    return EXIT_OK


COMMANDS = {
    "run": cmd_run,
    "search": cmd_search,
    "validate": cmd_validate,
    "report": cmd_report,
    "bench": cmd_bench,
}


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

    from ablate.core.config import ConfigError
    from ablate.training.data import DataError

    console = Console(soft_wrap=True)  # long lines stay whole in logs
    try:
        return COMMANDS[args.command](args, console)
    except (ConfigError, DataError, UsageError) as exc:
        print(f"ablate {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except OSError as exc:  # a read-only or full results folder, a vanished file, ...
        print(f"ablate {args.command}: error: {os_error_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT


if __name__ == "__main__":
    sys.exit(main())
