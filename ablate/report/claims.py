"""The published claims an experiment tests (``claims:``): each one's paired effect over seeds,
its 95% interval, its role and its verdict.

A claim predicts that a quantity (:data:`ablate.core.claims.METRICS`) of one variant is lower or
higher than the baseline's on the same seeds: the main runs, the tuned A/B, or the sweep (LR
sensitivity, per seed). Differences (losses, spike counts, sensitivities) are compared as
variant − baseline, ratios (probe quantities) as variant / baseline on the log scale.

Each claim has a **role**: *evidence*; a *mechanism check* (it holds by construction); or *at
one LR: not the claim* (a claim about tuned models tested at one LR). Evidence is judged in one
family: Holm over the evidence claims' tests of no effect (:func:`ablate.report.verdict.
claim_word`: *agrees* or *disagrees* by the side the estimate lies on where the adjusted p
passes, else *inconclusive*, with the seeds that would detect the measured effect). A run that
diverged is an outcome: where the quantity is one of training as a whole (a loss, spikes, LR
sensitivity) it ranks worst, and the claim is tested on ranks (the signed-rank test, the
Hodges–Lehmann estimate and interval); where it is a probe of a trained model, the claim has
*no verdict*, and says which side its trained pairs lie on and what it would take. A soft cap
that the uncapped runs never reach is said never to bind.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from ablate.core.claims import METRICS, OUTCOMES
from ablate.report.analysis import (
    PairedDifference,
    block_rows,
    holm,
    last_probe_step,
    mean_difference,
    per_run,
    seed_sensitivities,
    signed_rank,
    sweep_frame,
)
from ablate.report.depth import grad_spikes
from ablate.report.load import StoredExperiment
from ablate.report.section import Section
from ablate.report.text import sig
from ablate.report.verdict import ALPHA, claim_word, reach

PROBED = (
    "resid_rms_growth",
    "resid_kurtosis_max",
    "attn_logit_max",
    "logit_max_abs",
    "logsumexp_abs",
)
EVIDENCE, MECHANISM, NOT_THE_CLAIM = "evidence", "mechanism check", "at one LR: not the claim"
NO_VERDICT = "no verdict"
CLAIM_COLUMNS = [
    "source",
    "statement",
    "variant",
    "baseline",
    "metric",
    "direction",
    "runs",
    "at",
    "role",
    "lr",
    "pairs",
    "effect",
    "ci_low",
    "ci_high",
    "test",
    "p_value",
    "p_holm",
    "verdict",
    "more_seeds",
    "on_side",
    "not_finished",
    "lost",
    "collapsed",
    "note",
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


def sweep_values(stored: StoredExperiment) -> pd.DataFrame:
    """Per variant and seed of the sweep: its LR sensitivity (:func:`ablate.report.analysis.
    seed_sensitivities`), each a finished value: the divergences are inside it."""
    frame = seed_sensitivities(sweep_frame(stored.manifest.runs, stored.runs))
    return frame.assign(status="finished", stable=True, lr=math.nan)


def role_of(claim: dict[str, Any]) -> str:
    """A claim's role: a mechanism check, evidence, or a tuned claim tested at one LR."""
    if claim.get("mechanism"):
        return MECHANISM
    if claim.get("at", "one_lr") == "tuned" and claim.get("runs", "main") == "main":
        return NOT_THE_CLAIM
    return EVIDENCE


def paired(claim: dict[str, Any], values: pd.DataFrame) -> tuple[PairedDifference, str, np.ndarray]:
    """The claim's paired effect on the seeds both variants ran (the log ratio for a ratio),
    its test ("t", or "signed-rank" where a run diverged and the quantity is an outcome of
    training: the diverged run ranks worst, +inf), and the differences of the pairs whose runs
    all finished."""
    metric, ratio = claim["metric"], METRICS[claim["metric"]][0] == "ratio"
    by_seed = {
        name: values[values["variant"] == name].set_index("seed")
        for name in (claim["variant"], claim["baseline"])
    }
    mine, theirs = by_seed[claim["variant"]], by_seed[claim["baseline"]]
    seeds = mine.index.intersection(theirs.index)

    def value(frame: pd.DataFrame) -> pd.Series:
        done = frame.loc[seeds, "status"] == "finished"
        return frame.loc[seeds, metric].astype(float).where(done, np.inf)

    a, b = value(mine), value(theirs)
    finished = a.notna() & b.notna() & np.isfinite(a) & np.isfinite(b)
    both = a.notna() & b.notna()
    with np.errstate(invalid="ignore", divide="ignore"):
        diffs = np.log(a / b) if ratio else a - b
    diffs = diffs[both].where(~(np.isinf(a) & np.isinf(b))[both], 0.0)  # both diverged: a tie
    clean = diffs[finished[both]]
    if bool(finished[both].all()) or metric not in OUTCOMES:
        return mean_difference(clean), "t", clean.to_numpy()
    return signed_rank(diffs.to_numpy()), "signed-rank", clean.to_numpy()


def claim_row(claim: dict[str, Any], values: pd.DataFrame, note: str = "") -> dict[str, Any]:
    """One claim measured: its role, paired effect, interval, test and p (the verdict is given
    over the family by :func:`judged`)."""
    metric, variant, baseline = claim["metric"], claim["variant"], claim["baseline"]
    diff, test, clean = paired(claim, values)
    mean = float(clean.mean()) if len(clean) else 0.0
    needed = reach(clean, abs(mean)).pairs_needed if len(clean) > 1 and mean else None
    on_side = int((clean > 0).sum() if claim["direction"] == "higher" else (clean < 0).sum())
    ratio = METRICS[metric][0] == "ratio"
    scale = math.exp if ratio else (lambda x: x)
    both = values[values["variant"].isin([variant, baseline])]
    lrs = sorted(set(both.loc[both["status"] == "finished", "lr"].dropna()))
    learned = both["stable"].ne(False) if "stable" in both else True
    row = {
        **{key: claim[key] for key in CLAIM_COLUMNS[:6]},
        "runs": claim.get("runs", "main"),
        "at": claim.get("at", "one_lr"),
        "role": role_of(claim),
        "lr": lrs[0] if len(lrs) == 1 else math.nan,  # NaN: the pair's runs differ in LR
        "pairs": diff.n_pairs,
        "effect": scale(diff.mean) if diff.n_pairs else math.nan,
        "ci_low": scale(diff.ci_low) if not math.isnan(diff.ci_low) else math.nan,
        "ci_high": scale(diff.ci_high) if not math.isnan(diff.ci_high) else math.nan,
        "test": test,
        "p_value": diff.p_value,
        "more_seeds": None if needed is None else max(1, needed - len(clean)),
        "on_side": on_side,
        "not_finished": int(both["status"].ne("finished").sum()),
        "lost": ", ".join(  # who lost runs: "capped 0 of 8, uncapped 1 of 8"
            f"{name} {int(mine['status'].ne('finished').sum())} of {len(mine)}"
            for name in (variant, baseline)
            for mine in [both[both["variant"] == name]]
        ),
        "collapsed": int(((both["status"] == "finished") & ~learned).sum()),
        "note": note,
    }
    if row["not_finished"] and test == "t":  # a probe of runs that did not all train
        row["p_value"] = math.nan
    return row


def judged(frame: pd.DataFrame, alpha: float = ALPHA) -> pd.DataFrame:
    """Every claim's verdict: the evidence claims' p Holm-adjusted together and read by
    :func:`ablate.report.verdict.claim_word`; a mechanism check at its own p; a tuned claim
    at one LR none; a probe of runs that did not all train *no verdict*."""
    evidence = frame["role"] == EVIDENCE
    frame = frame.assign(p_holm=math.nan)
    frame.loc[evidence, "p_holm"] = holm(list(frame.loc[evidence, "p_value"]))
    words = []
    for row in frame.itertuples():
        p = row.p_holm if row.role == EVIDENCE else row.p_value
        if row.role == NOT_THE_CLAIM:
            words.append(NOT_THE_CLAIM)
        elif math.isnan(p):
            words.append(NO_VERDICT if row.not_finished else "not measured")
        else:
            null = 1.0 if METRICS[row.metric][0] == "ratio" else 0.0
            words.append(claim_word(p, row.effect > null, row.direction == "higher", alpha))
    inconclusive = [w == "inconclusive" for w in words]
    return frame.assign(verdict=words, more_seeds=frame["more_seeds"].where(inconclusive))


def verdict_text(row: dict[str, Any] | pd.Series) -> str:
    """The verdict in words, e.g. ``inconclusive with 6 seeds (about 9 more would detect the
    measured effect)``, and how many of the compared runs did not learn (collapsed), where any
    did."""
    collapsed = int(row.get("collapsed", 0) or 0)
    note = f"; {collapsed} of the runs did not learn" if collapsed else ""
    return decision_text(row) + note


def side_text(row: dict[str, Any] | pd.Series) -> str:
    """Which side of no effect the estimate lies on, against the claim."""
    null = 1.0 if METRICS[row["metric"]][0] == "ratio" else 0.0
    if not math.isfinite(row["effect"]) or row["effect"] == null:
        return "no side"
    higher = row["effect"] > null
    return "the claim's side" if higher == (row["direction"] == "higher") else "against the claim"


def decision_text(row: dict[str, Any] | pd.Series) -> str:
    """:func:`verdict_text` without the note on collapsed runs."""
    if row["verdict"] == NO_VERDICT:
        trained = int(row["pairs"])
        return (
            f"no verdict: runs diverged ({row['lost']}); of the {trained} pair(s) that trained, "
            f"{int(row['on_side'])} lie on the claim's side and their mean on {side_text(row)}; "
            "it would take runs where both train (a lower LR or more warmup)"
        )
    if row["verdict"] == NOT_THE_CLAIM:
        return f"{NOT_THE_CLAIM} (it is about each model at its own tuned LR)"
    if row["verdict"] != "inconclusive":
        return str(row["verdict"])
    if row.get("test") == "signed-rank":
        return f"inconclusive with {int(row['pairs'])} seeds (on ranks: no count is projected)"
    more = row["more_seeds"]
    against = side_text(row) == "against the claim"
    reach_text = (
        "beyond what more seeds can reach"
        if more is None or (isinstance(more, float) and math.isnan(more))
        else f"about {int(more)} more would detect the measured effect"
        + (", which runs against the claim" if against else "")
    )
    return f"inconclusive with {int(row['pairs'])} seeds ({reach_text})"


def effect_text(row: dict[str, Any] | pd.Series) -> str:
    """The effect and its interval as the claim's quantity reads: ``×0.81 [0.75, 0.88]`` for
    a ratio, ``−0.031 [−0.05, −0.012]`` for a difference; by ranks, the Hodges–Lehmann
    estimate and interval."""
    if not row["pairs"]:
        return "no pairs"
    if row["pairs"] < 2 or math.isnan(row["ci_low"]):
        return f"not estimable with {int(row['pairs'])} pair(s)"
    if METRICS[row["metric"]][0] == "ratio":
        found = f"×{sig(row['effect'])} [{sig(row['ci_low'])}, {sig(row['ci_high'])}]"
    else:
        found = f"{row['effect']:+.4g} [{row['ci_low']:+.4g}, {row['ci_high']:+.4g}]"
    return found + (" (ranks)" if row.get("test") == "signed-rank" else "")


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
            "estimand; runs": [estimand_text(r) for r in frame.itertuples()],
            "measured (95% CI)": [effect_text(r) for _, r in frame.iterrows()],
            "verdict": [verdict_text(r) + note(r) for _, r in frame.iterrows()],
            **(extra or {}),
        }
    )
    return shown.to_markdown(index=False)


def note(row: pd.Series) -> str:
    text = row.get("note", "")
    return f"; {text}" if isinstance(text, str) and text else ""


def estimand_text(row: Any) -> str:
    """``one LR; main, LR 0.01`` / ``tuned; each at its optimum`` / ``LR grid; sweep``."""
    about = {"one_lr": "one LR", "tuned": "tuned", "lr_grid": "LR grid"}[
        getattr(row, "at", "one_lr")
    ]
    runs = {
        "main": f"main, LR {sig(row.lr)}",
        "tuned": "tuned: each at its optimum",
        "sweep": "sweep: every LR of its grid",
    }[row.runs]
    return f"{about}; {runs}"


def cap_note(claim: dict[str, Any], stored: StoredExperiment, values: pd.DataFrame) -> str:
    """Where the claim's variant soft-caps logits (c·tanh(x/c)): how close the baseline's
    uncapped runs come to the output cap at their last probe step and how much the cap would
    compress the largest of them, and how far the variant's attention scores, read before its
    cap, pass it; "" otherwise."""
    model = next(
        (
            c.get("config", {}).get("model", {})
            for c in stored.configs.values()
            if c.get("variant") == claim["variant"]
        ),
        {},
    )
    done = values[values["status"] == "finished"]
    parts = []
    output = model.get("softcap_output")
    base = done.loc[done["variant"] == claim["baseline"], "logit_max_abs"].dropna()
    if output and len(base):
        x = float(base.max())
        squeeze = 1 - output * math.tanh(x / output) / x
        where = "under" if x < output else "past"
        parts.append(
            f"at their last probe step the uncapped runs' largest absolute output logit is "
            f"{sig(x)}, {where} the output cap {output:g}, which would compress it by "
            f"{squeeze:.0%}"
        )
    attention = model.get("softcap_attn")
    mine = done.loc[done["variant"] == claim["variant"], "attn_logit_max"].dropna()
    if attention and len(mine):
        x = float(mine.max())
        binds = ": it binds" if x > attention else ""
        parts.append(
            f"the capped runs' attention scores, read before their cap, reach {sig(x)} against "
            f"it ({attention:g}){binds}"
        )
    return "; ".join(parts)


def claim_frame(
    claims: list[dict[str, Any]], stored: StoredExperiment, spike_factor: float | None, window: int
) -> pd.DataFrame:
    """Every claim of the experiment measured on its runs and judged."""
    values = {
        "main": run_values(stored.main, stored.probes, stored.metrics, spike_factor, window),
        "tuned": run_values(
            stored.tuned, pd.DataFrame(), stored.tuned_metrics, spike_factor, window
        ),
        "sweep": sweep_values(stored),
    }
    rows = []
    for claim in claims:
        mine = values[claim.get("runs", "main")]
        rows.append(claim_row(claim, mine, cap_note(claim, stored, values["main"])))
    return judged(
        pd.DataFrame(rows, columns=[c for c in CLAIM_COLUMNS if c not in ("p_holm", "verdict")])
    )


def claims_section(
    claims: list[dict[str, Any]],
    stored: StoredExperiment,
    spike_factor: float | None,
    spike_window: int,
) -> Section:
    """The ``claims:`` of the experiment: the evidence, then the mechanism checks apart
    (nothing without any)."""
    if not claims or stored.main.empty:
        return Section()
    frame = claim_frame(claims, stored, spike_factor, spike_window)
    evidence = frame[frame["role"] != MECHANISM]
    mechanism = frame[frame["role"] == MECHANISM]
    family = int(((frame["role"] == EVIDENCE) & frame["p_value"].notna()).sum())
    lines = ["## Published claims tested", ""]
    if len(evidence):
        lines += [claims_markdown(evidence), ""]
    lines += [
        f"The evidence: Holm over its {family} tests of no effect at α {ALPHA:g}. "
        "Each is a predicted direction of one quantity of the variant's runs against the "
        "baseline's on the same seeds: a difference (variant − baseline) or a ratio (variant / "
        "baseline, averaged on the log scale), probe quantities at each run's last probe step. "
        "*agrees* / *disagrees*: its Holm-adjusted p passes, with the estimate on the predicted "
        "/ the other side; otherwise *inconclusive*, with the seeds a paired t-test would need "
        "to detect the measured effect at 80% power. A run that diverged is an outcome: for a "
        "loss, spikes or LR sensitivity it ranks worst and the claim is tested on ranks "
        '(signed-rank test, Hodges–Lehmann estimate and interval: "(ranks)"); for a probe of '
        "a trained model the claim has no verdict and says which side its trained pairs lie "
        "on. A claim about tuned models tested at one LR is not evidence for it.",
        "",
    ]
    if len(mechanism):
        lines += [
            "### Mechanism checks",
            "",
            "These hold by construction (the variant normalises, penalises, caps or scales the "
            "very quantity): they check the mechanism works here, at its own p (95%), and are "
            "no evidence for the claim.",
            "",
            claims_markdown(mechanism),
            "",
        ]
    return Section(lines, {"claims.csv": frame})
