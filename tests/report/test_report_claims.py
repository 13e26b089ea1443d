"""A published claim measured on matched seeds: paired effects, intervals, its role and the
verdict over the evidence family; a diverged run as an outcome, ranked worst."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from conftest import stored_manifest
from scipy import stats

from ablate.core.studies import StoredStudies
from ablate.report.claims import (
    EVIDENCE,
    MECHANISM,
    NOT_THE_CLAIM,
    claim_row,
    claims_markdown,
    claims_section,
    judged,
    probe_values,
    verdict_text,
)
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


def _judged(*rows: dict) -> pd.DataFrame:
    return judged(pd.DataFrame(list(rows)))


def test_a_clear_effect_agrees_or_disagrees_by_the_predicted_direction() -> None:
    values = _values(-0.05, 0.005)
    lower, higher = _judged(
        claim_row(_claim(), values), claim_row(_claim(direction="higher"), values)
    ).to_dict("records")
    assert lower["verdict"] == "agrees" and lower["pairs"] == 6 and lower["lr"] == 3e-3
    assert lower["ci_high"] < 0 and lower["effect"] == pytest.approx(-0.05, abs=0.01)
    assert higher["verdict"] == "disagrees"
    assert lower["p_holm"] == pytest.approx(min(1.0, 2 * lower["p_value"]))  # Holm over two


def test_a_ratio_is_averaged_on_the_log_scale_and_reported_as_a_ratio() -> None:
    row = claim_row(_claim("resid_rms_growth"), _values(math.log(0.5), 0.001, ratio=True))
    (found,) = _judged(row).to_dict("records")
    assert found["effect"] == pytest.approx(0.5, abs=1e-3) and found["verdict"] == "agrees"


def test_an_unclear_effect_is_inconclusive_with_the_seeds_that_would_decide_it() -> None:
    (row,) = _judged(claim_row(_claim(), _values(-0.01, 0.02))).to_dict("records")
    assert row["verdict"] == "inconclusive" and row["more_seeds"] >= 1 and row["effect"] < 0
    more = f"about {int(row['more_seeds'])} more would detect the measured effect"
    assert verdict_text(row) == f"inconclusive with 6 seeds ({more})"
    (against,) = _judged(
        claim_row({**_claim(), "direction": "higher"}, _values(-0.01, 0.02))
    ).to_dict("records")
    assert (
        verdict_text(against) == f"inconclusive with 6 seeds ({more}, which runs against the claim)"
    )


def test_a_diverged_run_ranks_worst_in_an_outcome_and_voids_only_a_probe() -> None:
    values = _values(-0.05, 0.005).assign(resid_rms_growth=1.0)
    values.loc[values["run_id"] == "a0", "status"] = "diverged"  # the baseline blew up once
    values.loc[values["run_id"].isin(["a1", "b2"]), "stable"] = False  # collapsed: still paired
    loss, probe = _judged(
        claim_row(_claim(), values), claim_row(_claim("resid_rms_growth"), values)
    ).to_dict("records")
    assert loss["test"] == "signed-rank" and loss["pairs"] == 6  # the diverged pair ranks too
    assert loss["ci_low"] == -math.inf and loss["verdict"] == "agrees"  # b better where a broke
    assert loss["not_finished"] == 1 and loss["collapsed"] == 2
    ranks = stats.wilcoxon(
        np.r_[
            -1e300,
            (
                values.loc[values.variant == "b", "final_val_loss"].to_numpy()[1:]
                - values.loc[values.variant == "a", "final_val_loss"].to_numpy()[1:]
            ),
        ]
    )
    assert loss["p_value"] == pytest.approx(ranks.pvalue)
    assert probe["verdict"] == "no verdict" and probe["pairs"] == 5
    assert verdict_text(probe) == (
        "no verdict: runs diverged (b 0 of 6, a 1 of 6); of the 5 pair(s) that trained, 0 lie "
        "on the claim's side and their mean on no side; it would take runs where both train (a "
        "lower LR or more warmup); 2 of the runs did not learn"
    )


def test_a_mechanism_check_and_a_tuned_claim_at_one_lr_stay_out_of_the_family() -> None:
    values = _values(-0.05, 0.005)
    rows = _judged(
        claim_row(_claim(), values),
        claim_row({**_claim(), "mechanism": True}, values),
        claim_row({**_claim(), "at": "tuned"}, values),
    )
    assert list(rows["role"]) == ["evidence", MECHANISM, NOT_THE_CLAIM]
    assert rows["p_holm"].iloc[0] == pytest.approx(rows["p_value"].iloc[0])  # a family of one
    assert rows["p_holm"].iloc[1:].isna().all()
    assert list(rows["verdict"]) == ["agrees", "agrees", NOT_THE_CLAIM]


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
        manifest=stored_manifest(),
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
    claims = [_claim(), _claim("resid_rms_growth"), {**_claim(), "runs": "tuned", "at": "tuned"}]
    claims.append({**_claim(), "mechanism": True})
    section = claims_section(claims, _stored(main, tuned), None, 50)
    frame = section.tables["claims.csv"]
    assert list(frame["verdict"]) == ["agrees", "not measured", "disagrees", "agrees"]
    assert list(frame["pairs"]) == [6, 0, 6, 6]  # no probes: the second has no pairs
    assert list(frame["role"]) == [EVIDENCE] * 3 + [MECHANISM]
    assert list(frame["at"]) == ["one_lr", "one_lr", "tuned", "one_lr"]
    assert list(frame["lr"].fillna(0)) == [0.003, 0.003, 0, 0.003]  # tuned: each at its own
    assert frame["p_holm"].notna().sum() == 2  # Holm over the evidence's two tests alone
    text = "\n".join(section.lines)
    evidence, mechanism = text.split("### Mechanism checks")
    assert claims_markdown(frame[frame["role"] == EVIDENCE]) in evidence
    assert claims_markdown(frame[frame["role"] == MECHANISM]) in mechanism
    assert mechanism.count("| S ") == 1
    assert claims_section([], _stored(main, tuned), None, 50).lines == []


def test_a_pipe_in_a_claims_words_does_not_break_its_table_row() -> None:
    row = claim_row({**_claim(), "statement": "b | c is better"}, _values(-0.05, 0.005))
    table = claims_markdown(_judged(row))
    cells = table.splitlines()[2].split(" | ")
    assert len(cells) == 7 and cells[1].strip() == "b \\| c is better"  # escaped, one cell
