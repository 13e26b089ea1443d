"""The LR optimum's replications (:mod:`ablate.core.optimum`) on truths whose optima are stated:
each variant's loss curve simulated (:func:`ablate.core.simulate.simulate_run`, in memory) at
the full budget on curve seeds disjoint from the final ones, on the design's curve lattice (its
``curve:``, else √2 steps over its search's range)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ablate.core.experiment import Experiment
from ablate.core.optimum import Curve, optimum_ratio, variant_optimum
from ablate.core.plan import RunSpec, with_train
from ablate.core.simulate import simulate_run
from ablate.core.stage_sections import CurveConfig
from research.replication import Outcome, two_variants, with_truth

CURVE_SEEDS = (3, 4)  # the final seeds are the experiment's; these only shape the curve
MORE_SEEDS = (3, 4, 5, 6)
PER_OCTAVE = 2  # curve points per doubling of the LR, for a design without curve:
# nats of each run's own noise: ln_vs_rms's calibration (python -m research.calibration
# reports/ln_vs_rms: 0.0094 [0.0067, 0.0154]; its valley's low wall 0.28-0.58 nats per squared
# decade, as steep as the simulator's 0.3 or steeper, so the rows below are scored on a valley
# no steeper than the real one)
RUN_SD = 0.01
NOISY_SD = 0.02  # above that interval's top: a stress row
# llama_style's calibration: run noise 0.0345 nats, low-wall curvature 0.78 (its median)
LLAMA_SD, LLAMA_CURVATURE = 0.0345, 0.78
TRUE_OPTIMUM_RATIO = 2.0  # the second variant's optimum over the first's, where they differ


def curve_config(design: Experiment) -> CurveConfig:
    """The curve: the design's ``curve:``, else √2 steps (PER_OCTAVE) over its search's range."""
    if design.curve is not None:
        return design.curve
    assert design.search is not None, "the design needs a curve: or a search:"
    search = design.search
    return CurveConfig(lr_min=search.lr_min, lr_max=search.lr_max, per_octave=PER_OCTAVE)


def optimum_truth(
    design: Experiment,
    replication: int,
    ratio: float,
    run_sd: float = RUN_SD,
    curvature: float | None = None,
) -> tuple[Experiment, float]:
    """The design on a truth whose first variant's optimum is log-uniform inside the curve's
    range (a factor 3 from either end) and whose second's is ``ratio`` times it, each run's
    noise ``run_sd``, the valley's ``curvature`` (None: the simulator's): (the truth, the
    first optimum)."""
    cfg = curve_config(design)
    rng = np.random.default_rng(replication)
    opt = math.exp(rng.uniform(math.log(cfg.lr_min * 3), math.log(cfg.lr_max / (3 * ratio))))
    first, second = two_variants(design)
    shape = {} if curvature is None else {"curvature": curvature}
    truths = {first: {"opt_lr": opt, **shape}, second: {"opt_lr": opt * ratio, **shape}}
    return with_truth(design, replication, {"variants": truths, "run_sd": run_sd}), opt


def curves(
    design: Experiment, variant: str, seeds: tuple[int, ...] = CURVE_SEEDS
) -> dict[int, Curve]:
    """The variant's final val loss on the grid for every curve seed (simulated runs at the
    full budget, in memory; a run that diverged or has no evaluation is left out)."""
    found: dict[int, Curve] = {}
    for seed in seeds:
        points = []
        for lr in curve_config(design).lrs():
            spec = RunSpec(design.name, variant, seed, with_train(design.variants[variant], lr=lr))
            run = simulate_run(spec.config, variant, seed, spec.run_id)
            if run.status == "finished" and run.evals:
                points.append((lr, run.evals[-1][1]))
        found[seed] = points
    return found


def _optimum(
    design: Experiment,
    replication: int,
    run_sd: float,
    seeds: tuple[int, ...],
    curvature: float | None = None,
) -> Outcome:
    truth, opt = optimum_truth(design, replication, TRUE_OPTIMUM_RATIO, run_sd, curvature)
    found = variant_optimum(curves(truth, two_variants(design)[0], seeds))
    if found is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(found.value / opt), found.low <= opt <= found.high)


def optimum_lr(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(estimated / true) of the first variant's optimum; covered: its interval holds it
    (``folder`` unused: the runs are simulated in memory)."""
    return _optimum(design, replication, RUN_SD, CURVE_SEEDS)


def optimum_lr_noisy(design: Experiment, replication: int, folder: Path) -> Outcome:
    """As :func:`optimum_lr` with twice the run noise."""
    return _optimum(design, replication, NOISY_SD, CURVE_SEEDS)


def optimum_lr_noisy_more_seeds(design: Experiment, replication: int, folder: Path) -> Outcome:
    """As :func:`optimum_lr_noisy` on four curve seeds."""
    return _optimum(design, replication, NOISY_SD, MORE_SEEDS)


def optimum_lr_llama_style(design: Experiment, replication: int, folder: Path) -> Outcome:
    """As :func:`optimum_lr` at llama_style's calibrated run noise and valley curvature."""
    return _optimum(design, replication, LLAMA_SD, CURVE_SEEDS, LLAMA_CURVATURE)


def _ratio(design: Experiment, replication: int, ratio: float) -> Outcome:
    truth, _ = optimum_truth(design, replication, ratio)
    first, second = (curves(truth, v) for v in two_variants(design))
    found = optimum_ratio(first, second)
    if found is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(found.value / ratio), found.low <= ratio <= found.high)


def optimum_ratio_equal(design: Experiment, replication: int, folder: Path) -> Outcome:
    """Two variants with the same true optimum: log2 of the estimated ratio; covered: the
    interval holds 1, so the two are not called different."""
    return _ratio(design, replication, 1.0)


def optimum_ratio_apart(design: Experiment, replication: int, folder: Path) -> Outcome:
    """The second variant's optimum twice the first's: log2(estimated / true ratio);
    covered: the interval holds 2."""
    return _ratio(design, replication, TRUE_OPTIMUM_RATIO)
