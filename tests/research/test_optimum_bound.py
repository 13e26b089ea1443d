"""How closely the optimum can be located: the truth table around each fitted optimum, and
the three choices scored on a hand-built reference whose optimum is known."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from conftest import REPO
from test_reference import LRS, OPT, loss, write_runs

from ablate.core.load import load_experiment
from ablate.core.simulate import noise_row
from ablate.core.truth import SimulateConfig
from research import fit_reference as fit
from research import held_to_runs as held
from research import optimum_bound as bound
from research import reference as ref


def test_the_truth_table_shows_each_optimum_lowest_with_its_excursions_share() -> None:
    section = yaml.safe_load((REPO / fit.FITTED).read_text())
    sim = SimulateConfig(**section)
    lattice = [sim.truth("rmsnorm").opt_lr * 2.0 ** (k / 4) for k in range(-4, 5)]
    optima = {"rmsnorm": lattice[4]}
    rows = bound.truth_rows(section, lattice, optima).set_index("log2(LR / optimum)")
    assert list(rows.index) == [f"{k / 4:+.2f}" for k in range(-4, 5)]  # NEAR octaves
    assert rows.loc["+0.00", "expected loss above the optimum's"] == 0.0
    above = rows["expected loss above the optimum's"].drop("+0.00")
    assert (above > 0).all()  # the fitted truth's optimum is the lowest lattice point
    _, chance, size = noise_row(sim.truth("rmsnorm"), lattice[5])
    _, at_opt_chance, at_opt_size = noise_row(sim.truth("rmsnorm"), lattice[4])
    assert rows.loc["+0.25", "of it, excursions"] == pytest.approx(
        chance * size - at_opt_chance * at_opt_size
    )
    parts = rows["of it, the valley"] + rows["of it, excursions"]
    assert parts.to_numpy() == pytest.approx(rows["expected loss above the optimum's"].to_numpy())


def test_every_choice_finds_a_noiseless_optimum_below_a_cliff(
    tmp_path: Path,
) -> None:
    doc = yaml.safe_load((REPO / "experiments" / "ln_vs_rms.yaml").read_text())
    doc["curve"] = {"lr_min": 1.0e-3, "lr_max": 7.9e-3, "extend": 1, "seeds": [3, 4, 5, 6]}
    (tmp_path / "protocol.yaml").write_text(yaml.safe_dump(doc))
    design = load_experiment(tmp_path / "protocol.yaml")
    study = ref.load_reference(write_runs(tmp_path / "runs.csv"))
    assert bound.lattice_argmin(study["layernorm"], (0, 5)) == OPT
    # the runs' own curve, the top LR's divergence (selected at ℓ0 = 5.5) included
    templates = {"layernorm": lambda lr: 5.5 if lr >= LRS[-1] else loss(lr, 0)}
    scored = bound.bound_rows([study], {"layernorm": OPT}, design, [2, 4], 3, templates)
    assert scored["draws"].tolist() == [3, 3] and scored["its SE"].isna().all()  # 1 study
    assert scored["every lattice point"].tolist() == [1.0, 1.0]
    # a cliff right above the optimum; no noise: every resample of the seeds agrees
    assert scored["the curve stage, trained at"].tolist() == [1.0, 1.0]
    assert scored["as estimated"].tolist() == [1.0, 1.0]
    assert scored["the shape known"].tolist() == [1.0, 1.0]
    grid = held.protocol_grid(study["layernorm"], (0, 1), design)
    assert bound.curve_stage(study["layernorm"], (0, 1), grid) == pytest.approx(OPT)


def test_the_known_shape_is_moved_to_where_the_runs_put_it(tmp_path: Path) -> None:
    study = ref.load_reference(write_runs(tmp_path / "runs.csv"))["layernorm"]
    grid = [float(lr) for lr in study.lrs[2:12]]

    def moved(lr: float) -> float:
        """The runs' curve 0.1 nats higher, its optimum half an octave up (at OPT·√2)."""
        return loss(lr / 2**0.5, 0) + 0.1

    shaped = bound.shifted_shapes(moved, grid)
    shifts, shapes = shaped
    assert len(shifts) == 2 * bound.SHIFT_RANGE / bound.SHIFT_STEP + 1
    assert shapes.shape == (len(shifts), len(grid))
    # the match moves the template half an octave down, whatever its level
    assert shifts[bound.shape_match(study, (3, 7), grid, shapes)] == -0.5
    assert shifts[bound.shape_match(study, (0,), grid[:6], shapes[:, :6])] == -0.5
    # and the template's optimum with it: where the runs have theirs
    assert bound.matched_optimum(study, (3, 7), grid, shaped, OPT * 2**0.5) == pytest.approx(OPT)


def test_seed_counts_beyond_a_study_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        bound.main(["--seeds", "4", str(bound.SEEDS_PER_STUDY + 1)])
    assert stopped.value.code == 2
    assert "--seeds: each between 1 and 64" in capsys.readouterr().err  # the refusal, in words
