"""The simulator's model of training: draws repeat, a seed's effect is shared by its variants,
the edges and the valley's wall are where the stability criterion finds them."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from conftest import TINY

from ablate.core.config import RunConfig
from ablate.core.errors import ConfigError
from ablate.core.load import build_run_config
from ablate.core.overrides import apply_overrides
from ablate.core.plan import RunSpec
from ablate.core.simulate import (
    edges,
    expected_loss,
    seed_effect,
    simulate_run,
    true_edge,
    verdict_of,
)
from ablate.core.stability import IMPROVING_DROP, Instability, Verdict
from ablate.core.truth import SimulateConfig

TRUTH = {
    "variants": {
        "ln": {"divergence_lr": 0.2, "boundary_sd": 0.3},
        "rms": {"divergence_lr": 0.8, "collapse_lr": 0.4, "opt_lr": 0.006, "best_loss": 1.70},
    }
}


def sim_config(**overrides: Any) -> RunConfig:
    """The tiny config on the simulator, with these dotted-key overrides."""
    raw = apply_overrides(
        {**TINY, "runtime": {"backend": "simulate", "simulate": TRUTH}}, overrides, "test"
    )
    return build_run_config(raw, "test")


def judged(cfg: RunConfig, variant: str, seed: int) -> tuple[str, bool | None]:
    spec = RunSpec("sim", variant, seed, cfg)
    run = simulate_run(cfg, variant, seed, spec.run_id)
    verdict = verdict_of(cfg, run)
    return run.status, verdict.stable if verdict else None


def test_a_simulated_run_repeats_and_its_id_is_never_a_trained_runs() -> None:
    cfg = sim_config()
    spec = RunSpec("sim", "ln", 0, cfg)
    first = simulate_run(cfg, "ln", 0, spec.run_id)
    assert first == simulate_run(cfg, "ln", 0, spec.run_id)
    trained = RunSpec("sim", "ln", 0, cfg.model_copy(update={"runtime": RunConfig().runtime}))
    assert trained.run_id != spec.run_id
    other_truth = sim_config(**{"runtime.simulate.seed": 1})
    assert RunSpec("sim", "ln", 0, other_truth).run_id != spec.run_id


def test_every_variant_of_a_seed_shares_its_effect() -> None:
    sim = SimulateConfig(**TRUTH, seed_sd=0.05, run_sd=0.0)
    for seed in range(4):
        shift = seed_effect(sim, seed)
        assert expected_loss(sim, "ln", 0.004, seed) == pytest.approx(1.73 + shift)
        assert expected_loss(sim, "rms", 0.006, seed) == pytest.approx(1.70 + shift)
    effects = [seed_effect(sim, s) for s in range(400)]
    assert abs(sum(effects) / 400) < 0.01 and 0.04 < math.dist(effects, [0] * 400) / 20 < 0.06


def test_the_criterion_finds_each_edge_where_the_truth_puts_it() -> None:
    for variant in ("ln", "rms"):
        for seed in range(3):
            cfg = sim_config()
            edge = true_edge(cfg, variant, seed)
            below = sim_config(**{"train.lr": edge * 0.99})
            above = sim_config(**{"train.lr": edge * 1.01})
            assert judged(below, variant, seed) == ("finished", True)
            status, stable = judged(above, variant, seed)
            assert stable is False
            seen = edges(cfg.runtime.simulate, variant, seed, cfg.train.warmup_steps)
            assert status == ("diverged" if edge == seen.divergence else "finished")


def test_warmup_and_boundary_noise_move_the_edges() -> None:
    sim = SimulateConfig(**TRUTH)
    cold, warm = edges(sim, "rms", 0, 0), edges(sim, "rms", 0, 1000)
    assert cold.divergence == pytest.approx(0.8) and cold.collapse == pytest.approx(0.4)
    assert warm.divergence == pytest.approx(1.6)  # warmup_gain 1: full warmup doubles the edges
    jittered = {round(edges(sim, "ln", seed, 0).divergence, 6) for seed in range(5)}
    assert len(jittered) == 5  # boundary_sd 0.3: every seed its own edge


def test_a_seeds_shared_edge_jitter_moves_every_variant_alike() -> None:
    shared = SimulateConfig(**TRUTH, seed_edge_sd=0.5)  # rms has no jitter of its own
    alone = SimulateConfig(**TRUTH)
    for seed in range(4):
        ratio = edges(shared, "ln", seed, 0).divergence / edges(alone, "ln", seed, 0).divergence
        assert edges(shared, "rms", seed, 0).divergence == pytest.approx(0.8 * ratio)
    moved = {round(edges(shared, "rms", seed, 0).divergence, 6) for seed in range(5)}
    assert len(moved) == 5 and {edges(alone, "rms", s, 0).divergence for s in range(5)} == {0.8}


def _verdict(cfg: RunConfig, variant: str) -> Verdict | None:
    run = simulate_run(cfg, variant, 0, RunSpec("sim", variant, 0, cfg).run_id)
    return verdict_of(cfg, run)


def test_too_small_an_lr_does_not_learn_yet_and_a_collapse_is_stuck() -> None:
    status, stable = judged(sim_config(**{"train.lr": 1e-7}), "ln", 0)
    assert (status, stable) == ("finished", False)
    # below the optimum the run is still falling at its end: not learned yet, not collapsed
    low = _verdict(sim_config(**{"train.lr": 1e-5}), "ln")  # heads for 3.76, above the line
    assert low is not None and low.kind is Instability.NOT_LEARNED_YET and low.miss is not None
    assert low.miss.drop > IMPROVING_DROP and low.miss.best is None
    # in the collapse band it reached the floor by mid-run and stayed: stuck, collapsed
    band = _verdict(sim_config(**{"train.lr": 0.5, "train.eval_interval": 5}), "rms")
    assert band is not None and band.kind is Instability.COLLAPSED and band.miss is not None
    assert band.miss.drop <= IMPROVING_DROP and band.miss.best is None


def test_a_watcher_prunes_at_an_evaluation() -> None:
    cfg = sim_config()
    seen: list[int] = []
    run = simulate_run(cfg, "ln", 0, "x", watch=lambda step, loss: seen.append(step) or True)
    assert run.status == "pruned" and seen == [10] and run.stop is not None


def test_a_truth_with_an_unknown_key_or_collapse_above_divergence_is_refused() -> None:
    with pytest.raises(ConfigError, match="variants"):
        sim_config(**{"runtime.simulate.variants": {"ln": {"optimum": 1.0}}})
    with pytest.raises(ConfigError, match="collapse_lr"):
        sim_config(**{"runtime.simulate.default.collapse_lr": 2.0})


def test_the_later_truth_keys_at_their_defaults_keep_every_simulated_runs_id() -> None:
    plain = sim_config()
    spelled = sim_config(**{"runtime.simulate.default.spike_rate": 0.0})
    assert RunSpec("t", "ln", 0, plain).run_id == RunSpec("t", "ln", 0, spelled).run_id
    spiky = sim_config(**{"runtime.simulate.default.spike_rate": 0.3})
    assert RunSpec("t", "ln", 0, spiky).run_id != RunSpec("t", "ln", 0, plain).run_id


def test_a_measured_shape_and_excursions_make_the_valley_and_its_tail() -> None:
    from ablate.core.simulate import mean_loss, run_excess, spike_chance, valley_loss, wall
    from ablate.core.truth import TruthConfig

    truth = TruthConfig(
        opt_lr=0.004,
        best_loss=2.0,
        shape=[(-2.0, 0.2), (0.0, 0.0), (1.0, 0.4)],
        run_sd_above=0.05,
        spike_rate=0.6,
        spike_lr=0.008,
        spike_width=0.5,
        spike_size=0.2,
    )
    assert valley_loss(truth, 0.002) == pytest.approx(2.1)  # halfway down the left side
    assert valley_loss(truth, 0.016) == pytest.approx(2.4)  # flat beyond the last point
    assert wall(truth, 0.2) == pytest.approx(0.004 * 2**0.5)  # the right side reaches 0.2 there
    assert spike_chance(truth, 0.008) == pytest.approx(0.3)
    assert mean_loss(truth, 0.008) == pytest.approx(2.4 + 0.3 * 0.2)
    sim = SimulateConfig(run_sd=0.01)
    below = [run_excess(sim, truth, 0.0001, f"r{i}") for i in range(2000)]
    above = [run_excess(sim, truth, 0.064, f"r{i}") for i in range(2000)]
    assert 0.008 < float(np.std(below)) < 0.012 and abs(float(np.mean(below))) < 0.002
    assert float(np.mean(above)) == pytest.approx(0.6 * 0.2, abs=0.02)  # nearly every chance
    assert float(np.percentile(above, 99) - np.median(above)) > 0.4  # a heavy upper tail
    with pytest.raises(ValueError, match="increasing"):
        TruthConfig(shape=[(0.0, 0.0), (0.0, 0.1)])


def test_a_measured_noise_table_sets_each_lrs_noise_and_excursions() -> None:
    from ablate.core.simulate import mean_loss, run_excess, run_sd, spike_chance
    from ablate.core.truth import TruthConfig

    truth = TruthConfig(
        opt_lr=0.004,
        best_loss=2.0,
        shape=[(-1.0, 0.1), (0.0, 0.0), (1.0, 0.3)],
        noise=[(-1.0, 0.005, 0.0, 0.01), (0.0, 0.02, 0.2, 0.1), (1.0, 0.08, 0.0, 0.16)],
        spike_rate=0.9,  # the table rules: the logistic keys are not read
    )
    sim = SimulateConfig(run_sd=0.5)
    assert run_sd(sim, truth, 0.002) == pytest.approx(0.005)
    assert run_sd(sim, truth, 0.004 * 2**0.5) == pytest.approx(0.05)  # halfway in log LR
    assert spike_chance(truth, 0.004) == pytest.approx(0.2)
    assert mean_loss(truth, 0.004) == pytest.approx(2.0 + 0.2 * 0.1)
    at = [run_excess(sim, truth, 0.004, f"r{i}") for i in range(4000)]
    assert float(np.mean(at)) == pytest.approx(0.02, abs=0.005)
    calm = [run_excess(sim, truth, 0.001, f"r{i}") for i in range(2000)]
    assert float(np.std(calm)) == pytest.approx(0.005, rel=0.1)  # flat beyond the first row
    with pytest.raises(ValueError, match="noise: at least two rows"):
        TruthConfig(noise=[(0.0, 0.01, 0.0, 0.1)])
    with pytest.raises(ValueError, match="chance in"):
        TruthConfig(noise=[(0.0, 0.01, 1.5, 0.1), (1.0, 0.01, 0.0, 0.1)])
