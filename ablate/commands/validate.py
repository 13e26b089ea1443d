"""``ablate validate``: the file checked and its plan printed (variants, settings, stages),
with the estimate of its cost (timed here, or from stored step times) and, with
``--simulate``, the run counts its design reaches on the simulator.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ablate.commands.common import EXIT_OK, UsageError, load_with_settings, warn_impure

if TYPE_CHECKING:
    from rich.console import Console

    from ablate.core.experiment import Experiment
    from ablate.launch.estimate import PlanEstimate
    from ablate.launch.expect import Design


def cmd_validate(args: argparse.Namespace, console: Console) -> int:
    """Print the plan of an experiment file and an estimate of its time (per size under
    ``scale:``)."""
    from ablate.core.overrides import difference_lines

    experiment, settings = load_with_settings(args, args.backend)
    console.print(f"[bold]{experiment.name}[/bold]: {experiment.description}".rstrip(": "))
    for line in setting_lines(experiment, settings):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    design = None
    if experiment.scale is None:
        if args.simulate:
            design = _simulated_design(args.experiment, settings)
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
    warn_impure(experiment, console)
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


def setting_lines(experiment: Experiment, settings: list[str]) -> list[str]:
    """Each ``--set``, ``--seeds`` and ``--primary-only`` setting of the command line, as the
    file now resolves it."""
    from ablate.core.overrides import flat_config

    lines = []
    for setting in settings:
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


SHOWN_VARIANTS = 50  # validate lists a large grid's first variants and counts the rest


def _print_more(variants: int, console: Console) -> None:
    if variants > SHOWN_VARIANTS:
        console.print(f"  ... and {variants - SHOWN_VARIANTS:,} more variants", markup=False)


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
        from ablate.launch.stored import stored_counts

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
    for line in [*estimate_lines(plan, experiment, design), cost_line(plan, experiment)]:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    expected_steps = expected_steps_line(plan)
    if expected_steps is not None:
        console.print(expected_steps, markup=False, highlight=False, soft_wrap=True)
    if experiment.base.runtime.backend == "simulate":
        console.print(
            "backend simulate: no run trains (each is drawn in milliseconds); the estimate is "
            "what training this plan would take"
        )
    if args.results_dir is not None:
        from ablate.launch.reach import reach_lines
        from ablate.launch.stored import stored_lines

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
        steps = sum((plan.expected_run_steps or {}).values())
        lines.append(
            f"expected wall time: {plan.expected_wall_time_s / 60:.1f} min ({plan.expected_runs} "
            f"runs, {steps:,} run-steps: what this design trains on the simulator, each stage's "
            "studies and brackets stopping where they stop there and each held run where it "
            "stops; --simulate shows its verdicts)"
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


def cost_line(plan: PlanEstimate, experiment: Experiment) -> str:
    """The run-steps each stage may train, at most, and the verdicts of the Answer its runs
    would feed (:func:`ablate.report.cost.planned_feeds`)."""
    from ablate.core.manifest import plan_manifest
    from ablate.core.plan import plan_runs
    from ablate.report.cost import planned_feeds

    feeds = planned_feeds(plan_manifest(experiment, plan_runs(experiment)))
    parts = [
        f"{group} {steps:,} ({', '.join(feeds.get(group, ())) or 'no verdict: evidence only'})"
        for group, steps in plan.run_steps.items()
        if steps
    ]
    total = sum(plan.run_steps.values())
    listed = "; ".join(parts)
    return f"run-steps at most, per stage (the verdicts it feeds): {listed}; {total:,} in all"


def expected_steps_line(plan: PlanEstimate) -> str | None:
    """The run-steps each stage trains as the design runs on the simulator (a held run's to
    its stop), where it was run (``validate --simulate``)."""
    if plan.expected_run_steps is None:
        return None
    parts = [f"{group} {steps:,}" for group, steps in plan.expected_run_steps.items() if steps]
    total = sum(plan.expected_run_steps.values())
    listed = ", ".join(parts)
    return (
        f"run-steps expected, per stage (the design on the simulator): {listed}; {total:,} in all"
    )


TASK_START_S = 8.0  # a Slurm task's Python start and torch / Lightning import (test cluster)
