"""The maximum stable learning rate of one variant: bracketing, each probe a trial of a study.

:func:`ablate.core.stability.bracket_max_stable` chooses the LRs; each probe is a trial of the
variant's ``max_lr`` study asked for at exactly that LR, starting at ``max_lr.start``, else at
the search's best LR (a stable point, handed over by the search stage), else at ``train.lr``; a
probe obtains the k seeds' runs from the stage's executor in order and stops at the first
unstable one. Probes already in the study are read back, never rerun.
The study's objective (:data:`PROBE_METRIC`) makes the dashboard's best trial the largest stable
LR. (:mod:`ablate.launch.pipeline` then holds each bracket against every other stored run.)
"""

from __future__ import annotations

import math
import warnings
from dataclasses import asdict

import numpy as np
import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState

from ablate.core.experiment import Experiment
from ablate.core.plan import RunSpec, max_lr_family, with_train
from ablate.core.stability import Bracket, bracket_max_stable
from ablate.core.studies import BracketResult, Probe
from ablate.launch.execute import Executor
from ablate.launch.search import PrintFn
from ablate.launch.storage import open_study


def probe_stability(
    experiment: Experiment,
    variant: str,
    lr: float,
    seeds: list[int],
    executor: Executor,
    tokens: int | None,
    say: PrintFn = print,
) -> Probe:
    """Run ``seeds`` in order at ``lr``, stopping at the first unstable one."""
    base = experiment.variants[variant]
    config = with_train(base, lr=lr, tokens=tokens)
    runs = 0
    for seed in seeds:
        spec = RunSpec(experiment.name, variant, seed, config, group="max_lr")
        summary = executor.obtain(spec, wait=True, say=say)
        runs += 1
        if not summary.get("stable"):
            return Probe(lr, False, runs, [seed], summary.get("unstable_reason"))
    return Probe(lr, True, runs, [])


def probe_key(experiment: Experiment, variant: str, seeds: list[int]) -> str:
    """What a probe's verdict depends on besides its LR: the run family (the variant's config
    at the probe budget, LR and warmup aside) and the seeds. A stored probe is reused only
    under the same key, so editing ``max_lr.tokens`` or ``seeds`` probes afresh."""
    return f"{max_lr_family(experiment, variant)}:{','.join(str(s) for s in seeds)}"


def _stored_probe(study: optuna.Study, lr: float, key: str) -> Probe | None:
    for trial in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
        same_lr = math.isclose(trial.params.get("lr", math.nan), lr, rel_tol=1e-12)
        if same_lr and trial.user_attrs.get("probe_key") == key:
            attrs = trial.user_attrs
            return Probe(
                lr, attrs["stable"], attrs["runs"], attrs["failed_seeds"], attrs.get("reason"), True
            )
    return None


PROBE_METRIC = "minus_lr_if_stable"  # the max-LR studies' objective, as the dashboard names it


def probe_value(lr: float, stable: bool) -> float:
    """A max-LR probe's objective: −lr when every seed was stable, else 0. Minimized, so the
    study's best trial is its largest stable LR (the bracket's lower end)."""
    return -lr if stable else 0.0


def label_bracket_study(study: optuna.Study, bracket: Bracket) -> None:
    """Name the objective and store the bracket as study attributes, for optuna-dashboard
    (written only when they change, so a replay writes nothing)."""
    attrs = {
        "largest_stable_lr": bracket.largest_stable,
        "smallest_unstable_lr": bracket.smallest_unstable,
    }
    if study.metric_names != [PROBE_METRIC]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.set_metric_names([PROBE_METRIC])
    for name, value in attrs.items():
        if study.user_attrs.get(name, "unset") != value:
            study.set_user_attr(name, value)


def max_lr_start(experiment: Experiment, variant: str, best_lr: float | None) -> float:
    """The first probe: ``max_lr.start``, else ``best_lr`` (the variant's best stable search
    trial's LR, a stable point, so the bracket is searched upwards from it), else
    ``train.lr``."""
    cfg = experiment.max_lr
    assert cfg is not None
    if cfg.start is not None:
        return cfg.start
    start = best_lr if best_lr is not None else experiment.variants[variant].train.lr
    return float(np.clip(start, cfg.lr_min, cfg.lr_max))


class ProbeNotStored(LookupError):
    """A max-LR replay (``stored_only``) needs a probe that the study does not hold yet."""


def run_max_lr(
    experiment: Experiment,
    variant: str,
    executor: Executor,
    url: str,
    best_lr: float | None = None,
    say: PrintFn = print,
    stored_only: bool = False,
) -> BracketResult:
    """Bracket the variant's maximum stable LR; each probe is a trial of its max_lr study,
    starting from ``best_lr`` (the search's) unless ``max_lr.start`` is set.

    ``stored_only`` replays the bracketing from stored probes and raises
    :class:`ProbeNotStored` at the first probe it would have to run."""
    cfg = experiment.max_lr
    assert cfg is not None
    study = open_study(experiment, variant, "max_lr", url)
    seeds = cfg.seeds or experiment.seeds
    key = probe_key(experiment, variant, seeds)
    probes: list[Probe] = []

    def run_probe(lr: float) -> None:
        # the LR is enqueued (fixed) within the section's range, which the dashboard plots; a
        # trial left WAITING earlier is popped first and run at its own LR, and the loop below
        # asks again
        study.enqueue_trial({"lr": lr})
        span = FloatDistribution(min(cfg.lr_min, lr), max(cfg.lr_max, lr), log=True)
        trial = study.ask({"lr": span})
        try:
            found = probe_stability(
                experiment, variant, trial.params["lr"], seeds, executor, cfg.tokens, say
            )
        except BaseException:
            study.tell(trial, state=TrialState.FAIL)
            raise
        for name, value in asdict(found).items():
            trial.set_user_attr(name, value)
        trial.set_user_attr("probe_key", key)
        study.tell(trial, probe_value(trial.params["lr"], found.stable))

    def probe(lr: float) -> bool:
        result = _stored_probe(study, lr, key)
        fresh = result is None
        if fresh and stored_only:
            raise ProbeNotStored(f"max_lr {variant}: lr={lr:.4g} not probed yet")
        while result is None:
            run_probe(lr)
            result = _stored_probe(study, lr, key)
        result.reused = not fresh
        probes.append(result)
        verdict = "stable" if result.stable else f"unstable (seed {result.failed_seeds})"
        say(
            f"max_lr {variant}: lr={lr:.4g}: {verdict}, {result.runs} run(s)"
            + (" [stored]" if result.reused else "")
        )
        return result.stable

    start = max_lr_start(experiment, variant, best_lr)
    bracket: Bracket = bracket_max_stable(
        probe, start, cfg.factor, cfg.precision, cfg.lr_min, cfg.lr_max
    )
    label_bracket_study(study, bracket)
    return BracketResult(
        variant=variant,
        study=study.study_name,
        seeds=seeds,
        bracket=[bracket.largest_stable, bracket.smallest_unstable],
        ratio=bracket.ratio,
        precision=cfg.precision,
        probes=probes,
        run_ids=probe_run_ids(experiment, variant, probes, seeds),
    )


def probe_run_ids(
    experiment: Experiment, variant: str, probes: list[Probe], seeds: list[int]
) -> list[str]:
    """The runs the probes trained or reused: at each probed LR its first ``runs`` seeds (a
    probe stops at the first unstable seed), as :func:`probe_stability` planned them."""
    cfg = experiment.max_lr
    assert cfg is not None
    base = experiment.variants[variant]
    return [
        RunSpec(
            experiment.name,
            variant,
            seed,
            with_train(base, lr=p.lr, tokens=cfg.tokens),
            group="max_lr",
        ).run_id
        for p in probes
        for seed in seeds[: p.runs]
    ]
