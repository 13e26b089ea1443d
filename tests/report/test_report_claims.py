"""A published claim measured on matched seeds: paired effects, intervals and the verdict."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from ablate.core.studies import StoredStudies
from ablate.report.analysis import mean_difference
from ablate.report.claims import claim_row, claims_section, judge, probe_values, verdict_text
from ablate.report.load import StoredExperiment


def _values(shift: float, noise: float, ratio: bool = False, seeds: int = 6) -> pd.DataFrame:
    g = np.random.default_rng(0)
    rows = []
    for seed in range(seeds):
        base = 2.0 + 0.1 * g.standard_normal()
        other = base * math.exp(shift) if ratio else base + shift
        other += noise * g.standard_normal()
        for variant, value in (("a", base), ("b", other)):
            rows.append((f"{variant}{seed}", variant, seed, "finished", True, 3e-3, value, value))
    columns = ["run_id", "variant", "seed", "status", "stable", "lr", "final_val_loss"]
    columns.append("resid_rms_growth")
    return pd.DataFrame(rows, columns=columns)


def _claim(metric: str = "final_val_loss", direction: str = "lower") -> dict:
    return {
        "source": "S",
        "statement": "b is better",
        "variant": "b",
        "baseline": "a",
        "metric": metric,
        "direction": direction,
    }


def test_a_clear_effect_agrees_or_disagrees_by_the_predicted_direction() -> None:
    values = _values(-0.05, 0.005)
    lower = claim_row(_claim(), values)
    assert lower["verdict"] == "agrees" and lower["pairs"] == 6 and lower["lr"] == 3e-3
    assert lower["ci_high"] < 0 and lower["effect"] == pytest.approx(-0.05, abs=0.01)
    assert claim_row(_claim(direction="higher"), values)["verdict"] == "disagrees"


def test_a_ratio_is_averaged_on_the_log_scale_and_reported_as_a_ratio() -> None:
    row = claim_row(_claim("resid_rms_growth"), _values(math.log(0.5), 0.0, ratio=True))
    assert row["effect"] == pytest.approx(0.5) and row["verdict"] == "agrees"


def test_an_unclear_effect_is_inconclusive_with_the_seeds_that_would_decide_it() -> None:
    row = claim_row(_claim(), _values(-0.01, 0.02))
    assert row["verdict"] == "inconclusive" and row["more_seeds"] >= 1 and row["effect"] < 0
    more = f"about {row['more_seeds']} more would detect the measured effect"
    assert verdict_text(row) == f"inconclusive with 6 seeds ({more})"
    against = claim_row({**_claim(), "direction": "higher"}, _values(-0.01, 0.02))
    assert (
        verdict_text(against) == f"inconclusive with 6 seeds ({more}, which runs against the claim)"
    )
    zero = mean_difference(pd.Series([0.1, -0.1, 0.0]))
    assert judge("lower", zero, np.array([0.1, -0.1, 0.0])) == ("inconclusive", None)


def test_only_seeds_both_finished_are_paired_and_the_rest_are_counted() -> None:
    values = _values(-0.05, 0.005)
    values.loc[values["run_id"] == "b0", "status"] = "diverged"
    values.loc[values["run_id"].isin(["a1", "b2"]), "stable"] = False  # collapsed: still paired
    row = claim_row(_claim(), values)
    assert row["pairs"] == 5 and row["not_finished"] == 1 and row["collapsed"] == 2
    assert row["ci_high"] < 0 and row["verdict"] == "no verdict"  # as the report's comparisons
    assert verdict_text(row) == (
        "no verdict: runs diverged (b 1 of 6, a 0 of 6; the rest are paired); "
        "2 of the runs did not learn"
    )
    values.loc[values["run_id"] == "b0", "status"] = "finished"
    assert verdict_text(claim_row(_claim(), values)) == "agrees; 2 of the runs did not learn"


def test_probe_values_read_each_runs_last_probe_step() -> None:
    rows = []
    for step, scale in ((1, 100.0), (10, 1.0)):
        for layer in range(3):
            site = f"blocks.{layer}"
            rows += [
                ("r", step, "resid_rms", site, layer, scale * (1 + layer)),
                ("r", step, "resid_kurtosis", site, layer, scale * 2.0),
            ]
        rows += [
            ("r", step, "attn_logit_max", "blocks.0.attn", 0, scale * 5.0),
            ("r", step, "logsumexp_mean", "head", -1, -scale * 3.0),
        ]
    columns = ["run_id", "step", "quantity", "site", "layer", "value"]
    found = probe_values(pd.DataFrame(rows, columns=columns)).loc["r"]
    assert found["resid_rms_growth"] == 3.0 and found["resid_kurtosis_max"] == 2.0
    assert found["attn_logit_max"] == 5.0 and found["logsumexp_abs"] == 3.0
    assert math.isnan(found["logit_max_abs"])
    assert list(probe_values(pd.DataFrame()).columns) == list(found.index)


def _stored(main: pd.DataFrame, tuned: pd.DataFrame) -> StoredExperiment:
    empty = pd.DataFrame()
    return StoredExperiment(
        manifest={},
        runs=main,
        main=main,
        tuned=tuned,
        crossover=empty,
        metrics=empty,
        tuned_metrics=empty,
        probes=empty,
        studies=StoredStudies(),
        missing=[],
        convert=empty,
        convert_metrics=empty,
        inference=empty,
        configs={},
        stored_runs=main,
    )


def test_the_section_tables_every_claim_on_its_runs_and_is_absent_without_claims() -> None:
    keys = ["run_id", "variant", "seed", "status", "stable", "lr", "final_val_loss"]
    main = _values(-0.05, 0.005)[keys]
    tuned = _values(+0.05, 0.005)[keys].assign(lr=[2e-3, 4e-3] * 6)  # each at its own LR
    claims = [_claim(), _claim("resid_rms_growth"), {**_claim(), "runs": "tuned"}]
    section = claims_section(claims, _stored(main, tuned), None, 50)
    frame = section.tables["claims.csv"]
    assert list(frame["verdict"]) == ["agrees", "not measured", "disagrees"]
    assert list(frame["pairs"]) == [6, 0, 6]  # no probes: the second has no pairs
    text = "\n".join(section.lines)
    assert "| S " in text and "b lower than a" in text and "no pairs" in text
    assert "main, LR 0.003" in text and "tuned: each at its optimum" in text
    assert claims_section([], _stored(main, tuned), None, 50).lines == []


def test_a_pipe_in_a_claims_words_does_not_break_its_table_row() -> None:
    from ablate.report.claims import claims_markdown

    row = claim_row({**_claim(), "statement": "b | c is better"}, _values(-0.05, 0.005))
    table = claims_markdown(pd.DataFrame([row]))
    assert "b \\| c is better" in table and table.splitlines()[2].count(" | ") == 6
