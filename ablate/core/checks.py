"""The checks of a resolved experiment that span its sections: each claim against the variants,
the metrics the runs record and the stages that make them (:func:`check_claims`), and
``decide:`` against the seeds and variants (:func:`check_decide`), the curve's early stop
against the runs' evaluations (:func:`check_curve_stop`); each problem one line.
"""

from __future__ import annotations

from ablate.core.claims import LOSSES, OUTCOMES
from ablate.core.errors import ConfigError
from ablate.core.experiment import Experiment


def check_claims(experiment: Experiment, where: str) -> None:
    """Each claim names two variants the file has and a quantity the runs will record, or one
    line."""
    names = list(experiment.variants)
    for i, claim in enumerate(experiment.claims):
        at = f"{where}: claims.{i}"
        for key, name in (("variant", claim.variant), ("baseline", claim.against(names))):
            if name not in experiment.variants:
                raise ConfigError(
                    f"{at}.{key}: {name!r} is not a variant; allowed: {', '.join(names)}"
                )
        if claim.variant == claim.against(names):
            raise ConfigError(f"{at}: variant and baseline are both {claim.variant!r}")
        if claim.metric == "grad_spikes" and not experiment.analysis.spike_factor:
            raise ConfigError(
                f"{at}.metric: grad_spikes needs analysis.spike_factor (what a spike is)"
            )
        probed = experiment.variants[claim.variant].train.probes.interval
        if claim.metric not in OUTCOMES and not probed:
            raise ConfigError(
                f"{at}.metric: {claim.metric} is a probe quantity; train.probes.interval is 0"
            )
        tunes = experiment.search is not None or experiment.curve is not None
        if claim.runs == "tuned" and (claim.metric not in LOSSES or not tunes):
            raise ConfigError(
                f"{at}.runs: tuned reads the tuned A/B's losses: it needs a curve: or search: "
                f"section and a metric of {', '.join(LOSSES)}"
            )
        if claim.metric == "final_test_loss" and not experiment.base.data.test_fraction:
            raise ConfigError(f"{at}.metric: final_test_loss needs data.test_fraction")
        if (claim.metric == "lr_sensitivity") != (claim.runs == "sweep"):
            raise ConfigError(f"{at}: metric lr_sensitivity and runs: sweep go together")
        if claim.runs == "sweep" and experiment.sweep is None:
            raise ConfigError(f"{at}.runs: sweep reads the LR sweep: it needs a sweep: section")
        if (claim.at == "lr_grid") != (claim.runs == "sweep"):
            raise ConfigError(f"{at}.at: lr_grid is the estimand of runs: sweep, and only its")


def check_decide(experiment: Experiment, where: str) -> None:
    """A ``decide:`` section with room for seeds and a comparison to decide, or one line."""
    decide = experiment.decide
    assert decide is not None
    if decide.max_seeds <= len(experiment.seeds):
        raise ConfigError(
            f"{where}: decide.max_seeds is {decide.max_seeds}; it must exceed the "
            f"{len(experiment.seeds)} seeds the experiment starts from (seeds: {experiment.seeds})"
        )
    if len(experiment.variants) < 2:
        raise ConfigError(f"{where}: decide: needs two variants or more to compare")


def check_probe_hold(experiment: Experiment, where: str) -> None:
    """``max_lr.stop_step`` before every variant's last probe step, or one line (allowed: the
    steps below it)."""
    cfg = experiment.max_lr
    assert cfg is not None and cfg.stop_step is not None
    for name, config in experiment.variants.items():
        steps = (cfg.tokens or config.train.tokens) // config.tokens_per_step()
        if cfg.stop_step >= steps:
            raise ConfigError(
                f"{where}: max_lr.stop_step: {cfg.stop_step} is not before {name}'s last probe "
                f"step ({steps}); allowed: 1 to {steps - 1}",
                key="max_lr.stop_step",
                code="no_step",
            )


def check_walk_hold(experiment: Experiment, where: str) -> None:
    """``max_lr.walk_step`` an evaluation step before every variant's last step, with a band to
    walk to (``max_lr.within``), or one line (allowed: the multiples of ``train.eval_interval``
    below it)."""
    cfg = experiment.max_lr
    assert cfg is not None and cfg.walk_step is not None
    if cfg.within is None:
        raise ConfigError(
            f"{where}: max_lr.walk_step: {cfg.walk_step} holds the usable-LR walks, but "
            "max_lr.within is null (no walk); allowed: a within, or no walk_step",
            key="max_lr.walk_step",
            code="no_walk",
        )
    check_evaluation_step(experiment, where, "max_lr.walk_step", cfg.walk_step, None, "")


def check_curve_stop(experiment: Experiment, where: str) -> None:
    """``curve.stop_step`` an evaluation step before every variant's last curve step, or one
    line (allowed: the multiples of ``train.eval_interval`` below it)."""
    curve = experiment.curve
    assert curve is not None and curve.stop_step is not None
    check_evaluation_step(
        experiment, where, "curve.stop_step", curve.stop_step, curve.tokens, "curve "
    )


def check_evaluation_step(
    experiment: Experiment, where: str, key: str, step: int, tokens: int | None, runs: str
) -> None:
    """``step`` (the file's ``key``) an evaluation step before every variant's last step of
    ``runs`` at ``tokens`` (None: its ``train.tokens``), or one line (allowed: the multiples of
    ``train.eval_interval`` below it)."""
    for name, config in experiment.variants.items():
        steps = (tokens or config.train.tokens) // config.tokens_per_step()
        every = config.train.eval_interval
        if step % every or step >= steps:
            raise ConfigError(
                f"{where}: {key}: {step} is no evaluation step before {name}'s last {runs}step "
                f"({steps}); allowed: multiples of train.eval_interval ({every}) below {steps}",
                key=key,
                code="no_step",
            )
