"""The estimators held against the simulator's truth: bias, spread and coverage over many seeded
replications of one design.

Each replication draws a truth (:mod:`ablate.core.simulate`) with its own ``simulate.seed``, runs
one estimator on the design's sections through the code the pipeline uses (the max-LR stage,
the search stage on the simulator backend, the report's paired interval and Holm adjustment)
and returns an :class:`Outcome`: the estimate's error against the truth and whether its interval
covered it. :data:`ESTIMATORS` lists them; adding one is one function
``(design, replication, folder) -> Outcome`` and one entry. docs/stability-and-search.md holds
the table this prints for experiments/ln_vs_rms.yaml:

    python -m ablate.bench.estimators experiments/ln_vs_rms.yaml --replications 200 \\
        --write docs/stability-and-search.md
"""

from __future__ import annotations

import argparse
import math
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from ablate.core.boundary import SeedBoundary, boundary_ratio, bracket_seed, variant_boundary
from ablate.core.config import RunConfig
from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec, with_train
from ablate.core.simulate import TruthConfig, final_loss, true_edge, valley_loss, warmup_gain
from ablate.launch.max_lr import max_lr_start, run_max_lr
from ablate.launch.search import run_search, search_summary
from ablate.launch.simulator import SimulatedExecutor
from ablate.report.analysis import holm, paired_difference

TRUE_RATIO = 3.0  # the second variant's edges over the first's (no power of any lattice's step)
ALPHA = 0.05


@dataclass(frozen=True)
class Outcome:
    """One replication: the estimate's error on the estimator's scale, and whether the
    interval it reports covered the truth (None: it reports none)."""

    error: float
    covered: bool | None = None


Replication = Callable[[Experiment, int, Path], Outcome]


def with_truth(design: Experiment, replication: int, simulate: dict[str, Any]) -> Experiment:
    """``design`` on the simulator with this replication's seed and ``simulate`` keys (the
    variants' truths), every variant config and the base alike."""

    def simulated(cfg: RunConfig) -> RunConfig:
        runtime = cfg.runtime.model_copy(update={"backend": "simulate"})
        merged = {**runtime.simulate.model_dump(), **simulate, "seed": replication}
        runtime.simulate = type(runtime.simulate)(**merged)
        return cfg.model_copy(update={"runtime": runtime})

    variants = {name: simulated(cfg) for name, cfg in design.variants.items()}
    return design.model_copy(update={"base": simulated(design.base), "variants": variants})


def _two(design: Experiment) -> tuple[str, str]:
    names = list(design.variants)
    if len(names) < 2:
        raise ValueError(f"{design.name}: the estimators compare two variants; it has one")
    return names[0], names[1]


def max_lr_truth(design: Experiment, replication: int) -> Experiment:
    """Edges log-uniform over a decade (so the bracket's lattice falls anywhere on them), the
    second variant's ``TRUE_RATIO`` times the first's, seeds jittered by 0.25 in ln; a shallow
    valley (curvature 0.05), so that the edges, not its wall, bound the stable LRs."""
    rng = np.random.default_rng(replication)
    edge = 10 ** rng.uniform(-1.3, -0.3)
    first, second = _two(design)
    truths = {
        first: {"divergence_lr": edge, "boundary_sd": 0.25, "curvature": 0.05},
        second: {"divergence_lr": edge * TRUE_RATIO, "boundary_sd": 0.25, "curvature": 0.05},
    }
    return with_truth(design, replication, {"variants": truths})


def _brackets(
    design: Experiment, folder: Path, variants: tuple[str, ...]
) -> dict[str, tuple[float, float]]:
    """The max-LR stage's bracket of each of ``variants`` on the simulator."""
    executor = SimulatedExecutor(folder)
    url = f"journal:{folder / 'studies.log'}"
    found = {}
    for variant in variants:
        result = run_max_lr(design, variant, executor, url, None, say=lambda _: None)
        found[variant] = tuple(result.bracket)
    return found


def probe_config(design: Experiment, variant: str) -> RunConfig:
    """The variant's config as a max-LR probe runs it (budget, warmup)."""
    assert design.max_lr is not None
    return with_train(design.variants[variant], tokens=design.max_lr.tokens)


def max_lr_ratio(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(estimated / true) of the ratio of the two variants' max stable LRs (geometric
    midpoints of the brackets); covered: the true ratio lies between the brackets' extremes."""
    truth = max_lr_truth(design, replication)
    (low_a, high_a), (low_b, high_b) = _brackets(truth, folder, _two(design)).values()
    if None in (low_a, high_a, low_b, high_b):
        return Outcome(math.nan, False)
    ratio = math.sqrt(low_b * high_b) / math.sqrt(low_a * high_a)
    return Outcome(math.log2(ratio / TRUE_RATIO), low_b / high_a <= TRUE_RATIO <= high_b / low_a)


def max_lr_bracket(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(bracket midpoint / the variant's median edge) of the first variant; covered: that
    edge lies in the bracket (the bracket aims at the worst probed seed, not the median)."""
    truth = max_lr_truth(design, replication)
    variant = _two(design)[0]
    low, high = _brackets(truth, folder, (variant,))[variant]
    sim = truth.variants[variant].runtime.simulate
    own = sim.truth(variant)
    median = own.divergence_lr * warmup_gain(own, probe_config(truth, variant).train.warmup_steps)
    if low is None or high is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(math.sqrt(low * high) / median), low < median <= high)


def max_lr_worst_seed(design: Experiment, replication: int, folder: Path) -> Outcome:
    """As :func:`max_lr_bracket`, against the lowest true edge of the probed seeds."""
    truth = max_lr_truth(design, replication)
    variant = _two(design)[0]
    assert truth.max_lr is not None
    seeds = truth.max_lr.seeds or truth.seeds
    worst = min(true_edge(probe_config(truth, variant), variant, s) for s in seeds)
    low, high = _brackets(truth, folder, (variant,))[variant]
    if low is None or high is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(math.sqrt(low * high) / worst), low < worst <= high)


def seed_bounds(design: Experiment, folder: Path, variant: str) -> list[SeedBoundary]:
    """Every max-LR seed of ``variant`` bracketed on its own on the shared lattice
    (:func:`ablate.core.boundary.bracket_seed`), each probe a simulated run at the probe
    budget, from where the max-LR stage starts."""
    cfg = design.max_lr
    assert cfg is not None
    executor = SimulatedExecutor(folder)
    start = max_lr_start(design, variant, None)

    def bracketed(seed: int) -> SeedBoundary:
        def probe(lr: float) -> bool:
            config = with_train(design.variants[variant], lr=lr, tokens=cfg.tokens)
            spec = RunSpec(design.name, variant, seed, config, group="max_lr")
            return bool(executor.obtain(spec, say=lambda _: None).get("stable"))

        return bracket_seed(probe, seed, start, (cfg.lr_min, cfg.lr_max))

    return [bracketed(seed) for seed in cfg.seeds or design.seeds]


def _both_bounds(design: Experiment, replication: int, folder: Path) -> list[list[SeedBoundary]]:
    """Both variants' seed boundaries on this replication's max-LR truth."""
    truth = max_lr_truth(design, replication)
    return [seed_bounds(truth, folder, variant) for variant in _two(design)]


def boundary_ratio_t(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(estimated / true) of the per-seed boundaries' paired ratio; covered: its t interval
    widened by the lattice (:func:`ablate.core.boundary.boundary_ratio`) holds the truth."""
    found = boundary_ratio(*_both_bounds(design, replication, folder))
    if found is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(found.value / TRUE_RATIO), found.low <= TRUE_RATIO <= found.high)


def boundary_ratio_bootstrap(design: Experiment, replication: int, folder: Path) -> Outcome:
    """As :func:`boundary_ratio_t`, with a percentile bootstrap over seeds of the mean log2
    ratio instead (the interval ablate does not use: with few seeds it covers too little)."""
    first, second = _both_bounds(design, replication, folder)
    mine = {b.seed: b.estimate for b in first if b.estimate is not None}
    logs = [
        math.log2(b.estimate / mine[b.seed])
        for b in second
        if b.estimate is not None and b.seed in mine
    ]
    truth = math.log2(TRUE_RATIO)
    if not logs:
        return Outcome(math.nan, False)
    error = float(np.mean(logs)) - truth
    if len(set(logs)) < 2:  # one pair, or no spread: the bootstrap's interval is one point
        return Outcome(error, math.isclose(logs[0], truth))
    boot = stats.bootstrap((logs,), np.mean, method="percentile", random_state=replication)
    low, high = boot.confidence_interval
    return Outcome(error, low <= truth <= high)


def boundary_median(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(estimated / true) of the first variant's boundary (median over seeds) against
    its median edge; covered: the interval holds that edge."""
    truth = max_lr_truth(design, replication)
    variant = _two(design)[0]
    found = variant_boundary(seed_bounds(truth, folder, variant))
    own = truth.variants[variant].runtime.simulate.truth(variant)
    median = own.divergence_lr * warmup_gain(own, probe_config(truth, variant).train.warmup_steps)
    if found is None:
        return Outcome(math.nan, False)
    return Outcome(math.log2(found.value / median), found.low <= median <= found.high)


def _searched(design: Experiment, replication: int, folder: Path) -> tuple[float, TruthConfig]:
    """The first variant's search on a truth whose optimum is drawn log-uniform inside the
    search's range (a factor 3 from either end): (best trial's LR or NaN, the truth)."""
    assert design.search is not None
    cfg = design.search
    rng = np.random.default_rng(replication)
    opt = math.exp(rng.uniform(math.log(cfg.lr_min * 3), math.log(cfg.lr_max / 3)))
    variant = _two(design)[0]
    truth = with_truth(design, replication, {"variants": {variant: {"opt_lr": opt}}})
    truth = truth.model_copy(
        update={"search": cfg.model_copy(update={"sampler_seed": replication})}
    )
    url = f"journal:{folder / 'search.log'}"
    study = run_search(truth, variant, SimulatedExecutor(folder), url, say=lambda _: None)
    best = search_summary(study).best
    own = truth.variants[variant].runtime.simulate.truth(variant)
    return (best["lr"] if best else math.nan), own


def search_best_lr(design: Experiment, replication: int, folder: Path) -> Outcome:
    """log2(best trial's LR / true optimum) of the first variant's search."""
    best, truth = _searched(design, replication, folder)
    return Outcome(math.log2(best / truth.opt_lr))


def search_regret(design: Experiment, replication: int, folder: Path) -> Outcome:
    """The true excess loss (nats) at the search's best LR over the variant's optimum."""
    best, truth = _searched(design, replication, folder)
    return Outcome(valley_loss(truth, best) - truth.best_loss if math.isfinite(best) else math.nan)


def _final_losses(design: Experiment, lr: float) -> pd.DataFrame:
    """Every variant x seed's simulated final val loss at ``lr`` (full budget)."""
    rows = []
    for variant, cfg in design.variants.items():
        at = with_train(cfg, lr=lr)
        for seed in design.seeds:
            spec = RunSpec(design.name, variant, seed, at)
            loss, _ = final_loss(at, variant, seed, spec.run_id)
            rows.append(
                {"variant": variant, "seed": seed, "status": "finished", "final_val_loss": loss}
            )
    return pd.DataFrame(rows)


NOISE = {"seed_sd": 0.02, "run_sd": 0.005}
TRUE_DELTA = -0.01


def paired_interval(design: Experiment, replication: int, folder: Path) -> Outcome:
    """The report's paired 95% interval of Δ = second − first at the shared LR, Δ = −0.01
    nats; error: estimate − truth (nats)."""
    first, second = _two(design)
    best = design.base.runtime.simulate.default.best_loss
    truths = {"variants": {second: {"best_loss": best + TRUE_DELTA}}, **NOISE}
    truth = with_truth(design, replication, truths)
    diff = paired_difference(_final_losses(truth, truth.base.train.lr), second, first)
    return Outcome(diff.mean - TRUE_DELTA, diff.ci_low <= TRUE_DELTA <= diff.ci_high)


def holm_family(design: Experiment, replication: int, folder: Path) -> Outcome:
    """Three variants identical to the baseline: error 1 when any Holm-adjusted p < 0.05 (a
    family-wise false rejection), else 0; covered: no rejection."""
    first = _two(design)[0]
    variants = {f"{first}_{i}" if i else first: design.variants[first] for i in range(4)}
    null = design.model_copy(update={"variants": variants})
    truth = with_truth(null, replication, NOISE)
    runs = _final_losses(truth, truth.base.train.lr)
    p_values = [paired_difference(runs, v, first).p_value for v in list(variants)[1:]]
    rejected = any(p < ALPHA for p in holm(p_values))
    return Outcome(float(rejected), not rejected)


@dataclass(frozen=True)
class Entry:
    """An estimator as the table names it: what it estimates, on which scale."""

    what: str
    scale: str
    replicate: Replication


ESTIMATORS: dict[str, Entry] = {
    "max_lr_ratio": Entry(
        f"ratio of two variants' max stable LR (true {TRUE_RATIO:g})", "log2", max_lr_ratio
    ),
    "max_lr_bracket": Entry(
        "one variant's max stable LR (its median edge)", "log2", max_lr_bracket
    ),
    "max_lr_worst_seed": Entry(
        "one variant's max stable LR (its worst probed seed)", "log2", max_lr_worst_seed
    ),
    "boundary_ratio_t": Entry(
        f"per-seed boundaries' paired ratio, t + lattice interval (true {TRUE_RATIO:g})",
        "log2",
        boundary_ratio_t,
    ),
    "boundary_ratio_bootstrap": Entry(
        "the same ratio, percentile bootstrap over seeds", "log2", boundary_ratio_bootstrap
    ),
    "boundary_median": Entry(
        "one variant's boundary, median of seeds (its median edge)", "log2", boundary_median
    ),
    "search_best_lr": Entry(
        "the search's best LR against the true optimum", "log2", search_best_lr
    ),
    "search_regret": Entry("true excess loss at the search's best LR", "nats", search_regret),
    "paired_interval": Entry(
        f"paired Δ and its 95% interval (true Δ {TRUE_DELTA:+g})", "nats", paired_interval
    ),
    "holm_family": Entry("Holm over 3 null comparisons: any rejection", "rate", holm_family),
}


@dataclass(frozen=True)
class Score:
    """An estimator over its replications."""

    name: str
    replications: int
    bias: float  # mean error
    spread: float  # sd of the error
    median_abs: float  # median |error|
    coverage: float | None  # share of intervals that held the truth
    failed: int  # replications without an estimate


def score(design: Experiment, name: str, replications: int) -> Score:
    """``name`` over ``replications`` seeded replications (0, 1, ...) of ``design``."""
    entry = ESTIMATORS[name]
    outcomes = []
    for replication in range(replications):
        with tempfile.TemporaryDirectory() as folder:
            outcomes.append(entry.replicate(design, replication, Path(folder)))
    errors = np.array([o.error for o in outcomes], dtype=float)
    finite = errors[np.isfinite(errors)]
    covered = [o.covered for o in outcomes if o.covered is not None]
    return Score(
        name,
        replications,
        float(finite.mean()) if len(finite) else math.nan,
        float(finite.std(ddof=1)) if len(finite) > 1 else math.nan,
        float(np.median(np.abs(finite))) if len(finite) else math.nan,
        float(np.mean(covered)) if covered else None,
        int((~np.isfinite(errors)).sum()),
    )


def table(design: Experiment, names: list[str], replications: int) -> str:
    """The scores as a markdown table."""
    rows = []
    for name in names:
        found = score(design, name, replications)
        entry = ESTIMATORS[name]
        rows.append(
            {
                "estimator": f"`{name}`",
                "estimates": entry.what,
                "scale": entry.scale,
                "bias (mean error)": f"{found.bias:+.3f}",
                "spread (sd)": f"{found.spread:.3f}",
                "median abs error": f"{found.median_abs:.3f}",
                "coverage": "–" if found.coverage is None else f"{found.coverage:.1%}",
                "no estimate": found.failed,
            }
        )
    return pd.DataFrame(rows).to_markdown(index=False)


BEGIN, END = "<!-- estimators:begin -->", "<!-- estimators:end -->"


def write_block(doc: Path, text: str) -> None:
    """Replace the block between the markers in ``doc`` with ``text``."""
    old = doc.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(BEGIN) + ".*?" + re.escape(END), re.S)
    if not pattern.search(old):
        raise SystemExit(f"{doc}: no {BEGIN} ... {END} block to write into")
    doc.write_text(pattern.sub(lambda _: f"{BEGIN}\n{text}\n{END}", old), encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    """Score every estimator (or ``--only``) on a design and print or write the table."""
    parser = argparse.ArgumentParser(prog="python -m ablate.bench.estimators")
    parser.add_argument("experiment", type=Path, help="the design (search: and max_lr: used)")
    parser.add_argument("--replications", type=int, default=200)
    parser.add_argument("--only", default=",".join(ESTIMATORS), help="estimators, comma-separated")
    parser.add_argument("--write", type=Path, default=None, help="a doc with the marked block")
    args = parser.parse_args(argv)
    design = load_experiment(args.experiment)
    names = [n for n in args.only.split(",") if n]
    unknown = sorted(set(names) - set(ESTIMATORS))
    if unknown:
        parser.error(f"--only: unknown {unknown}; known: {', '.join(ESTIMATORS)}")
    text = (
        f"{args.replications} replications of `{args.experiment}` "
        f"(`python -m ablate.bench.estimators {args.experiment} --replications "
        f"{args.replications}`):\n\n{table(design, names, args.replications)}"
    )
    print(text)
    if args.write is not None:
        write_block(args.write, text)


if __name__ == "__main__":
    main()
