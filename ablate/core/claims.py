"""``claims:``: published claims an experiment tests, each a direction on one measured quantity.

A claim names its source, states what it says, and predicts that a quantity of ``variant``'s
runs is ``lower`` or ``higher`` than ``baseline``'s on the same seeds: the main runs at their
shared LR, the tuned A/B (``runs: tuned``, each variant at its own optimum and warmup), or the
sweep's LR grid (``runs: sweep``: Wortsman et al.'s LR sensitivity, one value per seed). It
states its estimand (``at``): what the source's claim is about, one LR, each model tuned, or an
LR grid; a claim about tuned models tested at one LR is labelled so and is not evidence for it.
A claim that holds by construction (``mechanism``: the variant normalises, penalises, caps or
scales the very quantity) is a mechanism check, shown apart and outside the evidence family. The
report (:mod:`ablate.report.claims`) measures the paired effect with its interval and gives the
verdict; ``reports/literature/`` gathers every committed report's claims
(:mod:`ablate.report.literature`).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from ablate.core.section import StrictSection

LOSSES = ("final_val_loss", "final_test_loss", "grad_spikes")  # of one run, not probes
# outcomes of training as a whole, not probes: a run that diverged is the worst of them
OUTCOMES = (*LOSSES, "lr_sensitivity")
# quantity -> how a pair is compared: "difference" (variant - baseline) or "ratio" (variant /
# baseline, averaged on the log scale); what it is, for the report
METRICS: dict[str, tuple[str, str]] = {
    "final_val_loss": ("difference", "final val loss (nats)"),
    "final_test_loss": ("difference", "final test loss (nats; the split no selection saw)"),
    "resid_rms_growth": ("ratio", "residual RMS growth, last block / first block"),
    "resid_kurtosis_max": ("ratio", "feature kurtosis of the most kurtotic block"),
    "attn_logit_max": ("ratio", "largest attention logit"),
    "logit_max_abs": ("ratio", "largest absolute output logit"),
    "logsumexp_abs": ("ratio", "absolute mean log-sum-exp (log Z) of the output logits"),
    "grad_spikes": ("difference", "gradient-norm spikes per run"),
    "lr_sensitivity": (
        "difference",
        "LR sensitivity (Wortsman et al.): the sweep's mean of min(loss, ℓ0) − its best, per seed",
    ),
}
Metric = Literal[tuple(METRICS)]  # type: ignore[valid-type]


class ClaimConfig(StrictSection):
    """One published claim as a predicted direction of one quantity, variant against baseline
    (probe quantities at each run's last probe step)."""

    source: str = Field(min_length=1, description="who claims it, e.g. 'OLMo 2 (2025)'")
    statement: str = Field(min_length=1, description="what the source claims, in a sentence")
    variant: str = Field(description="the variant the claim is about")
    baseline: str | None = Field(None, description="what it is compared with; default: the first")
    metric: Metric = Field(description="the quantity compared (ablate.core.claims.METRICS)")
    direction: Literal["lower", "higher"] = Field(
        description="the claim's prediction for the variant's value"
    )
    runs: Literal["main", "tuned", "sweep"] = Field(
        "main",
        description="main: both at the main runs' shared LR; tuned: each at its own optimum "
        "and warmup (the curve or search stage's tuned A/B; losses only); sweep: the sweep's LR "
        "grid (lr_sensitivity only)",
    )
    at: Literal["one_lr", "tuned", "lr_grid"] = Field(
        "one_lr",
        description="the estimand the source's claim is about: one LR, each model at its own "
        "tuned LR, or the loss across an LR grid (LR sensitivity); a tuned claim tested at one "
        "LR is labelled 'at one LR: not the claim' and is not evidence",
    )
    mechanism: bool = Field(
        False,
        description="the claim holds by construction (the variant normalises, penalises, caps "
        "or scales the quantity): a mechanism check, shown apart, outside the evidence family",
    )

    @property
    def evidence(self) -> bool:
        """Whether the claim's runs test what the source claims: not a mechanism check, and a
        claim about tuned models tested tuned (or across the LR grid)."""
        return not self.mechanism and not (self.at == "tuned" and self.runs == "main")

    def against(self, variants: list[str]) -> str:
        """The baseline: ``baseline``, else the experiment's first variant."""
        return self.baseline or variants[0]
