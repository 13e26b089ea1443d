"""The published claims an experiment tests (``claims:``): each one's paired effect over the
main runs' seeds, its 95% interval and its verdict.

A claim predicts that a quantity (:data:`ablate.core.claims.METRICS`) of one variant is lower or
higher than the baseline's on the same seeds. Differences (losses, spike counts) are compared
as variant − baseline, ratios (probe quantities) as variant / baseline on the log scale. The
verdict is *agrees* when the 95% interval lies wholly on the predicted side of no effect,
*disagrees* when it lies wholly on the other, and otherwise *inconclusive with n seeds*, with
the pairs a paired t-test would need to detect the measured effect at 80% power
(:func:`ablate.report.verdict.reach`). Only seeds both variants finished are paired; where a
compared run diverged there is *no verdict* (as the report's comparisons), its effect over the
survivors shown.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ablate.core.claims import METRICS
from ablate.report.analysis import (
    PairedDifference,
    block_rows,
    last_probe_step,
    mean_difference,
    per_run,
)
from ablate.report.depth import grad_spikes
from ablate.report.load import StoredExperiment
from ablate.report.section import Section
from ablate.report.text import sig
from ablate.report.verdict import reach

PROBED = (
    "resid_rms_growth",
    "resid_kurtosis_max",
    "attn_logit_max",
    "logit_max_abs",
    "logsumexp_abs",
)
CLAIM_COLUMNS = [
    "source",
    "statement",
    "variant",
    "baseline",
    "metric",
    "direction",
    "runs",
    "lr",
    "pairs",
    "effect",
    "ci_low",
    "ci_high",
    "p_value",
    "verdict",
    "more_seeds",
    "not_finished",
    "lost",
    "collapsed",
]


def probe_values(probes: pd.DataFrame) -> pd.DataFrame:
    """Per run, the probe quantities of :data:`METRICS` at its last probe step."""
    if probes.empty:  # e.g. simulated runs: every claim on a probe quantity has no pairs
        return pd.DataFrame(columns=list(PROBED), index=pd.Index([], name="run_id"))
    last = last_probe_step(probes)
    blocks = block_rows(last)
    rms = blocks[blocks["quantity"] == "resid_rms"].sort_values("layer").groupby("run_id")
    found = pd.DataFrame(
        {
            "resid_rms_growth": rms["value"].last() / rms["value"].first(),
            "resid_kurtosis_max": per_run(blocks, "resid_kurtosis", "max"),
            "attn_logit_max": per_run(last, "attn_logit_max", "max"),
            "logit_max_abs": per_run(last, "logit_max_abs", "max"),
            "logsumexp_abs": per_run(last, "logsumexp_mean", "max").abs(),
        }
    )
    return found[list(PROBED)]


def run_values(
    runs: pd.DataFrame,
    probes: pd.DataFrame,
    metrics: pd.DataFrame,
    spike_factor: float | None,
    spike_window: int,
) -> pd.DataFrame:
    """Per run of a group (variant, seed, status, LR), with its ``probes`` and step
    ``metrics``: every quantity of :data:`METRICS` it has."""
    keys = ["run_id", "variant", "seed", "status", "stable", "lr"]
    keys += ["final_val_loss", "final_test_loss"]
    if runs.empty:
        return pd.DataFrame(columns=[*keys, *PROBED])
    values = runs[[k for k in keys if k in runs]].set_index("run_id")
    values = values.join(probe_values(probes))
    if spike_factor:
        spikes = grad_spikes(metrics, spike_factor, spike_window).set_index("run_id")
        values = values.join(spikes["spikes"].rename("grad_spikes"))
    return values.reset_index()


def claim_row(claim: dict[str, Any], values: pd.DataFrame) -> dict[str, Any]:
    """One claim measured: its paired effect, interval, p-value and verdict."""
    metric, variant, baseline = claim["metric"], claim["variant"], claim["baseline"]
    ratio = METRICS[metric][0] == "ratio"
    finished = values[values["status"] == "finished"]
    mine = finished[finished["variant"] == variant].set_index("seed")[metric]
    theirs = finished[finished["variant"] == baseline].set_index("seed")[metric]
    seeds = mine.dropna().index.intersection(theirs.dropna().index)
    a, b = mine[seeds].astype(float), theirs[seeds].astype(float)
    diffs = np.log(a / b) if ratio else a - b
    paired = mean_difference(diffs)
    scale = math.exp if ratio else (lambda x: x)
    lrs = sorted(set(finished.loc[finished["variant"].isin([variant, baseline]), "lr"]))
    row = {
        **{key: claim[key] for key in CLAIM_COLUMNS[:6]},
        "runs": claim.get("runs", "main"),
        "lr": lrs[0] if len(lrs) == 1 else math.nan,  # NaN: the pair's runs differ in LR
        "pairs": paired.n_pairs,
        "effect": scale(paired.mean) if paired.n_pairs else math.nan,
        "ci_low": scale(paired.ci_low) if math.isfinite(paired.ci_low) else math.nan,
        "ci_high": scale(paired.ci_high) if math.isfinite(paired.ci_high) else math.nan,
        "p_value": paired.p_value,
    }
    both = values[values["variant"].isin([variant, baseline])]
    row["not_finished"] = int(both["status"].ne("finished").sum())
    row["lost"] = ", ".join(  # who lost runs: "capped 0 of 8, uncapped 1 of 8"
        f"{name} {int(mine['status'].ne('finished').sum())} of {len(mine)}"
        for name in (variant, baseline)
        for mine in [both[both["variant"] == name]]
    )
    learned = finished["stable"].ne(False) if "stable" in finished else True
    row["collapsed"] = int((finished["run_id"].isin(both["run_id"]) & ~learned).sum())
    if row["not_finished"]:  # as the report's comparisons: no verdict over the survivors
        row["verdict"], row["more_seeds"] = "no verdict", None
    else:
        row["verdict"], row["more_seeds"] = judge(claim["direction"], paired, diffs.to_numpy())
    return row


def judge(direction: str, paired: PairedDifference, diffs: np.ndarray) -> tuple[str, int | None]:
    """``agrees``, ``disagrees`` or ``inconclusive`` (``not measured`` without a pair), and for
    an inconclusive one the pairs more that would detect the measured effect at 80% power
    (None: beyond reach)."""
    if not paired.n_pairs:
        return "not measured", None
    low, high = paired.ci_low, paired.ci_high
    if math.isfinite(low) and math.isfinite(high):
        below, above = high < 0, low > 0
        if (below and direction == "lower") or (above and direction == "higher"):
            return "agrees", None
        if below or above:
            return "disagrees", None
    if paired.n_pairs < 2 or not math.isfinite(paired.mean) or paired.mean == 0:
        return "inconclusive", None
    needed = reach(diffs, abs(paired.mean)).pairs_needed
    return "inconclusive", None if needed is None else max(1, needed - paired.n_pairs)


def verdict_text(row: dict[str, Any] | pd.Series) -> str:
    """The verdict in words, e.g. ``inconclusive with 6 seeds (about 9 more would detect the
    measured effect)``, and how many of the compared runs did not learn (collapsed), where any
    did."""
    collapsed = int(row.get("collapsed", 0) or 0)
    note = f"; {collapsed} of the runs did not learn" if collapsed else ""
    return decision_text(row) + note


def decision_text(row: dict[str, Any] | pd.Series) -> str:
    """:func:`verdict_text` without the note on collapsed runs."""
    if row["verdict"] == "no verdict":
        return f"no verdict: runs diverged ({row['lost']}; the rest are paired)"
    if row["verdict"] != "inconclusive":
        return str(row["verdict"])
    more = row["more_seeds"]
    against = (row["effect"] > (1 if METRICS[row["metric"]][0] == "ratio" else 0)) == (
        row["direction"] == "lower"
    )
    reach_text = (
        "beyond what more seeds can reach"
        if more is None or (isinstance(more, float) and math.isnan(more))
        else f"about {int(more)} more would detect the measured effect"
        + (", which runs against the claim" if against else "")
    )
    return f"inconclusive with {int(row['pairs'])} seeds ({reach_text})"


def effect_text(row: dict[str, Any] | pd.Series) -> str:
    """The effect and its interval as the claim's quantity reads: ``×0.81 [0.75, 0.88]`` for
    a ratio, ``−0.031 [−0.05, −0.012]`` for a difference."""
    if not row["pairs"]:
        return "no pairs"
    if METRICS[row["metric"]][0] == "ratio":
        return f"×{sig(row['effect'])} [{sig(row['ci_low'])}, {sig(row['ci_high'])}]"
    return f"{row['effect']:+.4g} [{row['ci_low']:+.4g}, {row['ci_high']:+.4g}]"


def claims_markdown(frame: pd.DataFrame, extra: dict[str, list[str]] | None = None) -> str:
    """The claims table as the report and the literature summary print it (``extra``: more
    columns, by heading)."""

    def cell(text: str) -> str:  # a pipe in a claim's words would end its Markdown cell
        return str(text).replace("|", "\\|")

    shown = pd.DataFrame(
        {
            "source": frame["source"].map(cell),
            "claim": frame["statement"].map(cell),
            "quantity": frame["metric"].map(lambda m: METRICS[m][1]),
            "predicted": [
                f"{r.variant} {r.direction} than {r.baseline}" for r in frame.itertuples()
            ],
            "runs": [
                f"main, LR {sig(r.lr)}" if r.runs == "main" else "tuned: each at its optimum"
                for r in frame.itertuples()
            ],
            "measured (95% CI)": [effect_text(r) for _, r in frame.iterrows()],
            "verdict": [verdict_text(r) for _, r in frame.iterrows()],
            **(extra or {}),
        }
    )
    return shown.to_markdown(index=False)


def claims_section(
    claims: list[dict[str, Any]],
    stored: StoredExperiment,
    spike_factor: float | None,
    spike_window: int,
) -> Section:
    """The ``claims:`` of the experiment measured on its main or tuned runs (nothing without
    any)."""
    if not claims or stored.main.empty:
        return Section()
    values = {
        "main": run_values(stored.main, stored.probes, stored.metrics, spike_factor, spike_window),
        "tuned": run_values(
            stored.tuned, pd.DataFrame(), stored.tuned_metrics, spike_factor, spike_window
        ),
    }
    rows = [claim_row(c, values[c.get("runs", "main")]) for c in claims]
    frame = pd.DataFrame(rows, columns=CLAIM_COLUMNS)
    not_finished = int(frame["not_finished"].max())
    return Section(
        [
            "## Published claims tested",
            "",
            claims_markdown(frame),
            "",
            "Each claim is a predicted direction of one quantity of the variant's runs "
            "against the baseline's on the same seeds: the main runs, both at one LR, or the "
            "tuned A/B, each at the optimum and warmup its curve or search chose on other seeds "
            "(`runs`): a difference (variant − baseline) or a "
            "ratio (variant / baseline, averaged on the log scale), probe quantities at each "
            "run's last probe step. *agrees*: the 95% paired t interval lies wholly on the "
            "predicted side of no effect; *disagrees*: wholly on the other side; otherwise "
            "inconclusive, with the seeds a paired t-test would need to detect the measured "
            "effect at 80% power (the measured effect, not ±min_effect as above); runs that "
            "finished without learning (collapsed) are paired like the rest and counted; where "
            "a compared run diverged there is no verdict, as in the comparisons above. "
            "Intervals are not adjusted across claims "
            "(reports/literature/ gives Holm-adjusted p-values over all of them)."
            + (
                f" Only seeds both variants finished are paired; {not_finished} run(s) of a "
                "claim's two variants did not finish (claims.csv, `not_finished`)."
                if not_finished
                else ""
            ),
            "",
        ],
        {"claims.csv": frame},
    )
