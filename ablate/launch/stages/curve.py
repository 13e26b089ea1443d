"""The curve stage: every variant's final loss along a lattice of LRs on curve seeds disjoint
from the final ones, grown at an edge optimum, and the tuned A/B's settings from each
variant's optimum (:mod:`ablate.core.optimum`).

The grid is fixed by design (every 2^(k / ``curve.per_octave``) of the range), so its runs go
through the stage's executor like the shared A/B's, in parallel; where a curve's lowest point
is the grid's first or last LR, the grid grows by an octave on that side, up to
``curve.extend`` octaves, and the report says when an optimum is still at an edge.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import replace
from functools import partial

from ablate.core import store
from ablate.core.boundary import lattice_index
from ablate.core.early_stop import held_at, stop_of, stopped_points
from ablate.core.experiment import Experiment
from ablate.core.folders import ExperimentFolder
from ablate.core.manifest import plan_manifest
from ablate.core.optimum import Curve, Optimum, edge_sides, variant_optimum
from ablate.core.plan import RunSpec, Settings, plan_curve, with_train
from ablate.core.record import RunRecord
from ablate.core.stability import trial_value
from ablate.launch.context import Context, Stage, configured
from ablate.launch.execute import Executor


def run(ctx: Context) -> None:
    """The stage: every variant's curve (:func:`curve_stage`), its optimum and the warmup study
    there (:func:`tune_warmups`); the plan gains the curve's runs and the tuned A/B's settings
    at the optima (:func:`at_curve_optima`)."""
    from ablate.launch.storage import storage_url

    experiment, plan = ctx.experiment, ctx.plan
    url = storage_url(experiment, ctx.results_dir, ctx.storage)
    planned = plan.specs + plan.continued
    curve, optima = curve_stage(experiment, ctx.executor, ctx.folder, planned, url, ctx.say)
    plan.specs += curve
    warmups = tune_warmups(experiment, optima, ctx.executor, url, ctx.say)
    plan.chosen = at_curve_optima(experiment, plan.chosen, optima, warmups)


def curve_stage(
    experiment: Experiment,
    executor: Executor,
    folder: ExperimentFolder,
    planned: list[RunSpec],
    url: str,
    say: Callable[[str], None],
) -> tuple[list[RunSpec], dict[str, Optimum | None]]:
    """Every variant's LR curve on the curve seeds (:func:`plan_curve`), grown by an octave
    on a side where a curve's lowest point is the grid's end, up to ``curve.extend`` octaves;
    (the curve runs, each variant's optimum). The plan in ``folder`` (``planned`` runs) gains
    the curve's runs before they train; the curves are recorded in the studies at ``url``
    (:func:`record_curves`)."""
    cfg = experiment.curve
    assert cfg is not None
    grown = [0, 0]
    while True:
        specs = plan_curve(experiment, (grown[0], grown[1]))
        store.write_manifest(folder, plan_manifest(experiment, planned + specs))
        ran, specs = train_curve(experiment, executor, folder, specs, say)
        summaries = {s.run_id: s for s in ran}
        curves = {v: curve_of(specs, summaries, v) for v in experiment.variants}
        grid = cfg.lrs(grown[0], grown[1])
        sides = set().union(*(edge_sides(c, grid) for c in curves.values()))
        if not sides or sum(grown) >= cfg.extend:
            record_curves(experiment, specs, ran, url)
            return specs, {v: variant_optimum(c) for v, c in curves.items()}
        for side in sorted(sides)[: cfg.extend - sum(grown)]:
            grown[0 if side < 0 else 1] += 1
        lrs = cfg.lrs(*grown)
        say(f"curve: a lowest point at the grid's edge: grown to {lrs[0]:.3g}–{lrs[-1]:.3g}")


def train_curve(
    experiment: Experiment,
    executor: Executor,
    folder: ExperimentFolder,
    specs: list[RunSpec],
    say: Callable[[str], None],
) -> tuple[list[RunRecord], list[RunSpec]]:
    """The curve's runs trained, and the specs they answer; with ``curve.stop_step``, every
    run held at that step first (a stored one as it is), the points the early stop names
    (:mod:`ablate.core.early_stop`) stored as stopped there (their specs the held ones) and the
    rest trained on to the budget from their checkpoints
    (:func:`ablate.core.early_stop.result_of`). A point's runs stored whole are kept whole:
    what is stored is used, the rule only spares training."""
    cfg = experiment.curve
    assert cfg is not None
    if cfg.stop_step is None:
        return executor.run(specs), specs
    step, margin = cfg.stop_step, cfg.stop_margin
    held = {r.run_id: r for r in executor.run([held_at(spec, step) for spec in specs])}
    stops = stopped_points(specs, held, folder, step, margin)
    kept: list[RunRecord] = []
    go_on: list[RunSpec] = []
    asked: list[RunSpec] = []
    for spec in specs:
        record = held.get(spec.run_id)
        point = stops.get((spec.variant, spec.config.train.lr))
        paused = record is not None and record.status == "paused"
        asked.append(spec if point is None else held_at(spec, step))
        if point is None:
            go_on.append(spec)
        elif record is not None:
            reason = stop_of(point, step, margin).reason
            stopped = replace(record, status="pruned", stopped_reason=reason)
            kept.append(folder.run(spec.run_id).stop_paused(stopped) if paused else record)
    say(
        f"curve: {len(stops)} of {len({(s.variant, s.config.train.lr) for s in specs})} points "
        f"stopped at step {step}, more than {margin:g} nats above their variant's best there"
    )
    return kept + executor.run(go_on), asked


def record_curves(
    experiment: Experiment, specs: list[RunSpec], summaries: list[RunRecord], url: str
) -> None:
    """Each variant's curve as its Optuna study ``<experiment>.<variant>.curve`` (in the
    dashboard beside the warmup and max-LR studies): one trial per lattice LR, its value the
    mean over the curve seeds of the final loss (an unstable run counted as min(ℓ, ℓ0)), each
    seed's value and run id as user attributes; a point the early stop stopped is a pruned
    trial, its mean at ``curve.stop_step`` the intermediate value there. A point the study
    holds is not added again."""
    from optuna.distributions import FloatDistribution
    from optuna.trial import TrialState, create_trial

    from ablate.launch.storage import open_study

    cfg = experiment.curve
    assert cfg is not None
    widest = cfg.lrs(cfg.extend, cfg.extend)
    space = {"lr": FloatDistribution(widest[0], widest[-1], log=True)}
    by_id = {s.run_id: s for s in summaries}
    for variant in experiment.variants:
        study = open_study(experiment, variant, "curve", url)
        held = {
            lattice_index(t.params["lr"], cfg.per_octave)
            for t in study.get_trials(
                deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED)
            )
        }
        points: dict[float, list[RunSpec]] = {}
        for spec in specs:
            if spec.variant == variant and spec.run_id in by_id:
                points.setdefault(spec.config.train.lr, []).append(spec)
        for lr, runs in sorted(points.items()):
            if lattice_index(lr, cfg.per_octave) in held:
                continue
            values = {str(r.seed): trial_value(by_id[r.run_id]) for r in runs}
            attrs = {"seed_values": values, "run_ids": [r.run_id for r in runs]}
            mean = statistics.fmean(values.values())
            stopped = any(by_id[r.run_id].status == "pruned" for r in runs)
            study.add_trial(
                create_trial(
                    params={"lr": lr},
                    distributions=space,
                    value=None if stopped else mean,
                    state=TrialState.PRUNED if stopped else TrialState.COMPLETE,
                    intermediate_values={cfg.stop_step: mean}
                    if stopped and cfg.stop_step
                    else None,
                    user_attrs=attrs,
                )
            )


def curve_of(
    specs: list[RunSpec], summaries: dict[str, RunRecord], variant: str
) -> dict[int, Curve]:
    """``{seed: [(lr, final val loss)]}`` of the variant's stable curve runs."""
    found: dict[int, list[tuple[float, float]]] = {}
    for spec in specs:
        summary = summaries.get(spec.run_id)
        if spec.variant == variant and summary and summary.stable:
            found.setdefault(spec.seed, []).append(
                (spec.config.train.lr, float(summary.final_val_loss))
            )
    return found


def at_curve_optima(
    experiment: Experiment,
    chosen: dict[str, Settings],
    optima: dict[str, Optimum | None],
    warmups: dict[str, int] | None = None,
) -> dict[str, Settings]:
    """The tuned A/B's settings: each variant at its curve's optimum LR, with its warmup
    study's best (``warmups``), else the search's best warmup, else the file's."""
    warmups = warmups or {}
    settings = {}
    for variant, found in optima.items():
        if found is None:
            continue
        searched = chosen.get(variant)
        fallback = (
            searched.warmup_steps if searched else experiment.variants[variant].train.warmup_steps
        )
        settings[variant] = Settings(found.lr, warmups.get(variant, fallback))
    return settings


def warmup_spec(experiment: Experiment, variant: str, lr: float, warmup: int, seed: int) -> RunSpec:
    """A warmup trial's run: the variant at its optimum LR on a curve seed, curve budget."""
    cfg = experiment.curve
    assert cfg is not None
    config = with_train(experiment.variants[variant], lr=lr, warmup_steps=warmup, tokens=cfg.tokens)
    return RunSpec(experiment.name, variant, seed, config, group="warmup")


def tune_warmup(
    experiment: Experiment,
    variant: str,
    lr: float,
    executor: Executor,
    url: str,
    say: Callable[[str], None],
) -> int | None:
    """The variant's best warmup at ``lr``: a study (``<experiment>.<variant>.warmup``, its
    per-trial seeds from ``curve.sampler_seed``) of ``curve.warmup_trials`` TPE trials, or one
    trial per warmup of ``curve.warmup_grid`` (queued, ascending), each the mean final loss
    over the curve seeds (run together in the executor's pool; an unstable
    run counted as min(ℓ, ℓ0)), no pruning; a rerun continues the stored study, a trial cut
    short (failed, as an interrupt leaves it) re-run first in its slot
    (:func:`ablate.launch.trials.rerun_cut_trials`). None when no trial completed."""
    from optuna.distributions import IntDistribution
    from optuna.samplers import TPESampler
    from optuna.trial import TrialState

    from ablate.launch.storage import open_study
    from ablate.launch.trials import TrialSeededSampler, rerun_cut_trials

    cfg = experiment.curve
    assert cfg is not None
    tpe = partial(TPESampler, n_startup_trials=cfg.warmup_startup)
    study = open_study(
        experiment, variant, "warmup", url, sampler=TrialSeededSampler(tpe, cfg.sampler_seed)
    )
    space = {"warmup_steps": IntDistribution(*cfg.warmup_span())}
    rerun_cut_trials(study, say)
    for warmup in cfg.warmup_grid or []:  # each grid warmup queued once, ascending
        study.enqueue_trial({"warmup_steps": warmup}, skip_if_exists=True)
    while len(study.get_trials(states=(TrialState.COMPLETE,))) < cfg.warmup_study_trials():
        trial = study.ask(space)
        warmup = int(trial.params["warmup_steps"])
        specs = [warmup_spec(experiment, variant, lr, warmup, s) for s in experiment.curve_seeds()]
        try:
            value = statistics.fmean(trial_value(summary) for summary in executor.run(specs))
        except BaseException:  # cut short (Ctrl-C, SIGTERM, a crash): re-run by the next run
            study.tell(trial, state=TrialState.FAIL)
            raise
        study.tell(trial, value)
        say(f"warmup {variant}: {warmup} steps at lr {lr:.3g}: mean val {value:.4f}")
    best = [t for t in study.trials if t.state == TrialState.COMPLETE]
    return int(min(best, key=lambda t: t.value).params["warmup_steps"]) if best else None


def tune_warmups(
    experiment: Experiment,
    optima: dict[str, Optimum | None],
    executor: Executor,
    url: str,
    say: Callable[[str], None],
) -> dict[str, int]:
    """Each variant's best warmup at its curve's optimum from its own study
    (:func:`tune_warmup`); ``curve.warmup_steps`` for every variant where the file declares it;
    none without either (no ``warmup_trials``, no ``warmup_grid``)."""
    cfg = experiment.curve
    if cfg is not None and cfg.warmup_steps is not None:
        return {variant: cfg.warmup_steps for variant, found in optima.items() if found}
    if cfg is None or not cfg.warmup_study_trials():
        return {}
    found = {
        variant: tune_warmup(experiment, variant, optimum.lr, executor, url, say)
        for variant, optimum in optima.items()
        if optimum is not None
    }
    return {variant: warmup for variant, warmup in found.items() if warmup is not None}


STAGE = Stage("curve", configured("curve"), run, "each variant's LR curve and its warmup study")
