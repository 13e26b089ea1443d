"""The simulator's model of training: what a run of a RunSpec would give, drawn from a truth
the experiment file states, so that every estimator can be held against a known answer.

Per variant a :class:`~ablate.core.truth.TruthConfig` gives (docs/simulator.md):

- **the loss valley**: the final val loss at LR η is ℓ* + c·log10(η/η*)² (``best_loss``
  ℓ*, ``opt_lr`` η*, ``curvature`` c), or ℓ* plus a measured ``shape``, plus the seed's shared
  effect and the run's own noise (``seed_sd``: one draw per seed, the same for every variant, as
  matched init and batches make real seeds; ``run_sd``: one draw per run, ``run_sd_above`` above
  η*), and with a chance rising in log η (``spike_rate``, ``spike_lr``, ``spike_width``) an
  excursion, an exponential excess of mean ``spike_size``; or, instead of those, a measured
  ``noise`` table of (sd, chance, mean excess) per log2(η/η*), as the simulator fitted to real
  runs (:mod:`research.fit_reference`) has; the defaults have none. Too small an LR
  climbs the valley's wall until the run no longer beats the floor: the criterion then calls
  it collapsed (not learned);
- **the edges**: at or above the seed's divergence LR the train loss blows up at the first step
  after warmup (the real :class:`~ablate.core.stability.DivergenceRule` stops it), as real runs
  do: 120 of the dense reference's 132 divergences came at step 21 after a 20-step warmup, all
  committed ones by step 32 (``research.divergence_steps``); from ``collapse_lr`` up to
  there the run ends at the unigram floor (collapsed). Both edges are the variant's values times
  exp(``boundary_sd``·z + ``seed_edge_sd``·z₀), z one standard normal per (variant, seed) and
  z₀ one per seed (shared, as a seed's init and batches move every variant's edge), times the
  warmup gain
  1 + ``warmup_gain``·(1 − exp(−warmup/``warmup_scale``));
- **the curve**: val and train loss fall from ℓ0 = ln(vocab) as ℓ + (ℓ0 − ℓ)·(1 − s/T)² over the
  T planned steps, so a search's pruner sees intermediate values with the final ordering; a
  run at or above η* that ends above the collapse line (the collapse band, the valley's upper
  wall) gets there in T/2 steps and stays (stuck), while one below η* is still improving at
  its end (not learned yet).

Nothing here depends on the budget beyond the curve's length: the truth is the truth at every
budget. Every draw is a function of (``simulate.seed``, seed, variant, run), so a simulated run
repeats bit for bit. :func:`true_edge` and :func:`expected_loss` are the answers the estimator
tests score against.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ablate.core.config import RunConfig
from ablate.core.stability import (
    DivergenceRule,
    Stop,
    StopKind,
    Verdict,
    floor_value,
    run_verdict,
)
from ablate.core.truth import SimulateConfig, TruthConfig

BLOWN_UP = 10.0  # nats above ℓ0: the train loss of a diverging run
SIMULATED_IMPL = "simulated"  # the norm_impl a simulated run's summary records


def _draw(*parts: object) -> np.random.Generator:
    """A generator seeded by the parts (names hashed, so the draw is the same on any machine)."""
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


def seed_effect(sim: SimulateConfig, seed: int) -> float:
    """The loss effect every variant of ``seed`` shares (init and batch order)."""
    return float(_draw(sim.seed, "seed", seed).normal(0.0, sim.seed_sd))


def warmup_gain(truth: TruthConfig, warmup_steps: int) -> float:
    """The factor warmup moves both edges by: 1 + gain·(1 − exp(−warmup/scale))."""
    return 1.0 + truth.warmup_gain * (1.0 - math.exp(-warmup_steps / truth.warmup_scale))


def edge_factor(sim: SimulateConfig, truth: TruthConfig, variant: str, seed: int) -> float:
    """exp(boundary_sd·z + seed_edge_sd·z₀): how far this seed's edges sit from the variant's
    (z the variant's own draw, z₀ the seed's, the same for every variant)."""
    own = truth.boundary_sd * float(_draw(sim.seed, "edge", variant, seed).normal())
    shared = sim.seed_edge_sd * float(_draw(sim.seed, "edge", seed).normal())
    return math.exp(own + shared)


@dataclass(frozen=True)
class Edges:
    """Where one (variant, seed, warmup) collapses and diverges (collapse None: no band)."""

    collapse: float | None
    divergence: float

    @property
    def unstable_from(self) -> float:
        """The smallest LR the edges make unstable."""
        return self.collapse if self.collapse is not None else self.divergence


def edges(sim: SimulateConfig, variant: str, seed: int, warmup_steps: int) -> Edges:
    """The seed's collapse and divergence LRs at this warmup."""
    truth = sim.truth(variant)
    factor = edge_factor(sim, truth, variant, seed) * warmup_gain(truth, warmup_steps)
    collapse = truth.collapse_lr * factor if truth.collapse_lr is not None else None
    return Edges(collapse, truth.divergence_lr * factor)


def valley_loss(truth: TruthConfig, lr: float) -> float:
    """The valley at ``lr`` without any noise or excursion: ℓ* + c·log10(lr/η*)², or ℓ* plus
    the measured ``shape`` interpolated in log2(lr/η*)."""
    if truth.shape is not None:
        offsets, excess = zip(*truth.shape, strict=True)
        return truth.best_loss + float(np.interp(math.log2(lr / truth.opt_lr), offsets, excess))
    return truth.best_loss + truth.curvature * math.log10(lr / truth.opt_lr) ** 2


def spike_chance(truth: TruthConfig, lr: float) -> float:
    """A run's chance at ``lr`` of a loss excursion: from the ``noise`` table where there is
    one, else ``spike_rate`` times a logistic in log2 LR that is ½ at ``spike_lr``, rising over
    ``spike_width`` octaves."""
    if truth.noise is not None:
        return noise_row(truth, lr)[1]
    if truth.spike_rate == 0:
        return 0.0
    return truth.spike_rate / (1.0 + math.exp(-math.log2(lr / truth.spike_lr) / truth.spike_width))


def noise_row(truth: TruthConfig, lr: float) -> tuple[float, float, float]:
    """(normal sd, excursion chance, excursion mean) of the ``noise`` table at ``lr``, linear
    in log2 LR between its rows, flat beyond them."""
    assert truth.noise is not None
    offset = math.log2(lr / truth.opt_lr)
    columns = list(zip(*truth.noise, strict=True))
    sd, chance, size = (float(np.interp(offset, columns[0], c)) for c in columns[1:])
    return sd, chance, size


def spike_size(truth: TruthConfig, lr: float) -> float:
    """The mean excess of an excursion at ``lr``."""
    return noise_row(truth, lr)[2] if truth.noise is not None else truth.spike_size


def mean_loss(truth: TruthConfig, lr: float) -> float:
    """The expected final loss at ``lr`` inside the stable window, excursions included: the
    valley plus chance × mean excess (what an estimator of the optimum should find)."""
    return valley_loss(truth, lr) + spike_chance(truth, lr) * spike_size(truth, lr)


def run_sd(sim: SimulateConfig, truth: TruthConfig, lr: float) -> float:
    """The sd of a run's normal noise at ``lr``: the ``noise`` table's, else ``run_sd_above``
    above the optimum, else the runtime's ``run_sd``."""
    if truth.noise is not None:
        return noise_row(truth, lr)[0]
    above = truth.run_sd_above is not None and lr > truth.opt_lr
    return truth.run_sd_above if above else sim.run_sd


def run_excess(sim: SimulateConfig, truth: TruthConfig, lr: float, run_id: str) -> float:
    """The run's own deviation from its seed's valley: normal noise (:func:`run_sd`) plus, at
    the chance :func:`spike_chance`, an exponential excursion of mean :func:`spike_size`."""
    rng = _draw(sim.seed, "run", run_id)
    noise = float(rng.normal(0.0, run_sd(sim, truth, lr)))
    chance = spike_chance(truth, lr)
    if chance and float(_draw(sim.seed, "spike", run_id).random()) < chance:
        noise += float(_draw(sim.seed, "spike size", run_id).exponential(spike_size(truth, lr)))
    return noise


def expected_loss(sim: SimulateConfig, variant: str, lr: float, seed: int | None = None) -> float:
    """The valley's final val loss at ``lr`` inside the stable window (with the seed's shared
    effect when ``seed`` is given; without the run's own noise and excursions)."""
    shared = seed_effect(sim, seed) if seed is not None else 0.0
    return valley_loss(sim.truth(variant), lr) + shared


def floor_of(cfg: RunConfig) -> float:
    """The loss a simulated run must get below by ``final_margin`` to have learned."""
    sim = cfg.runtime.simulate
    return floor_value(cfg.train.stability, math.log(sim.vocab_size), sim.unigram_loss)


def true_edge(cfg: RunConfig, variant: str, seed: int) -> float:
    """The largest stable LR of (variant, seed) at ``cfg``'s warmup: the lower of the edges and
    the LR where the valley's upper wall (with the seed's effect, without run noise) reaches
    the collapse line floor − final_margin."""
    sim = cfg.runtime.simulate
    truth = sim.truth(variant)
    room = floor_of(cfg) - cfg.train.stability.final_margin - truth.best_loss
    room -= seed_effect(sim, seed)
    return min(edges(sim, variant, seed, cfg.train.warmup_steps).unstable_from, wall(truth, room))


def wall(truth: TruthConfig, room: float) -> float:
    """The smallest LR above the optimum where the valley rises ``room`` nats (inf: never)."""
    if truth.shape is None:
        if not truth.curvature or room < 0:
            return truth.opt_lr if room < 0 else math.inf
        return truth.opt_lr * 10 ** math.sqrt(room / truth.curvature)
    offsets = [0.0] + [x for x, _ in truth.shape if x > 0]
    excess = [valley_loss(truth, truth.opt_lr * 2.0**x) - truth.best_loss for x in offsets]
    if excess[0] >= room:
        return truth.opt_lr
    for i in range(len(offsets) - 1):
        if excess[i] < room <= excess[i + 1]:
            share = (room - excess[i]) / (excess[i + 1] - excess[i])
            return truth.opt_lr * 2.0 ** (offsets[i] + share * (offsets[i + 1] - offsets[i]))
    return math.inf


@dataclass
class SimulatedRun:
    """What a simulated run trained: per-step rows, and how it ended."""

    steps: list[dict[str, float]]
    evals: list[tuple[int, float]]
    status: str  # finished, diverged or pruned
    stop: Stop | None
    threshold: float | None = None  # the divergence rule's, fixed at the first step


def curve(final: float, start: float, step: int, total: int) -> float:
    """Loss at ``step`` of ``total`` on the way from ``start`` to ``final``."""
    return final + (start - final) * (1.0 - step / total) ** 2


def final_loss(cfg: RunConfig, variant: str, seed: int, run_id: str) -> tuple[float, bool]:
    """(final val loss the run heads for, whether it diverges)."""
    sim = cfg.runtime.simulate
    lr = cfg.train.lr
    seen = edges(sim, variant, seed, cfg.train.warmup_steps)
    noise = run_excess(sim, sim.truth(variant), lr, run_id)
    if lr >= seen.divergence:
        return math.log(sim.vocab_size) + BLOWN_UP, True
    if seen.collapse is not None and lr >= seen.collapse:
        return sim.unigram_loss + abs(noise), False
    learned = expected_loss(sim, variant, lr, seed) + noise
    return min(learned, math.log(sim.vocab_size)), False


def stuck(cfg: RunConfig, variant: str, target: float) -> bool:
    """Whether a run heading for ``target`` at ``cfg``'s LR gets stuck there early: at or
    above the optimum and not below the collapse line floor − final_margin."""
    truth = cfg.runtime.simulate.truth(variant)
    line = floor_of(cfg) - cfg.train.stability.final_margin
    return cfg.train.lr >= truth.opt_lr and target >= line


def simulate_run(
    cfg: RunConfig,
    variant: str,
    seed: int,
    run_id: str,
    watch: Callable[[int, float], bool] | None = None,
) -> SimulatedRun:
    """Every step of the run: evaluations every ``eval_interval`` and at the last step, the
    divergence rule applied to each step's train loss, ``watch(step, val) -> stop?`` after each
    evaluation before the last (a search's pruner), held at ``runtime.pause_step`` (paused)."""
    total = cfg.steps()
    start = math.log(cfg.runtime.simulate.vocab_size)
    target, diverges = final_loss(cfg, variant, seed, run_id)
    blow_up = cfg.train.warmup_steps + 1 if diverges else total + 1  # as real runs do
    rule = DivergenceRule(cfg.train.stability, start, cfg.train.warmup_steps)
    run = SimulatedRun([], [], "finished", None)
    settled = target if not diverges else start
    horizon = total // 2 if stuck(cfg, variant, target) else total
    for step in range(1, total + 1):
        at = min(step, horizon)
        train = BLOWN_UP + start if step >= blow_up else curve(settled, start, at, horizon)
        run.steps.append({"step": step, "train_loss": train})
        stop = rule.check(step, train)
        run.threshold = rule.threshold
        if stop is not None:
            run.status, run.stop = "diverged", stop
            return run
        if step % cfg.train.eval_interval == 0 or step == total:
            val = curve(settled, start, at, horizon)
            run.evals.append((step, val))
            if watch is not None and step < total and watch(step, val):
                run.status = "pruned"
                run.stop = Stop(step, StopKind.PRUNED)
                return run
        if step == cfg.runtime.pause_step and step < total:  # resumed: simulated again
            run.status = "paused"
            run.stop = Stop(step, StopKind.PAUSED)
            return run
    return run


def verdict_of(cfg: RunConfig, run: SimulatedRun) -> Verdict | None:
    """The stability criterion applied to a simulated run, as to a trained one."""
    sim = cfg.runtime.simulate
    val_losses = [val for _, val in run.evals]
    losses = (math.log(sim.vocab_size), sim.unigram_loss)
    steps = run.steps[-1]["step"] if run.steps else 0
    return run_verdict(run.status, run.stop, val_losses, cfg.train.stability, losses, int(steps))
