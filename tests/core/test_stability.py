"""The stability criterion, LR sensitivity, and the check of seed brackets against other runs."""

from __future__ import annotations

import math

import pytest

from ablate.core.boundary import SeedBoundary, bracket_seed
from ablate.core.config import StabilityConfig
from ablate.core.stability import (
    IMPROVING_DROP,
    DivergenceRule,
    Instability,
    Observation,
    Stop,
    StopKind,
    Verdict,
    below_window,
    clipped_loss,
    contradictions,
    criterion_text,
    final_loss_verdict,
    lr_sensitivity,
)

L0 = math.log(256)
UNIGRAM = 3.25  # about the default text's unigram cross-entropy


def _verdict(
    curve: list[float], final_val: float, warmup: int = 5, **criterion: object
) -> Stop | Verdict:
    """Apply the whole criterion to a constructed train-loss curve and final val loss: where
    the divergence rule stops the run, else the final loss's verdict."""
    cfg = StabilityConfig(window=2, **criterion)
    rule = DivergenceRule(cfg, L0, warmup_steps=warmup)  # what the training callback applies
    for step, loss in enumerate(curve, start=1):
        stop = rule.check(step, loss)
        if stop is not None:
            return stop
    return final_loss_verdict([final_val], cfg, L0, UNIGRAM, len(curve))


def _judge(
    curve: list[float], final_val: float, warmup: int = 5, **criterion: object
) -> tuple[bool, str | None]:
    """(stable, reason) of :func:`_verdict`."""
    found = _verdict(curve, final_val, warmup, **criterion)
    if isinstance(found, Stop):
        return False, found.reason
    return found.stable, found.reason


def test_criterion_on_constructed_loss_curves() -> None:
    healthy = [5.56, 5.0, 4.2, 3.6, 3.1, 2.8, 2.6, 2.5]
    assert _judge(healthy, 2.55) == (True, None)
    nan = [5.5, 5.0, math.nan, 3.0]
    stop = _verdict(nan, 3.0)
    assert isinstance(stop, Stop) and (stop.kind, stop.step) == (StopKind.NON_FINITE, 3)
    explosion = [5.5, 4.0, 3.5, 3.2, 3.0, 2.9, 7.5, 40.0]
    stop = _verdict(explosion, 2.9)
    assert isinstance(stop, Stop) and (stop.kind, stop.step) == (StopKind.ABOVE_THRESHOLD, 8)
    assert stop.threshold == pytest.approx(L0 + 0.5)  # ℓ0 + 0.5: step 1 was below ℓ0
    assert stop.loss == pytest.approx((7.5 + 40.0) / 2) and stop.window == stop.steps == 2
    plateau = [5.55, 5.54, 5.53, 5.52, 5.50, 5.49, 5.48, 5.48]
    verdict = _verdict(plateau, 5.47)
    assert not verdict.stable and verdict.kind is Instability.COLLAPSED
    assert verdict.miss is not None and (verdict.miss.floor, verdict.miss.unigram) == (3.25, True)
    spike_in_warmup = [5.5, 9.0, 4.0, 3.5, 3.2, 3.0, 2.9, 2.8]  # tolerated during warmup
    assert _judge(spike_in_warmup, 2.8) == (True, None)
    one_batch_spike = [5.5, 4.0, 3.5, 3.2, 3.0, 2.9, 7.0, 2.9]  # above the threshold once
    assert _judge(one_batch_spike, 2.9) == (True, None)


def test_a_run_that_ends_at_the_unigram_floor_collapsed() -> None:
    learned_bytes = [5.56, 4.5, 3.8, 3.4, 3.3, 3.28, 3.27, 3.27]  # never diverges
    stable, reason = _judge(learned_bytes, 3.27)
    assert not stable and reason == (  # the wording run summaries store, byte for byte
        "collapsed: final val loss 3.27 not below the unigram floor 3.25 − 0.1"
    )
    assert _judge(learned_bytes, 3.15)[0] is False  # the margin: 3.15 is not below 3.15
    assert _judge(learned_bytes, 3.14) == (True, None)
    stable, reason = _judge(learned_bytes, 3.27, floor="initial")  # the old criterion
    assert stable and reason is None
    above_l0 = _verdict(learned_bytes, 5.5, floor="initial").miss
    assert above_l0 is not None and not above_l0.unigram and above_l0.floor == pytest.approx(L0)


def test_a_collapsed_run_says_whether_it_learned_and_lost_it_is_still_improving_or_stuck() -> None:
    cfg = StabilityConfig()  # the line: the unigram floor 3.25 − 0.1 = 3.15

    def verdict(val_losses: list[float]) -> Verdict:
        return final_loss_verdict(val_losses, cfg, L0, UNIGRAM, 100)

    improving = verdict([5.0, 4.2, 3.7, 3.3])
    assert improving.kind is Instability.NOT_LEARNED_YET and improving.miss is not None
    assert (improving.miss.final, improving.miss.best) == (3.3, None)
    assert improving.miss.drop == pytest.approx(0.4)
    assert improving.reason == (  # the wording run summaries store, byte for byte
        "not learned yet: final val loss 3.3 not below the unigram floor 3.25 − 0.1, "
        "still improving (0.4 over its last evaluation)"
    )
    stuck = verdict([5.0, 3.6, 3.3, 3.295])
    assert stuck.kind is Instability.COLLAPSED and stuck.miss is not None
    assert (stuck.miss.final, stuck.miss.best) == (3.295, None)
    lost = verdict([5.0, 3.0, 2.9, 3.3])  # it learned, then went back to the floor
    assert lost.kind is Instability.COLLAPSED and lost.miss is not None
    assert (lost.miss.final, lost.miss.best) == (3.3, 2.9)
    assert lost.reason == (
        "collapsed: learned (best val loss 2.9), then final val loss 3.3 not below the "
        "unigram floor 3.25 − 0.1"
    )
    assert verdict([5.0, math.nan]).kind is Instability.NON_FINITE
    assert final_loss_verdict([5.0, 3.1], cfg, L0, UNIGRAM, 100).stable  # below the line
    assert IMPROVING_DROP == 0.01


def test_untrained_loss_above_ln_vocab_is_not_a_divergence_without_warmup() -> None:
    small_model = [5.558, 5.557, 5.55, 5.54, 5.52, 5.4, 5.1, 4.6]  # step 1 above ℓ0 = 5.545
    assert _judge(small_model, 3.0, warmup=0) == (True, None)
    assert _judge(small_model, 3.0, warmup=0, threshold=L0)[0] is False  # the old default


def test_clipped_loss_and_sensitivity() -> None:
    assert clipped_loss(None, L0) == L0 and clipped_loss(math.nan, L0) == L0
    assert clipped_loss(9.0, L0) == L0 and clipped_loss(2.0, L0) == 2.0
    losses = [3.0, 2.0, 2.5, math.nan]
    assert lr_sensitivity(losses, L0) == pytest.approx((3.0 + 2.0 + 2.5 + L0) / 4 - 2.0)
    assert lr_sensitivity([2.0, 2.0], L0) == 0.0


def test_criterion_text_names_the_settings() -> None:
    # the wording is the point: study manifests store this text, byte for byte
    assert criterion_text(StabilityConfig(final_margin=0.25)) == (
        "unstable if the train loss becomes non-finite, or the mean train loss of 5 steps "
        "exceeds the start loss max(ℓ0, step-1 loss) + 0.5 after warmup (diverged), or the "
        "final val loss is not below the unigram floor − 0.25 (collapsed)"
    )
    one = criterion_text(
        StabilityConfig(threshold=7, after_warmup=False, window=1, floor="initial")
    )
    assert one == (
        "unstable if the train loss becomes non-finite, or the train loss exceeds 7 at any "
        "step (diverged), or the final val loss is not below ℓ0 = ln(vocab) − 0.1 (collapsed)"
    )


def _profile(stable_between: tuple[float, float], hole: float | None = None):  # noqa: ANN202
    """A synthetic stability profile: stable inside the window, except at the hole."""
    low, high = stable_between
    return lambda lr: low <= lr <= high and not (hole and math.isclose(lr, hole))


def _bracket(seed: int, edge: float) -> SeedBoundary:
    """The seed's bracket on the default lattice around a true edge."""
    return bracket_seed(lambda lr: lr <= edge, seed, 1e-3, (1e-6, 100.0))


def test_contradictions_find_a_hole_below_a_seeds_bracket_and_stability_above_it() -> None:
    lrs = [1e-3 * 2**i for i in range(12)]  # 0.001 ... 2.048
    probe = _profile((1e-3, 0.3), hole=0.032)  # a loss spike at 0.032 only
    bounds = [_bracket(0, 0.3)]
    assert bounds[0].last_stable <= 0.3 < bounds[0].first_unstable
    runs = [Observation(f"r{i}", lr, probe(lr), "sweep", 0) for i, lr in enumerate(lrs)]
    found = contradictions(bounds, runs)
    assert [(o.lr, o.stable) for o in found] == [(0.032, False)]  # the hole, nothing else
    monotone = [Observation(o.run_id, o.lr, o.lr <= 0.3, "sweep", 0) for o in runs]
    assert contradictions(bounds, monotone) == []
    back = [
        *monotone,
        Observation("x", 2.0, False, "max_lr", 1),
        Observation("y", 3.0, True, "max_lr", 1),
    ]
    bounds = [_bracket(0, 0.3), _bracket(1, 1.9)]  # seed 1 failed at 2.0, then stable at 3.0
    assert [o.run_id for o in contradictions(bounds, back)] == ["y"]


def test_each_seed_is_held_against_its_own_bracket_not_the_worst_seeds() -> None:
    bounds = [_bracket(0, 0.1), _bracket(1, 0.4)]
    # seed 1 stable at 0.3: above seed 0's bracket, inside its own: no contradiction
    seen = [Observation("a", 0.3, True, "sweep", 1), Observation("b", 0.3, False, "sweep", 0)]
    assert contradictions(bounds, seen) == []
    # seed 1 unstable at 0.2, below its own last stable LR (and above its stable probes): a hole
    hole = [Observation("p", 0.01, True, "max_lr", 1), Observation("c", 0.2, False, "sweep", 1)]
    assert [o.run_id for o in contradictions(bounds, hole)] == ["c"]
    # a seed not bracketed (the search's): a hole only below every bracketed seed's last stable
    probes = [Observation(f"p{s}", 0.01, True, "max_lr", s) for s in (0, 1)]
    other = [Observation("d", 0.2, False, "search", 7), Observation("e", 0.05, False, "search", 7)]
    assert [o.run_id for o in contradictions(bounds, probes + other)] == ["e"]


def test_runs_below_the_window_did_not_learn_yet_and_are_not_holes() -> None:
    bounds = [_bracket(0, 0.1)]
    runs = [
        Observation("low", 1e-4, False, "sweep", 0),  # too small to learn in the budget
        Observation("ok", 1e-3, True, "sweep", 0),
        Observation("hole", 3e-3, False, "sweep", 0),  # between two stable LRs: a hole
        Observation("ok2", 0.01, True, "sweep", 0),
        Observation("blew", 5e-4, False, "sweep", 0, diverged=True),  # a divergence is a hole
        Observation("other", 2e-4, False, "search", 7),  # no stable run of its own: any seed's
    ]
    assert {o.run_id for o in below_window(runs)} == {"low", "other"}
    assert [o.run_id for o in contradictions(bounds, runs)] == ["blew", "hole"]
