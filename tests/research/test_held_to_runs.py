"""The protocol replayed on a reference: every disjoint draw of seeds, the optimum estimators
against a cliff above the optimum, and the scores, on a runs.csv built by hand (where the
answers are known) and on the committed reference."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml
from conftest import REPO
from test_reference import LRS, OPT, write_runs

from ablate.core.experiment import Experiment
from ablate.core.load import load_experiment
from research import held_to_runs as held
from research import reference as ref


@pytest.fixture
def design(tmp_path: Path) -> Experiment:
    """The default protocol's sections on the hand-built lattice's range."""
    doc = yaml.safe_load((REPO / "experiments" / "ln_vs_rms.yaml").read_text())
    doc["curve"] = {"lr_min": 1.0e-3, "lr_max": 7.9e-3, "extend": 1, "seeds": [3, 4, 5, 6]}
    path = tmp_path / "protocol.yaml"
    path.write_text(yaml.safe_dump(doc))
    return load_experiment(path)


def test_every_disjoint_draw_of_curve_and_ab_seeds_is_replayed() -> None:
    draws = held.disjoint_draws(range(8), 4, 3)
    assert len(draws) == 70 * 4 and len(set(draws)) == len(draws)
    assert all(not set(d.curve) & set(d.ab) for d in draws)
    assert len(held.disjoint_draws(range(8), 2, 5)) == 28 * 6


def test_past_the_limit_the_draws_are_random_disjoint_and_the_same_each_call() -> None:
    draws = held.disjoint_draws(range(16), 4, 3, limit=500)  # 400,400 draws in all
    assert len(draws) == 500 and draws == held.disjoint_draws(range(16), 4, 3, limit=500)
    assert all(len(set(d.curve) | set(d.ab)) == 7 for d in draws)
    assert len(set(draws)) > 490  # with replacement, but few repeat
    # every seed serves as a curve seed in about a quarter of the draws
    counts = np.bincount([s for d in draws for s in d.curve], minlength=16)
    assert counts.min() > 0.15 * 500 and counts.max() < 0.35 * 500
    assert len(held.disjoint_draws(range(8), 4, 3, limit=280)) == 280  # all: not drawn
    assert held.disjoint_draws(range(8), 4, 3, limit=279) != held.disjoint_draws(range(8), 4, 3)


def test_the_seeds_decide_adds_leave_the_curve_and_ab_seeds_as_they_were() -> None:
    plain = held.disjoint_draws(range(16), 4, 3, limit=300)
    more = held.disjoint_draws(range(16), 4, 3, limit=300, n_added=6)
    assert [(d.curve, d.ab) for d in more] == [(d.curve, d.ab) for d in plain]
    assert all(len(set(d.curve) | set(d.ab) | set(d.added)) == 13 for d in more)
    assert len({d.added for d in more}) > 290  # in a random order, not sorted
    assert any(list(d.added) != sorted(d.added) for d in more)
    with pytest.raises(ValueError, match="4 \\+ 3 \\+ 2 disjoint seeds of 8"):
        held.disjoint_draws(range(8), 4, 3, n_added=2)


def test_the_usable_walks_take_the_draw_s_seeds_as_the_protocol_s_max_lr_seeds_are(
    design: Experiment,
) -> None:
    draw = held.disjoint_draws(range(16), 4, 3, limit=1)[0]
    assert design.max_lr is not None and design.max_lr.seeds == [0, 1, 2, 3, 4]
    assert held.boundary_seeds(draw, design) == [*draw.ab, *draw.curve[:2]]  # 3 A/B, 2 curve
    on_curve = design.model_copy(
        update={"max_lr": design.max_lr.model_copy(update={"seeds": [3, 4, 5, 6]})}
    )
    assert held.boundary_seeds(draw, on_curve) == list(draw.curve)
    mixed = design.model_copy(
        update={"max_lr": design.max_lr.model_copy(update={"seeds": [0, 3, 4, 5, 6]})}
    )
    assert held.boundary_seeds(draw, mixed) == [draw.ab[0], *draw.curve]


def test_holm_adjusts_one_p_of_two_as_the_report_does() -> None:
    found = held.holm_pair(np.array([0.01, 0.03, 0.6]), np.array([0.5, 0.01, 0.5]))
    assert found.tolist() == pytest.approx([0.02, 0.03, 1.0])  # 2p; max(2q, p); capped


def test_an_equivalent_verdict_is_held_to_the_tost_s_interval_as_the_report_prints_it() -> None:
    from scipy.stats import ttest_1samp

    diffs = np.array([[0.0, 0.01, 0.005, 0.002, 0.008]])
    result = ttest_1samp(diffs[0], 0.0)
    tost_high = result.confidence_interval(1 - 2 * 0.0125 / 2).high  # 98.75%
    test_high = result.confidence_interval(1 - 0.0125 / 2).high  # 99.375%
    truth = (tost_high + test_high) / 2  # inside the test's interval, outside the TOST's
    found = held.judge(diffs, truth, 0.02, 0.0125, other_p=np.array([0.9]))
    assert found.words.tolist() == ["equivalent"]
    assert not found.covered_at_level[0] and found.covered[0] == (
        truth <= result.confidence_interval(0.95).high
    )


def decided_replay(diffs: list[float], shared: list[float], target: float) -> held.Replay:
    """A replay that carries only what :func:`held.decide_replay` reads."""
    cross = {"layernorm": np.array(diffs), "rmsnorm": np.array(diffs)}  # one LR for both
    return held.Replay(
        {}, {}, {}, {}, False, np.array(diffs), cross, np.array(shared), target, {}, {}
    )


def test_decide_stops_at_the_first_look_that_decides_and_scores_its_interval() -> None:
    rng = np.random.default_rng(0)
    null = [0.03, -0.02, 0.01]  # the shared LR's comparison: nothing there
    clear = decided_replay(list(-0.1 + rng.normal(0, 0.002, 9)), null, -0.1)
    same = decided_replay(list(rng.normal(0, 0.001, 9)), null, 0.0)
    noisy = decided_replay(list(0.01 + rng.normal(0, 0.05, 9)), null, 0.5)
    found = held.decide_replay([clear, same, noisy], [3, 5, 7, 9], 0.0, 0.02)
    assert found.seeds.tolist() == [3, 3, 9]
    assert found.tuned.words.tolist() == ["different", "equivalent", "inconclusive"]
    assert found.tuned.covered.tolist() == [False, True, True]  # of the truth, 0
    assert found.covers_target.tolist() == [True, True, False]  # of Δ where each trained
    assert found.holds.tolist() == [True, False, False]  # both shared settings agree: one LR
    # at 3 seeds the report's interval (1 − 0.0125 / 2) is wider than the 95% one
    assert found.tuned.covered_at_level[2] and found.tuned.mean[0] == pytest.approx(-0.1, abs=0.01)


def crossed_replay(at_first: list[float], at_second: list[float]) -> held.Replay:
    """A replay that carries only what :func:`held.primary_replay` reads: Δ per seed at each
    norm's trained LR (1.0 and 2.0)."""
    cross = {"layernorm": np.array(at_first), "rmsnorm": np.array(at_second)}
    chosen = {"layernorm": 1.0, "rmsnorm": 2.0}
    return held.Replay(
        chosen, {}, {}, {}, False, np.array(at_first), cross, np.array([]), 0.0, {}, {}
    )


def test_the_2x2_is_judged_on_the_main_effect_at_the_primary_s_level() -> None:
    rng = np.random.default_rng(0)
    # Δ −0.1 at LayerNorm's LR and +0.1 at RMSNorm's: the setting, not the norm
    crossed = crossed_replay(
        list(-0.1 + rng.normal(0, 0.001, 9)), list(0.1 + rng.normal(0, 0.001, 9))
    )
    worse = crossed_replay([-0.1] * 3 + [-0.1001] * 6, list(-0.1 + rng.normal(0, 0.001, 9)))
    noisy = crossed_replay(list(rng.normal(0, 0.05, 9)), list(rng.normal(0, 0.05, 9)))
    # the reference's test loss at the two LRs: Δ +0.01 at 1.0 and +0.03 at 2.0, 2×2 +0.02
    tested = {"layernorm": {1.0: 2.0, 2.0: 2.0}, "rmsnorm": {1.0: 2.01, 2.0: 2.03}}
    optima = {"layernorm": 1.0, "rmsnorm": 2.0}
    truth = held.Truth(optima, 0.03, {}, tested, {}, tested)
    assert truth.main_effect == pytest.approx(0.02)
    found = held.primary_replay([crossed, worse, noisy], [3, 5, 7, 9], truth, 0.02)
    assert found.seeds.tolist() == [3, 3, 9]
    assert found.words.tolist() == ["equivalent", "exceeds", "inconclusive"]
    assert found.excludes.tolist() == [False, True, False]
    assert found.mean[0] == pytest.approx(0.0, abs=0.002)  # the tuned Δ here is +0.2
    assert found.covered.tolist() == [False, False, True]  # of +0.02, at 95%
    assert found.covers_target.tolist() == found.covered.tolist()  # each trained at the optima
    # at 9 seeds with sd 0.05 the interval at 1 − 0.025/4 is wider than the 95% one
    assert found.covered_at_level[2]
    row = held.primary_row(found, 3)
    assert row["differs from 0"] == pytest.approx(1 / 3) and row["A/B seeds, mean"] == 5.0


def test_a_cliff_drags_the_old_vertex_below_the_optimum_and_not_the_argmin(
    tmp_path: Path, design: Experiment
) -> None:
    ln = ref.load_reference(write_runs(tmp_path / "runs.csv"))["layernorm"]
    grid = held.protocol_grid(ln, (0, 1), design)
    assert grid == [2.0 ** (k / 2) for k in range(-19, -13)]  # the curve's √2 lattice points
    old = held.vertex(ln, (0, 1), grid)
    assert old.lr < OPT / 2.0**0.25  # more than a quarter octave low: the cliff's doing
    assert held.grid_argmin(ln, (0, 1), grid) == held.Chosen(OPT, False)
    assert held.refined_argmin(ln, (0, 1), grid).lr == OPT
    # the running mean steps one grid point below a cliff right above the optimum: onto the
    # flat side, at 0.05 · 0.5² = 0.0125 nats of regret, not into the cliff
    assert held.smoothed_argmin(ln, (0, 1), grid) == held.Chosen(OPT / 2**0.5, False)


def test_bagging_puts_the_optimum_between_the_points_the_resampled_seeds_choose() -> None:
    lrs = np.array([2.0 ** (k / 2) for k in range(-18, -14)])
    losses = np.array([[1.0, 1.0], [0.0, 0.6], [0.5, 0.0], [1.0, 1.0]])  # LR × seed
    curves = ref.Curves(lrs, (0, 1), losses, losses, losses > 9, losses < 9)
    bagged = held.bagged_argmin(curves, (0, 1), list(lrs))
    # seed 0 alone chooses lrs[1] (a quarter of the resamples); seed 1 and both, lrs[2]
    assert math.log2(bagged.lr) == pytest.approx(np.log2(lrs[1]) + 0.75 / 2, abs=0.03)
    assert not bagged.at_edge
    assert held.bagged_argmin(curves, (1,), list(lrs)) == held.Chosen(float(lrs[2]), False)


def test_the_scores_find_the_constructed_truth(tmp_path: Path, design: Experiment) -> None:
    curves = ref.load_reference(write_runs(tmp_path / "runs.csv"))
    found = held.score_rows(curves, design)
    assert found.decided.empty  # 8 seeds hold 4 curve seeds and not 9 A/B seeds beside them
    scores = found.rows.set_index(["estimator", "variant"])
    refined = scores.loc[("refined_argmin", "layernorm")]
    assert refined["trained at in 2^(1/4)"] == 1.0 and refined["draws"] == 280  # 4 + 3 of 8
    smoothed = scores.loc[("smoothed_argmin", "layernorm")]  # the curve stage's before
    assert smoothed["bias (log2)"] == pytest.approx(-0.5) and smoothed[
        "regret (nats)"
    ] == pytest.approx(0.0125)
    assert smoothed["usable in 2^(1/4)"] == 1.0
    assert refined["Δ mean"] == pytest.approx(-0.03, abs=0.002)
    # three pairs of a fixed 7-level pattern, not normal noise: a t interval covers most draws
    assert 0.75 <= refined["Δ CI covers"] < 1.0 and refined["different"] > 0.5
    assert refined["usable in 2^(1/4)"] == 1.0
    assert scores.loc[("vertex", "layernorm"), "estimate in 2^(1/4)"] == 0.0
    bagged = scores.loc[("bagged_argmin", "layernorm")]  # the curve stage's: no noise to bag
    assert bagged["bias (log2)"] == 0.0 and bagged["regret (nats)"] == 0.0
    truth = held.truth_rows(curves).set_index(["variant", "answer"])
    assert truth.loc[("layernorm", "LR optimum"), "value"] == OPT
    assert truth.loc[("rmsnorm", "divergence edge"), "value"] == LRS[-2]


def test_the_lr_trained_at_is_scored_beside_the_estimate(
    tmp_path: Path, design: Experiment
) -> None:
    curves = ref.load_reference(write_runs(tmp_path / "runs.csv"))

    def between(c: ref.Curves, seeds: object, grid: object) -> held.Chosen:
        return held.Chosen(OPT * 2.0**0.3, False)  # nearest 2^(1/4) point: OPT · 2^(1/4)

    estimators = {"between": ("0.3 octave above the optimum", between)}
    scores = held.score_rows(curves, design, estimators=estimators).rows.set_index("variant")
    row = scores.loc["layernorm"]
    assert row["estimate in 2^(1/4)"] == 0.0 and row["trained at in 2^(1/4)"] == 1.0
    assert row["bias (log2)"] == pytest.approx(0.3)  # of the estimate, as it was made
    assert row["regret (nats)"] > 0  # at the point trained at, a step above OPT


def test_held_out_seeds_are_replayed_against_the_reference_s_answers(
    tmp_path: Path, design: Experiment
) -> None:
    runs = write_runs(tmp_path / "runs.csv")
    fresh = pd.read_csv(runs)
    fresh["seed"] += 100  # the same noiseless curves on seeds the reference does not have
    fresh.to_csv(tmp_path / "fresh.csv", index=False)
    curves = ref.load_reference(runs)
    fresh = ref.load_reference(tmp_path / "fresh.csv")
    pooled = ref.load_reference([runs, tmp_path / "fresh.csv"])
    chosen = {"bagged_argmin": held.OPTIMA["bagged_argmin"]}  # the rows it reads; CI's time
    truth = held.reference_truth(curves, ref.BAND)
    found = held.held_out(truth, fresh, pooled, design, estimators=chosen)
    assert found.fresh_seeds == tuple(range(100, 108)) and found.every == 16
    assert found.answer_seeds == tuple(range(8))  # scored against the reference's seeds
    own = found.fresh_truth.set_index(["variant", "answer"])  # the held-out seeds' own answers
    assert own.loc[("layernorm", "LR optimum"), "value"] == OPT
    assert found.pooled_truth.equals(held.truth_rows(pooled))
    assert set(found.pooled_scores.rows["variant"]) == {"layernorm", "rmsnorm"}
    assert ("layernorm", "8 seeds against the other 8", 6435, "100.0%") in {
        tuple(row) for row in found.repeats.itertuples(index=False)
    }
    text = held.held_out_markdown(found, design)
    bagged = {row[2:5] for row in table_rows(text) if row[:2] == ("bagged_argmin", "layernorm")}
    assert bagged == {("280", "100.0%", "100.0%"), ("1000", "100.0%", "100.0%")}  # both in 2^(1/4)
    assert ("layernorm", "8 seeds against the other 8", "6435", "100.0%") in table_rows(text)
    with pytest.raises(SystemExit) as stop:  # before anything is scored
        held.main([str(runs), "--held-out", str(runs)])
    assert stop.value.code == 2


def test_each_pool_is_scored_against_the_answers_of_the_others(
    tmp_path: Path, design: Experiment
) -> None:
    runs = write_runs(tmp_path / "runs.csv")
    pools = []
    for shift in (0, 100, 200):  # the same noiseless curves on three pools of seeds
        frame = pd.read_csv(runs)
        frame["seed"] += shift
        if shift == 100:  # its runs written RMSNorm first: Δ keeps the protocol's order
            frame = frame.iloc[::-1]
        frame.to_csv(tmp_path / f"pool{shift}.csv", index=False)
        pools.append(tmp_path / f"pool{shift}.csv")
    rows = held.rotation_rows(pools, design)
    assert rows["curve and A/B seeds"].tolist()[::2] == [
        "0–7",
        "100–107",
        "200–207",
        "each pool in turn",
    ]
    assert rows["answer from"].tolist()[:6:2] == [
        "100–107, 200–207",
        "0–7, 200–207",
        "0–7, 100–107",
    ]
    assert rows["variant"].tolist()[:4] == ["layernorm", "rmsnorm"] * 2  # the protocol's order
    assert (rows["trained at in 2^(1/4)"] == 1.0).all() and rows["draws"].tolist()[-2:] == [
        840,
        840,
    ]
    assert rows["answer's optimum"].iloc[0] == f"{OPT:.3g}"
    assert rows["answer's Δ"].iloc[:6].nunique() == 1  # one sign whichever file lists which first
    assert (rows["Δ CI covers"] > 0.5).all()  # against an answer of the same sign
    assert "| 0–7 " in held.rotation_markdown(rows) and "100.0%" in held.rotation_markdown(rows)


def test_a_table_whose_norms_are_not_the_protocol_s_is_refused(tmp_path: Path) -> None:
    doc = yaml.safe_load((REPO / "experiments" / "ln_vs_rms.yaml").read_text())
    doc["variants"] = {"layernorm": doc["variants"]["layernorm"], "dyt": {"model.norm.kind": "dyt"}}
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump(doc))
    other = load_experiment(tmp_path / "protocol.yaml")
    with pytest.raises(ValueError, match=r"norms \['layernorm', 'rmsnorm'\], the protocol's"):
        held.loaded(write_runs(tmp_path / "runs.csv"), other)


def test_seeds_are_spanned_where_they_run_on() -> None:
    assert held.span([*range(16, 24), *range(8)]) == "0–7, 16–23"
    assert held.span([1, 2, 5]) == "1, 2, 5" and held.span([3, 4, 5]) == "3–5"


def test_the_reference_repeats_its_own_optimum_where_the_runs_carry_no_noise(
    tmp_path: Path,
) -> None:
    curves = ref.load_reference(write_runs(tmp_path / "runs.csv"))
    rows = held.repeat_rows(curves, 2)
    assert rows["optimum from"].tolist()[:3] == [
        "4 seeds against the other 4",
        "2 seeds against the other 6",
        "2 seeds against all 8",
    ]
    assert rows["splits"].tolist()[:3] == [35, 28, 28]  # halves holding seed 0; C(8, 2)
    assert set(rows["within 2^(1/4)"]) == {"100.0%"}


def test_every_set_of_curve_seeds_is_scored_where_the_runs_carry_no_noise(
    tmp_path: Path, design: Experiment
) -> None:
    curves = ref.load_reference(write_runs(tmp_path / "runs.csv"))
    rows = held.curve_set_rows(curves, design)
    assert rows["optimum from"].tolist()[:2] == [
        "the curve stage on 4 seeds against all 8",
        "the curve stage on 4 seeds against the other 4",
    ]
    assert rows["splits"].tolist() == [70] * 4 and set(rows["within 2^(1/4)"]) == {"100.0%"}
    text = held.repeat_markdown(curves, design)  # each norm's rows together
    assert text.index("| rmsnorm") > text.rindex("| layernorm")


def table_rows(markdown: str) -> set[tuple[str, ...]]:
    """The rows of the markdown tables in ``markdown``, as tuples of their stripped cells (the
    rules under the headers left out: their width follows the other rows)."""
    lines = [line for line in markdown.splitlines() if line.startswith("|")]
    rows = {tuple(cell.strip() for cell in line.strip("|").split("|")) for line in lines}
    return {row for row in rows if not all(set(cell) <= set(":-") for cell in row)}


def test_the_committed_tables_are_what_the_harness_gives_on_the_committed_reference() -> None:
    curves = ref.load_reference([REPO / p for p in ref.REFERENCE_RUNS])
    design = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    truth = held.truth_markdown(held.truth_rows(curves))
    chosen = {"bagged_argmin": held.OPTIMA["bagged_argmin"]}  # the stage's; CI's time
    scores = held.scores_text(held.score_rows(curves, design, estimators=chosen), design)
    committed = (REPO / "reports" / "reference" / "held_to_runs.md").read_text(encoding="utf-8")
    docs = (REPO / "docs" / "stability-and-search.md").read_text(encoding="utf-8")
    assert truth in committed and truth in docs
    found = table_rows(scores) - table_rows(committed)
    assert len(table_rows(scores)) == 7 and not found, found  # 3 headers, 2 rows, 2 decide's
    assert held.looks(len(design.seeds), design.decide) == [3, 5, 7, 9]
    assert held.primary_caption(design) in committed  # the lines over decide's rows
    assert held.decide_caption(design) in committed
    assert not table_rows(scores) - table_rows(docs)
    repeat = held.repeat_markdown(curves, design)
    assert repeat in committed and repeat in docs


def test_the_committed_held_out_table_is_what_the_harness_gives() -> None:
    paths = [REPO / p for p in (*ref.REFERENCE_RUNS, *ref.HELD_OUT_RUNS)]
    curves = ref.load_reference(paths[: len(ref.REFERENCE_RUNS)])
    fresh = ref.load_reference(paths[len(ref.REFERENCE_RUNS) :])
    design = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    chosen = {"bagged_argmin": held.OPTIMA["bagged_argmin"]}  # the stage's; CI's time
    truth = held.reference_truth(curves, ref.BAND)
    found = held.held_out(truth, fresh, ref.load_reference(paths), design, estimators=chosen)
    text = held.held_out_markdown(found, design)
    committed = (REPO / "reports" / "reference" / "held_to_runs.md").read_text(encoding="utf-8")
    docs = (REPO / "docs" / "stability-and-search.md").read_text(encoding="utf-8")
    assert found.fresh_seeds == tuple(range(16, 24)) and found.every == 24
    assert len(table_rows(text)) > 20  # two tables of answers, bagged's 2 rows
    assert not table_rows(text) - table_rows(committed), table_rows(text) - table_rows(committed)
    assert not table_rows(text) - table_rows(docs)


def test_the_committed_rotation_table_is_what_the_harness_gives() -> None:
    pools = [REPO / p for p in (*ref.REFERENCE_RUNS, *ref.HELD_OUT_RUNS)]
    design = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    text = held.rotation_markdown(held.rotation_rows(pools, design))
    committed = (REPO / "reports" / "reference" / "held_to_runs.md").read_text(encoding="utf-8")
    docs = (REPO / "docs" / "stability-and-search.md").read_text(encoding="utf-8")
    assert text in committed and text in docs


def test_the_committed_shape_table_is_the_reference_s() -> None:
    curves = ref.load_reference([REPO / p for p in ref.REFERENCE_RUNS])
    shape = held.shape_rows(curves)
    committed = (REPO / "reports" / "reference" / "held_to_runs.md").read_text(encoding="utf-8")
    for row in shape.itertuples():
        cells = f"| {row.statistic:<28} | {row.reference:11.4f} | {row[3]:6.4f} | {row[4]:7.4f} |"
        assert cells in committed, cells


def test_every_split_s_optima_are_the_reference_s_own_argmins() -> None:
    curves = ref.load_reference(REPO / ref.REFERENCE_RUNS[0])["layernorm"]  # seeds 0–7
    seeds = list(curves.seeds)
    for size, once, ways in ((4, True, 35), (3, False, 56)):  # C(7, 3); C(8, 3)
        chosen, rest = held.split_optima(curves, size, once=once, block=10)
        taken = [w for w in itertools.combinations(seeds, size) if not once or seeds[0] in w]
        assert len(chosen) == len(rest) == len(taken) == ways
        for found, other, way in zip(chosen, rest, taken, strict=True):
            assert curves.lrs[found] == ref.optimum(curves, way)
            assert curves.lrs[other] == ref.optimum(curves, [s for s in seeds if s not in way])
    assert len(set(chosen.tolist())) > 1  # the seeds disagree: not one answer throughout


def _scores(share: float, covers: float) -> held.Scores:
    """Scores of one study whose bagged shares are all ``share`` and whose decided
    coverage is ``covers``; another estimator's rows beside them at 0."""
    rows = pd.DataFrame(
        [
            {
                "estimator": e,
                "what": "",
                "variant": v,
                **dict.fromkeys(held.NORM_BARS + held.PAIR_BARS, x),
            }
            for e, x in (("bagged_argmin", share), ("vertex", 0.0))
            for v in ("layernorm", "rmsnorm")
        ]
    )
    decided = pd.DataFrame(
        [
            {"estimator": e, "what": "", **dict.fromkeys(held.DECIDED_BARS, x)}
            for e, x in (("bagged_argmin", covers), ("vertex", 0.0))
        ]
    )
    primary = pd.DataFrame(
        [
            {"estimator": e, "what": "", **dict.fromkeys(held.PRIMARY_BARS, x)}
            for e, x in (("bagged_argmin", 1 - covers), ("vertex", 0.0))
        ]
    )
    return held.Scores(rows, decided, primary)


def test_the_spread_over_studies_gives_the_mean_sd_and_standard_error_of_each_share() -> None:
    found = [_scores(0.8, 0.9), _scores(1.0, 0.9), _scores(0.9, 0.9)]
    frame = held.spread_rows(found)
    bars = len(held.NORM_BARS) * 2 + len(held.PAIR_BARS)
    assert len(frame) == bars + len(held.DECIDED_BARS) + len(held.PRIMARY_BARS)
    first = frame.iloc[0].to_dict()
    assert first == {
        "replay": "one look",
        "variant": "layernorm",
        "share": "trained at in 2^(1/4)",
        "mean": "90.0%",
        "SD over studies": "10.0%",
        "SE of the mean": f"{0.1 / math.sqrt(3):.1%}",
    }
    decided = frame[frame["replay"] == "tuned Δ, `decide:` before"]
    assert set(decided["variant"]) == {"both"} and set(decided["SD over studies"]) == {"0.0%"}
    primary = frame[frame["replay"] == "the 2×2, `decide:` now"]
    assert primary["share"].tolist() == list(held.PRIMARY_BARS)
    assert set(primary["mean"]) == {"10.0%"}
    means = held.mean_scores(found)
    bagged = means.rows[means.rows["estimator"] == "bagged_argmin"]
    assert bagged["different"].tolist() == pytest.approx([0.9, 0.9])
    assert means.decided["Δ CI covers"].tolist() == pytest.approx([0.9, 0.0])
    assert means.primary["CI covers"].tolist() == pytest.approx([0.1, 0.0])


def test_each_simulated_study_is_drawn_afresh_and_scored_against_the_simulator_s_truth() -> None:
    from research import fit_reference as fit

    section = yaml.safe_load((REPO / fit.FITTED).read_text(encoding="utf-8"))
    design = load_experiment(REPO / "experiments" / "ln_vs_rms.yaml")
    base = load_experiment(REPO / held.REFERENCE_DESIGN).base
    reference = held.loaded(REPO / ref.REFERENCE_RUNS[0], design)
    lattice = [float(lr) for lr in reference["layernorm"].lrs]
    chosen = {"bagged_argmin": held.OPTIMA["bagged_argmin"]}
    studies = [
        fit.simulated_curves(base, section, lattice, range(8), list(design.variants), k)
        for k in (0, 1)
    ]
    found = held.simulated_scores(
        section, design, base, lattice, studies, draws=40, estimators=chosen
    )
    assert len(found) == 2 and all(len(f.rows) == 2 for f in found)
    assert all(f.decided.empty for f in found)  # 8 seeds do not hold decide:'s 9 and 4
    shares = [f.rows.set_index("variant")["regret (nats)"] for f in found]
    assert not shares[0].equals(shares[1])  # two draws of the simulator, not one twice
    spread = held.spread_rows(found)
    assert spread["share"].tolist() == [*held.NORM_BARS, *held.NORM_BARS, *held.PAIR_BARS]
    assert spread["variant"].tolist() == ["layernorm"] * 2 + ["rmsnorm"] * 2 + ["both"] * 2


def test_the_tost_is_statsmodels_ttost_paired_row_by_row() -> None:
    from statsmodels.stats.weightstats import ttost_paired

    rng = np.random.default_rng(1)
    rows = rng.normal(rng.uniform(-0.03, 0.03, size=(40, 1)), 0.012, size=(40, 7))
    ours = held.tost_p(rows, 0.02)
    for row, p in zip(rows, ours, strict=True):
        assert p == pytest.approx(ttost_paired(row, np.zeros_like(row), -0.02, 0.02)[0], rel=1e-9)
    words = held.words(np.array([0.001, 0.6, 0.6]), np.array([0.5, 0.01, 0.2]), 0.05)
    assert list(words) == ["different", "equivalent", "inconclusive"]
