"""What each ``ablate`` command does once its arguments are parsed: load, call the pipeline,
the studies, the report or a benchmark, and print the outcome (:mod:`ablate.cli` parses and
dispatches). A command returns its exit code: 0 success, 1 some run failed; bad input raises
(:class:`UsageError`, ``ConfigError``, ``DataError``) and the CLI turns it into one line and 2.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

    from ablate.core.experiment import Experiment
    from ablate.core.studies import Studies
    from ablate.launch.estimate import PlanEstimate
    from ablate.launch.expect import Design


EXIT_OK, EXIT_RUN_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(ValueError):
    """A bad command-line value, as one line."""


def _positive(value: int | None, flag: str) -> None:
    if value is not None and value < 1:
        raise UsageError(f"{flag}: got {value}; must be an integer >= 1")


def cmd_validate(args: argparse.Namespace, console: Console) -> int:
    """Print the plan of an experiment file and an estimate of its time (per size under
    ``scale:``)."""
    from ablate.core.load import load_experiment
    from ablate.core.overrides import difference_lines

    experiment = load_experiment(args.experiment, args.backend, settings=settings_of(args))
    console.print(f"[bold]{experiment.name}[/bold]: {experiment.description}".rstrip(": "))
    for line in setting_lines(experiment, args):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    design = None
    if experiment.scale is None:
        if args.simulate:
            design = _simulated_design(args.experiment, settings_of(args))
        _print_plan(experiment, args, console, design)
    else:
        from ablate.launch.scale import resolve_sizes

        total = 0.0
        for size in resolve_sizes(experiment):
            console.print(
                f"[bold]size {size.label}[/bold]: {size.n_params:,} parameters, "
                f"{size.tokens:,} tokens per run"
            )
            total += _print_plan(size.experiment, args, console)
        priced = f"{total / 60:.1f} min" if total == total else "not priced (`--time`)"
        console.print(f"at most, all sizes: {priced}")
    _print_committed(experiment, console)
    lines = difference_lines(experiment)
    for line in lines[: SHOWN_VARIANTS + 1]:  # the heading, then a line per variant
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    _print_more(len(lines) - 1, console)
    _warn_impure(experiment, console)
    if args.simulate:
        from ablate.launch.expect import simulated_lines

        if design is None:
            where = f"{args.experiment}: --simulate previews one size"
            raise UsageError(f"{where}; run ablate run --backend simulate")
        for line in simulated_lines(design):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def _print_committed(experiment: Experiment, console: Console) -> None:
    """The committed report's measured time of this file's experiment, where there is one."""
    from ablate.report.times import committed_time, time_line

    row = committed_time(experiment.path, experiment.name)
    if row is not None:
        console.print(time_line(row), markup=False, highlight=False, soft_wrap=True)


def _simulated_design(path: Path, settings: list[str]) -> Design:
    """The file's design run on the simulator (:mod:`ablate.launch.expect`): the run counts the
    estimate expects and the summary ``--simulate`` prints."""
    from ablate.core.load import load_experiment
    from ablate.launch.expect import simulate_design

    return simulate_design(load_experiment(path, "simulate", settings=settings))


def setting_lines(experiment: Experiment, args: argparse.Namespace) -> list[str]:
    """Each ``--set`` and ``--seeds`` of the command line, as the file now resolves it."""
    from ablate.core.overrides import flat_config

    lines = []
    for setting in settings_of(args):
        key = setting.split("=", 1)[0].strip()
        if key.split(".", 1)[0] in ("data", "model", "train", "runtime"):
            values = {name: flat_config(cfg).get(key) for name, cfg in experiment.variants.items()}
            shown = {repr(v) for v in values.values()}
            resolved = (
                shown.pop()
                if len(shown) == 1
                else "; ".join(f"{name} {value!r}" for name, value in values.items())
            )
        else:
            resolved = repr(_attribute(experiment, key))
        lines.append(f"set {key}: {resolved}")
    if lines:
        lines.append("(the description above is the file's own, written before these settings)")
    return lines


def _attribute(experiment: Experiment, key: str) -> Any:
    """The resolved value of a dotted key outside the run config (``search.n_trials``)."""
    value: Any = experiment
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else getattr(value, part, None)
    return value


def settings_of(args: argparse.Namespace) -> list[str]:
    """The command line's ``--set KEY=VALUE`` settings, with ``--seeds`` as ``seeds=[...]``."""
    settings = list(args.settings)
    if args.seeds is not None:
        try:
            seeds = [int(v) for v in args.seeds.split(",") if v.strip()]
        except ValueError:
            seeds = []
        if not seeds:
            raise UsageError(f"--seeds: {args.seeds!r}: give comma-separated integers, e.g. 0,1,2")
        settings.append(f"seeds=[{','.join(map(str, seeds))}]")
    return settings


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


def _print_plan(
    experiment: Experiment,
    args: argparse.Namespace,
    console: Console,
    design: Design | None = None,
) -> float:
    """The runs, the per-variant estimate table and the wall time of one experiment (expected,
    where ``design`` gives the run counts the protocol reaches on the simulator, and at most);
    the time at most."""
    from ablate.core.stages import planned_groups
    from ablate.launch.estimate import describe_plan
    from ablate.launch.launchers import resources_for

    n_runs = len(experiment.seeds) * len(experiment.variants)
    res = resources_for(experiment.base.runtime, n_runs, args.workers)
    stored = None
    if args.results_dir is not None:
        from ablate.launch.estimate import stored_counts

        stored = stored_counts(experiment, args.results_dir)
    expected = design.counts if design is not None else None
    timing = bool(getattr(args, "time", False))
    plan = describe_plan(experiment, res.workers, res.threads, stored, expected, timing)
    if plan.timed:
        from ablate.launch.step_times import store_step_times

        store_step_times(plan.timed)
    groups = ", ".join(planned_groups(experiment))
    what = "runs" if stored is None else "runs to train (beyond those stored)"
    console.print(
        f"seeds {experiment.seeds}; up to {plan.runs} {what} ({groups}); "
        f"{res.workers} worker(s) x {res.threads} thread(s)"
    )
    shown = plan.table.head(SHOWN_VARIANTS).astype(object)
    console.print(
        shown.where(shown.notna(), "–").to_markdown(index=False, floatfmt=".1f"),
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    _print_more(len(plan.table), console)
    for line in estimate_lines(plan, experiment, design):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    if experiment.base.runtime.backend == "simulate":
        console.print(
            "backend simulate: no run trains (each is drawn in milliseconds); the estimate is "
            "what training this plan would take"
        )
    if args.results_dir is not None:
        from ablate.launch.estimate import stored_lines
        from ablate.launch.reach import reach_lines

        for line in stored_lines(experiment, args.results_dir, stored) + reach_lines(
            experiment, args.results_dir
        ):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    return plan.wall_time_s


BUSY_LOAD = 0.5  # a 1-minute load average above which the timed steps shared the machine


def estimate_lines(plan: PlanEstimate, experiment: Experiment, design: Design | None) -> list[str]:
    """The wall time expected and at most, the Slurm tasks and hours where runs go there, and
    a warning where the steps were timed on a busy machine."""
    if plan.untimed:
        return [
            f"cost: not priced: {plan.untimed} distinct model(s) of this plan have no step time "
            "stored on this machine; `ablate validate --time` times them (a few steps each) "
            "and keeps them for the next validate"
        ]
    lines = []
    if plan.expected_wall_time_s is not None:
        lines.append(
            f"expected wall time: {plan.expected_wall_time_s / 60:.1f} min ({plan.expected_runs} "
            "runs: the counts this design reaches on the simulator, each stage's studies and "
            "brackets stopping where they stop there; --simulate shows its verdicts)"
        )
    lines.append(
        f"at most: {plan.wall_time_s / 60:.1f} min ({plan.runs} runs: every stage at its cap; "
        f"measured step time x steps, plus evaluation; of which {plan.fixed_s:.0f} s fixed "
        "costs: run set-up, pool starts, start-up and report)"
    )
    lines.append(
        f"both assume an idle machine: {plan.workers} worker(s) and no other work; on a "
        "busy one it takes longer"
    )
    runtime = experiment.base.runtime
    if runtime.launcher == "slurm" and design is not None:
        slurm = runtime.slurm
        hours = (plan.train_s + design.tasks * TASK_START_S) / 3600
        gpus = f", {hours * slurm.gpus_per_task:.2f} GPU-hours" if slurm.gpus_per_task else ""
        packed = (
            f", runs_per_device {runtime.runs_per_device}: hours as if each run had its GPU "
            "alone, the sharing's throughput not priced"
            if runtime.runs_per_device > 1
            else ""
        )
        lines.append(
            f"through Slurm, expected: {design.tasks} tasks in {design.submissions} submissions "
            f"(runs_per_task {slurm.runs_per_task}, array_parallelism "
            f"{slurm.array_parallelism}); {hours * slurm.cpus_per_task:.2f} core-hours{gpus} "
            f"(each task's start about {TASK_START_S:.0f} s{packed})"
        )
    if plan.load > BUSY_LOAD:
        lines.append(
            f"the steps were timed on a busy machine (1-minute load {plan.load:.1f} on "
            f"{os.cpu_count()} cores): the times may be high; `validate --time` again when it "
            "is idle"
        )
    if not plan.timed:
        lines.append("step times: as stored on this machine by an earlier `ablate validate --time`")
    return lines


TASK_START_S = 8.0  # a Slurm task's Python start and torch / Lightning import (test cluster)


def cmd_run(args: argparse.Namespace, console: Console) -> int:
    """Run every stage of an experiment (:mod:`ablate.launch.pipeline`) and print the outcome."""
    from ablate.core.load import load_experiment
    from ablate.launch.pipeline import run_experiment

    _positive(args.workers, "--workers")
    _positive(args.threads, "--threads")
    experiment = load_experiment(args.experiment, args.backend, args.launcher, settings_of(args))
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
    console.print(
        f"results: {result.folder.path}\nreport:  {result.report_dir / 'report.md'}{state}"
    )
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


def _print_studies(studies: Studies, console: Console) -> None:
    from ablate.launch.studies import result_lines

    for line in result_lines(studies.search, studies.max_lr):
        console.print(line, markup=False)


def cmd_search(args: argparse.Namespace, console: Console) -> int:
    """Run (or continue) the experiment's search and max-LR studies."""
    from ablate.core.load import load_experiment
    from ablate.launch.backends import check_what_trains, start_trainer_early, studies_use_a_pool
    from ablate.launch.pipeline import Context, run_studies_only

    _positive(args.workers, "--workers")
    _positive(args.threads, "--threads")
    experiment = load_experiment(args.experiment, args.backend, args.launcher, settings_of(args))
    if experiment.scale is not None:
        raise UsageError(f"{args.experiment}: has a scale: section; run it with ablate run")
    if experiment.search is None and experiment.max_lr is None:
        raise UsageError(f"{args.experiment}: has no search: or max_lr: section to run")
    start_trainer_early(experiment, args.workers, studies_use_a_pool(experiment))
    check_what_trains(experiment, args.results_dir)
    places = (args.results_dir, Path("reports"))
    ctx = Context(experiment, *places, args.workers, args.threads, args.storage, console)
    _print_studies(run_studies_only(ctx), console)
    return EXIT_OK


def _check_results_folder(results: Path) -> None:
    """Raise unless ``results`` is an experiment's results folder (or a scaled one's)."""
    from ablate.core import store
    from ablate.core.folders import ExperimentFolder

    if not results.is_dir():
        raise UsageError(
            f"{results}: results folder not found "
            "(give results/<experiment>, as written by ablate run)"
        )
    folder = ExperimentFolder(results)
    if not (store.is_experiment(folder) or folder.is_scaled()):
        raise UsageError(
            f"{results}: holds no experiment.json and no run folders; "
            "give results/<experiment>, as written by ablate run"
        )


def _one_experiment(results: Path) -> Path:
    """``results`` itself, or where it is a results root (``--results-dir``) holding exactly
    one experiment's folder, that folder; a root holding several is an error naming them."""
    from ablate.core import store
    from ablate.core.folders import ExperimentFolder

    folder = ExperimentFolder(results)
    if not results.is_dir() or store.is_experiment(folder) or folder.is_scaled():
        return results
    held = sorted(
        p for p in results.iterdir() if p.is_dir() and store.is_experiment(ExperimentFolder(p))
    )
    if len(held) == 1:
        return held[0]
    if len(held) > 1:
        names = ", ".join(str(p) for p in held)
        raise UsageError(f"{results}: holds {len(held)} experiments; give one of: {names}")
    return results


def cmd_status(args: argparse.Namespace, console: Console) -> int:
    """Print where an experiment's runs stand, per stage (:mod:`ablate.launch.status`)."""
    from ablate.core.folders import ExperimentFolder
    from ablate.launch.status import status_lines

    results = _one_experiment(args.results)
    _check_results_folder(results)
    for line in status_lines(ExperimentFolder(results)):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    return EXIT_OK


def cmd_report(args: argparse.Namespace, console: Console) -> int:
    """Rebuild the report of one experiment's results folder."""
    from ablate.core import store
    from ablate.core.folders import ExperimentFolder
    from ablate.report.builder import build_report

    _check_results_folder(args.results)
    folder = ExperimentFolder(args.results)
    if folder.is_scaled():
        from ablate.report.builder import build_scaling_report

        path = build_scaling_report(folder, args.out or Path("reports") / args.results.name)
        _print_scaling_summary(path, console)
        return EXIT_OK
    out = args.out or store.remembered_report_dir(folder)
    out = out or Path("reports") / args.results.name
    report = build_report(folder, out)
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
    "status": cmd_status,
    "bench": cmd_bench,
}
