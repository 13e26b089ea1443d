"""``decide:``'s sequential design held against a known truth: over seeded replications of the
matched differences the simulator draws (Δ + e − e₀ per seed, e ~ N(0, ``run_sd``) per run; the
seed's shared effect cancels within a pair), how often the design says *different*,
*equivalent* or stays *inconclusive*, and how many seeds it takes
(:func:`ablate.report.verdict.sequential_words`, the rule the pipeline stops on).
``python -m research.sequential`` prints the table that docs/stability-and-search.md holds.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import yaml

from ablate.core.experiment import MIN_EFFECT
from ablate.core.sequential import ALPHA, look_alpha, looks
from ablate.core.stage_sections import DecideConfig
from ablate.report.analysis import t_interval
from ablate.report.verdict import look_words, sequential_words
from research import REPO

RUN_SD = 0.0100  # ln_vs_rms's run noise, 0.0094 [0.0067, 0.0154] (bench.calibration), rounded up
LLAMA_RUN_SD = 0.0345  # llama_style's, calibrated the same way
START = 3  # the seeds the default experiment starts from
FITTED_PAIR = ("layernorm", "rmsnorm")  # the fitted simulator's variants, baseline first
FITTED_MAX_SEEDS = 9  # ln_vs_rms's decide.max_seeds
REFERENCE_DESIGN = REPO / "experiments/reference.yaml"  # the model the fitted simulator draws


@dataclass(frozen=True)
class Scenario:
    """A design (``max_seeds``, ``step``) and a truth (each comparison's true Δ)."""

    name: str
    gaps: tuple[float, ...]  # true Δ of each comparison to the baseline (nats)
    max_seeds: int
    step: int = 2
    run_sd: float = RUN_SD
    min_effect: float = MIN_EFFECT

    def counts(self) -> list[int]:
        """The seed counts it looks at."""
        return looks(START, DecideConfig(max_seeds=self.max_seeds, step=self.step))

    def describe(self) -> str:
        gaps = ", ".join(f"{g:+g}" for g in self.gaps)
        return f"Δ = {gaps}; {START}→{self.max_seeds} seeds by {self.step}, run sd {self.run_sd:g}"


SCENARIOS = (
    Scenario("null_to_20", (0.0,), 20),
    Scenario("gap_2m_to_20", (2 * MIN_EFFECT,), 20),
    Scenario("gap_m_to_20", (MIN_EFFECT,), 20),
    Scenario("null_to_40", (0.0,), 40),
    Scenario("two_nulls_to_20", (0.0, 0.0), 20),
    Scenario("null_and_2m_to_40", (0.0, 2 * MIN_EFFECT), 40),
    Scenario("null_to_40_llama_noise", (0.0,), 40, run_sd=LLAMA_RUN_SD),
    Scenario("gap_2m_to_40_llama_noise", (2 * MIN_EFFECT,), 40, run_sd=LLAMA_RUN_SD),
)


def draw(scenario: Scenario, replications: int, seed: int = 0) -> np.ndarray:
    """Matched differences (replication, seed, comparison): each variant's run noise minus the
    baseline's, plus its true Δ (the comparisons share the baseline's runs, as in a report)."""
    rng = np.random.default_rng(seed)
    shape = (replications, scenario.max_seeds, len(scenario.gaps) + 1)
    noise = rng.normal(0.0, scenario.run_sd, shape)
    return np.asarray(scenario.gaps) + noise[:, :, 1:] - noise[:, :, :1]


@dataclass(frozen=True)
class Outcome:
    """What the design said over the replications of a scenario (fractions of them)."""

    different: float  # shares of all (replication, comparison) words
    equivalent: float
    inconclusive: float
    any_false_different: float  # replications with a "different" where Δ = 0, at any look
    mean_seeds: float


def outcome(scenario: Scenario, replications: int, seed: int = 0) -> Outcome:
    """Run the sequential design on ``replications`` draws of ``scenario``."""
    diffs = draw(scenario, replications, seed)
    found, used = sequential_words(diffs, scenario.counts(), scenario.min_effect, ALPHA)
    null = np.asarray(scenario.gaps) == 0
    ever = np.zeros(replications, dtype=bool)
    level = look_alpha(len(scenario.counts()), ALPHA)
    for count in scenario.counts():  # every look, stopping or not: the family-wise error
        at_look = look_words(diffs[:, :count], scenario.min_effect, level)
        ever |= ((at_look == "different") & null).any(axis=1)
    return Outcome(
        different=float((found == "different").mean()),
        equivalent=float((found == "equivalent").mean()),
        inconclusive=float((found == "inconclusive").mean()),
        any_false_different=float(ever.mean()) if null.any() else float("nan"),
        mean_seeds=float(used.mean()),
    )


def table(replications: int, seed: int = 0) -> str:
    """The markdown table of every scenario."""
    lines = [
        "| scenario | design and truth | different | equivalent | inconclusive | "
        "false different, any look | mean seeds |",
        "|---|---|---|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        o = outcome(scenario, replications, seed)
        false = "—" if np.isnan(o.any_false_different) else f"{o.any_false_different:.1%}"
        lines.append(
            f"| `{scenario.name}` | {scenario.describe()} | {o.different:.1%} | "
            f"{o.equivalent:.1%} | {o.inconclusive:.1%} | {false} | {o.mean_seeds:.1f} |"
        )
    return "\n".join(lines)


def fitted_differences(
    replications: int, max_seeds: int, seed: int = 0
) -> tuple[np.ndarray, float]:
    """Matched differences (replication, seed, 1) of RMSNorm at its optimum minus LayerNorm at
    its own, drawn from the simulator fitted to the dense reference (its measured valley,
    excursions and noise that grows above the optimum), and that model's true Δ there."""
    from ablate.core.load import load_experiment
    from ablate.core.simulate import mean_loss
    from ablate.core.truth import SimulateConfig
    from research import fit_reference as fit
    from research import reference as ref

    section = yaml.safe_load(fit.FITTED.read_text(encoding="utf-8"))
    sim = SimulateConfig(**section)
    lattice = [float(lr) for lr in next(iter(ref.load_reference().values())).lrs]
    expected = {v: [mean_loss(sim.truth(v), lr) for lr in lattice] for v in FITTED_PAIR}
    optima = {v: lattice[int(np.argmin(e))] for v, e in expected.items()}
    base = load_experiment(REFERENCE_DESIGN).base
    seeds = range(replications * max_seeds)
    drawn = {
        v: fit.simulated_curves(base, section, [optima[v]], seeds, [v], seed)[v].select[0]
        for v in FITTED_PAIR
    }
    first, second = FITTED_PAIR
    diffs = (drawn[second] - drawn[first]).reshape(replications, max_seeds, 1)
    return diffs, float(min(expected[second]) - min(expected[first]))


@dataclass(frozen=True)
class Coverage:
    """Where the sequential design stopped, how often its intervals held the true Δ: the one
    at its looks' level (1 − α / looks, as the report gives it) and the unadjusted 95%."""

    at_looks: float
    unadjusted: float
    different: float
    mean_seeds: float


def stopped_coverage(diffs: np.ndarray, delta: float, counts: list[int]) -> Coverage:
    """:class:`Coverage` of one comparison's ``diffs`` (replication, seed, 1)."""
    found, used = sequential_words(diffs, counts, MIN_EFFECT, ALPHA)
    level = 1 - look_alpha(len(counts), ALPHA)
    held = {"looks": [], "plain": []}
    for row, count in zip(diffs[:, :, 0], used, strict=True):
        for key, at in (("looks", level), ("plain", 0.95)):
            low, high = t_interval(row[:count], at)
            held[key].append(low <= delta <= high)
    return Coverage(
        float(np.mean(held["looks"])),
        float(np.mean(held["plain"])),
        float((found == "different").mean()),
        float(used.mean()),
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replications", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--fitted", type=int, default=0, help="replications drawn from the fitted simulator"
    )
    args = parser.parse_args(argv)
    if args.fitted:
        counts = looks(START, DecideConfig(max_seeds=FITTED_MAX_SEEDS, step=2))
        diffs, delta = fitted_differences(args.fitted, FITTED_MAX_SEEDS, args.seed)
        found = stopped_coverage(diffs, delta, counts)
        print(
            f"fitted simulator, {args.fitted} replications, looks at {counts}, true Δ "
            f"{delta:+.4f}: interval at the looks' level covers {found.at_looks:.1%}, the "
            f"unadjusted 95% {found.unadjusted:.1%}; different {found.different:.1%}; "
            f"mean seeds {found.mean_seeds:.1f}"
        )
        return
    print(f"{args.replications} replications, α {ALPHA:g}, min_effect {MIN_EFFECT:g}")
    print(table(args.replications, args.seed))


if __name__ == "__main__":
    main()
