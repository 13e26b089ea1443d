"""``decide:``'s sequential design held against a known truth: over seeded replications of the
matched differences the simulator draws (Δ + e − e₀ per seed, e ~ N(0, ``run_sd``) per run; the
seed's shared effect cancels within a pair), how often it ends *exceeds*, *differs*,
*equivalent* or *inconclusive*, and how many seeds it takes. Each look judges every comparison's
primary estimand by the report's rule (:func:`ablate.report.verdict.judge` on the t interval at
the primary's level, its share of α over the looks: :func:`interval_words`, the rule the
pipeline stops on, vectorised). ``python -m research.sequential`` prints the table that
docs/stability-and-search.md holds.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import numpy as np
import yaml
from scipy import stats

from ablate.core.experiment import MIN_EFFECT, AnalysisConfig
from ablate.core.sequential import ALPHA, looks
from ablate.core.stage_sections import DecideConfig
from ablate.report.analysis import t_interval
from research import REPO

RUN_SD = 0.0100  # ln_vs_rms's run noise, 0.0094 [0.0067, 0.0154] (bench.calibration), rounded up
LLAMA_RUN_SD = 0.0345  # llama_style's, calibrated the same way
START = 3  # the seeds the default experiment starts from
FITTED_PAIR = ("layernorm", "rmsnorm")  # the fitted simulator's variants, baseline first
FITTED_MAX_SEEDS = 9  # ln_vs_rms's decide.max_seeds
REFERENCE_DESIGN = REPO / "experiments/reference.yaml"  # the model the fitted simulator draws


def primary_level(looks: int, comparisons: int = 1) -> float:
    """A look's level for one comparison's primary estimand, as the default plan gives it: the
    primary share of α split over the comparisons, then over the looks."""
    return 1 - ALPHA * AnalysisConfig().primary_share / comparisons / looks


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

    def level(self) -> float:
        """Each look's level for each comparison's primary estimand (:func:`primary_level`)."""
        return primary_level(len(self.counts()), len(self.gaps))

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


def interval_words(diffs: np.ndarray, margin: float, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The report's rule (:func:`ablate.report.verdict.judge`) on matched ``diffs``
    (replication, seed, comparison): each comparison's t interval at ``level`` read against
    ``margin``, *exceeds*, *equivalent*, *differs* or *inconclusive*; and whether the interval
    excludes no effect (a claim the words share); both (replication, comparison)."""
    n = diffs.shape[1]
    mean = diffs.mean(axis=1)
    half = stats.t.ppf(0.5 + level / 2, n - 1) * diffs.std(axis=1, ddof=1) / np.sqrt(n)
    low, high = mean - half, mean + half
    excludes = (low > 0) | (high < 0)
    found = np.select(
        [(low > margin) | (high < -margin), (-margin < low) & (high < margin), excludes],
        ["exceeds", "equivalent", "differs"],
        "inconclusive",
    )
    return found, excludes


def sequential_words(
    diffs: np.ndarray, counts: list[int], margin: float, level: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``decide:``'s rule over replications: at each look (the first ``counts[k]`` seeds)
    every comparison is judged (:func:`interval_words`), and a replication stops at the first
    look where none is inconclusive. The words where each stopped and whether each interval
    there excluded no effect (replication, comparison), and the seeds each used."""
    final = np.full(diffs.shape[::2], "inconclusive", dtype=object)
    excluded = np.zeros(diffs.shape[::2], dtype=bool)
    used = np.full(len(diffs), counts[-1])
    open_ = np.ones(len(diffs), dtype=bool)
    for count in counts:
        found, excludes = interval_words(diffs[open_, :count, :], margin, level)
        decided = (found != "inconclusive").all(axis=1)
        rows = np.flatnonzero(open_)
        final[rows], excluded[rows] = found, excludes
        used[rows[decided]] = count
        open_[rows[decided]] = False
        if not open_.any():
            break
    return final, excluded, used


@dataclass(frozen=True)
class Outcome:
    """What the design said over the replications of a scenario (fractions of them)."""

    exceeds: float  # shares of all (replication, comparison) words
    differs: float
    equivalent: float
    inconclusive: float
    any_false_differs: float  # replications whose interval excluded a true Δ = 0, at any look
    mean_seeds: float


def outcome(scenario: Scenario, replications: int, seed: int = 0) -> Outcome:
    """Run the sequential design on ``replications`` draws of ``scenario``."""
    diffs = draw(scenario, replications, seed)
    counts, level = scenario.counts(), scenario.level()
    found, _, used = sequential_words(diffs, counts, scenario.min_effect, level)
    null = np.asarray(scenario.gaps) == 0
    ever = np.zeros(replications, dtype=bool)
    for count in counts:  # every look, stopping or not: the family-wise error
        _, excludes = interval_words(diffs[:, :count], scenario.min_effect, level)
        ever |= (excludes & null).any(axis=1)
    return Outcome(
        exceeds=float((found == "exceeds").mean()),
        differs=float((found == "differs").mean()),
        equivalent=float((found == "equivalent").mean()),
        inconclusive=float((found == "inconclusive").mean()),
        any_false_differs=float(ever.mean()) if null.any() else float("nan"),
        mean_seeds=float(used.mean()),
    )


def table(replications: int, seed: int = 0) -> str:
    """The markdown table of every scenario."""
    lines = [
        "| scenario | design and truth | exceeds | differs | equivalent | inconclusive | "
        "false differs from 0, any look | mean seeds |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for scenario in SCENARIOS:
        o = outcome(scenario, replications, seed)
        false = "—" if np.isnan(o.any_false_differs) else f"{o.any_false_differs:.1%}"
        lines.append(
            f"| `{scenario.name}` | {scenario.describe()} | {o.exceeds:.1%} | {o.differs:.1%} | "
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
    at its looks' level (the primary's, as the report gives it) and the unadjusted 95%."""

    at_looks: float
    unadjusted: float
    excludes_zero: float
    mean_seeds: float


def stopped_coverage(diffs: np.ndarray, delta: float, counts: list[int]) -> Coverage:
    """:class:`Coverage` of one comparison's ``diffs`` (replication, seed, 1), judged at the
    default plan's primary level over ``counts``' looks."""
    level = primary_level(len(counts))
    _, excluded, used = sequential_words(diffs, counts, MIN_EFFECT, level)
    held = {"looks": [], "plain": []}
    for row, count in zip(diffs[:, :, 0], used, strict=True):
        for key, at in (("looks", level), ("plain", 0.95)):
            low, high = t_interval(row[:count], at)
            held[key].append(low <= delta <= high)
    return Coverage(
        float(np.mean(held["looks"])),
        float(np.mean(held["plain"])),
        float(excluded.mean()),
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
            f"unadjusted 95% {found.unadjusted:.1%}; excluding Δ = 0 {found.excludes_zero:.1%}; "
            f"mean seeds {found.mean_seeds:.1f}"
        )
        return
    print(f"{args.replications} replications, α {ALPHA:g}, min_effect {MIN_EFFECT:g}")
    print(table(args.replications, args.seed))


if __name__ == "__main__":
    main()
