"""The estimators held against the simulator's truth: bias, spread and coverage over many seeded
replications of one design.

Each replication draws a truth (:mod:`ablate.core.simulate`) with its own ``simulate.seed``, runs
one estimator on the design's sections through the code the pipeline uses (the max-LR stage,
the search stage on the simulator backend, the report's paired interval and Holm adjustment)
and returns an :class:`Outcome`: the estimate's error against the truth and whether its interval
covered it. :data:`ESTIMATORS` lists them; adding one is one function
``(design, replication, folder) -> Outcome`` and one entry. docs/stability-and-search.md holds
the table this prints for experiments/ln_vs_rms.yaml:

    python -m research.estimators experiments/ln_vs_rms.yaml --replications 200 \\
        --write docs/stability-and-search.md
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from ablate.core.plan import RunSpec, seed_run_ids, with_train
from ablate.core.simulate import TruthConfig, final_loss, valley_loss
from ablate.core.stage_sections import SearchConfig
from ablate.launch.search import run_search, search_summary
from ablate.launch.simulator import SimulatedExecutor
from ablate.report.analysis import holm, paired_difference
from research.max_lr_replications import (
    RATIO_RANGE,
    THREE_SEEDS,
    boundary_median,
    boundary_ratio_bootstrap,
    boundary_ratio_given_seeds,
    boundary_ratio_t,
    boundary_ratio_three_seeds,
    old_bracket_median,
    old_bracket_ratio,
    old_bracket_worst_seed,
)
from research.optimum_replications import (
    LLAMA_CURVATURE,
    LLAMA_SD,
    NOISY_SD,
    RUN_SD,
    TRUE_OPTIMUM_RATIO,
    optimum_lr,
    optimum_lr_llama_style,
    optimum_lr_noisy,
    optimum_lr_noisy_more_seeds,
    optimum_ratio_apart,
    optimum_ratio_equal,
)
from research.replication import Outcome, Replication, two_variants, with_truth

ALPHA = 0.05
# the search ln_vs_rms ran before its curve stage replaced it, for a design without search:
REFERENCE_SEARCH = SearchConfig(n_trials=6, lr_min=1e-3, lr_max=3e-2, warmup_max=100)


def _searched(design: Experiment, replication: int, folder: Path) -> tuple[float, TruthConfig]:
    """The first variant's search (the design's, else :data:`REFERENCE_SEARCH`) on a truth
    whose optimum is drawn log-uniform inside the search's range (a factor 3 from either end):
    (best trial's LR or NaN, the truth)."""
    cfg = design.search or REFERENCE_SEARCH
    rng = np.random.default_rng(replication)
    opt = math.exp(rng.uniform(math.log(cfg.lr_min * 3), math.log(cfg.lr_max / 3)))
    variant = two_variants(design)[0]
    truth = with_truth(design, replication, {"variants": {variant: {"opt_lr": opt}}})
    truth = truth.model_copy(
        update={"search": cfg.model_copy(update={"sampler_seed": replication})}
    )
    url = f"journal:{folder / 'search.log'}"
    study = run_search(truth, variant, SimulatedExecutor(folder), url, say=lambda _: None)
    best = search_summary(study).best
    own = truth.variants[variant].runtime.simulate.truth(variant)
    return (best.lr if best else math.nan), own


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
        ids = seed_run_ids(RunSpec(design.name, variant, 0, at), design.seeds)
        for seed, run_id in zip(design.seeds, ids, strict=True):
            loss, _ = final_loss(at, variant, seed, run_id)
            rows.append(
                {"variant": variant, "seed": seed, "status": "finished", "final_val_loss": loss}
            )
    return pd.DataFrame(rows)


NOISE = {"seed_sd": 0.02, "run_sd": 0.005}
TRUE_DELTA = -0.01


def paired_interval(design: Experiment, replication: int, folder: Path) -> Outcome:
    """The report's paired 95% interval of Δ = second − first at the shared LR, Δ = −0.01
    nats; error: estimate − truth (nats)."""
    first, second = two_variants(design)
    best = design.base.runtime.simulate.default.best_loss
    truths = {"variants": {second: {"best_loss": best + TRUE_DELTA}}, **NOISE}
    truth = with_truth(design, replication, truths)
    diff = paired_difference(_final_losses(truth, truth.base.train.lr), second, first)
    return Outcome(diff.mean - TRUE_DELTA, diff.ci_low <= TRUE_DELTA <= diff.ci_high)


def holm_family(design: Experiment, replication: int, folder: Path) -> Outcome:
    """Three variants identical to the baseline: error 1 when any Holm-adjusted p < 0.05 (a
    family-wise false rejection), else 0; covered: no rejection."""
    first = two_variants(design)[0]
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


RATIO_SPAN = f"{RATIO_RANGE[0]:g}–{RATIO_RANGE[1]:g}, log-uniform"
ESTIMATORS: dict[str, Entry] = {
    "old_bracket_ratio": Entry(
        f"old bracket: ratio of two variants' max stable LR (true {RATIO_SPAN})",
        "log2",
        old_bracket_ratio,
    ),
    "old_bracket_median": Entry(
        "old bracket: one variant's max stable LR (its median edge)", "log2", old_bracket_median
    ),
    "old_bracket_worst_seed": Entry(
        "old bracket: one variant's max stable LR (its worst probed seed)",
        "log2",
        old_bracket_worst_seed,
    ),
    "boundary_ratio_t": Entry(
        f"per-seed boundaries' paired ratio, t + lattice interval (true {RATIO_SPAN})",
        "log2",
        boundary_ratio_t,
    ),
    "boundary_ratio_given_seeds": Entry(
        "the same ratio against its seeds' own true ratio (no seed sampling)",
        "log2",
        boundary_ratio_given_seeds,
    ),
    "boundary_ratio_three_seeds": Entry(
        f"the same ratio on {len(THREE_SEEDS)} boundary seeds", "log2", boundary_ratio_three_seeds
    ),
    "boundary_ratio_bootstrap": Entry(
        "the same ratio, percentile bootstrap over seeds", "log2", boundary_ratio_bootstrap
    ),
    "boundary_median": Entry(
        "one variant's boundary, median of seeds (its median edge)", "log2", boundary_median
    ),
    "optimum_lr": Entry(
        "a variant's LR optimum from its curve (2 seeds, √2 grid)", "log2", optimum_lr
    ),
    "optimum_lr_noisy": Entry(
        f"the same, run noise {NOISY_SD:g} nats instead of {RUN_SD:g}", "log2", optimum_lr_noisy
    ),
    "optimum_lr_noisy_more_seeds": Entry(
        "the same noisy curve on 4 seeds", "log2", optimum_lr_noisy_more_seeds
    ),
    "optimum_lr_llama_style": Entry(
        f"the same at run noise {LLAMA_SD:g}, curvature {LLAMA_CURVATURE:g} (llama_style's)",
        "log2",
        optimum_lr_llama_style,
    ),
    "optimum_ratio_equal": Entry(
        "two variants' optimum ratio, equal optima (true 1)", "log2", optimum_ratio_equal
    ),
    "optimum_ratio_apart": Entry(
        f"two variants' optimum ratio (true {TRUE_OPTIMUM_RATIO:g})", "log2", optimum_ratio_apart
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
    within_quarter: float  # share of estimates with |error| <= 1/4 (a factor 2^(1/4) in log2)


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
        float(np.mean(np.abs(errors) <= 0.25)),  # a missing estimate counts as a miss
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
                "within 2^(1/4)": f"{found.within_quarter:.1%}" if entry.scale == "log2" else "–",
                "no estimate": found.failed,
            }
        )
    return pd.DataFrame(rows).to_markdown(index=False)


BLOCK = "estimators"  # docs/stability-and-search.md's marked block for this table


def markers(block: str, command: str) -> tuple[str, str]:
    """The comments that open and close a doc's generated ``block``; the opening one names the
    ``command`` that wrote it."""
    opening = f"<!-- {block}:begin; generated by `{command}`: rerun it, do not edit -->"
    return opening, f"<!-- {block}:end -->"


def write_block(doc: Path, block: str, text: str, command: str) -> None:
    """Replace ``block`` in ``doc`` (from its opening comment to its closing one) with ``text``
    between :func:`markers` that name ``command``."""
    begin, end = markers(block, command)
    old = doc.read_text(encoding="utf-8")
    pattern = re.compile(re.escape(f"<!-- {block}:begin") + ".*?" + re.escape(end), re.S)
    if not pattern.search(old):
        raise SystemExit(f"{doc}: no <!-- {block}:begin ... {end} block to write into")
    doc.write_text(pattern.sub(lambda _: f"{begin}\n{text}\n{end}", old), encoding="utf-8")


def command_line(module: str, argv: list[str] | None) -> str:
    """The command that ran ``module`` with ``argv`` (the process's own where None)."""
    return " ".join(["python -m", module, *(sys.argv[1:] if argv is None else argv)])


def main(argv: list[str] | None = None) -> None:
    """Score every estimator (or ``--only``) on a design and print or write the table."""
    parser = argparse.ArgumentParser(prog="python -m research.estimators")
    parser.add_argument(
        "experiment", type=Path, help="the design (its max_lr:, curve: and search: used)"
    )
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
        f"(`python -m research.estimators {args.experiment} --replications "
        f"{args.replications}`):\n\n{table(design, names, args.replications)}"
    )
    print(text)
    if args.write is not None:
        write_block(args.write, BLOCK, text, command_line("research.estimators", argv))


if __name__ == "__main__":
    main()
