"""The simulator's sections of a run's config (``runtime.simulate``): every variant's stated
truth and the noise (the model that draws runs from them: :mod:`ablate.core.simulate`)."""

from __future__ import annotations

from pydantic import Field, model_validator

from ablate.core.section import SEED_LIMIT, StrictSection


class TruthConfig(StrictSection):
    """One variant's training as the simulator draws it (:mod:`ablate.core.simulate`,
    docs/simulator.md): a loss valley in log LR, a divergence edge, an optional collapse band
    below it, and how much warmup moves both edges."""

    opt_lr: float = Field(0.004, gt=0, le=100, description="the LR of the lowest expected loss")
    best_loss: float = Field(1.73, gt=0, description="expected final val loss at opt_lr")
    curvature: float = Field(
        0.3, ge=0, description="nats added per squared decade of LR away from opt_lr"
    )
    divergence_lr: float = Field(
        0.5, gt=0, le=1000, description="at or above it (after warmup's gain) a run diverges"
    )
    collapse_lr: float | None = Field(
        None, gt=0, description="from here up to the divergence LR a run ends at the floor"
    )
    warmup_gain: float = Field(
        1.0, ge=0, description="full warmup multiplies both edges by 1 + this"
    )
    warmup_scale: float = Field(
        50.0, gt=0, description="warmup steps that give 1 - 1/e of that gain"
    )
    boundary_sd: float = Field(
        0.0, ge=0, le=5, description="sd of ln(edge) between seeds (each variant its own draw)"
    )

    @model_validator(mode="after")
    def _collapse_below_divergence(self) -> TruthConfig:
        if self.collapse_lr is not None and self.collapse_lr >= self.divergence_lr:
            raise ValueError(
                f"collapse_lr ({self.collapse_lr:g}) must be below divergence_lr "
                f"({self.divergence_lr:g})"
            )
        return self


class SimulateConfig(StrictSection):
    """The known-truth simulator of ``runtime.backend: simulate``: every variant's
    :class:`TruthConfig` (``default``, then the keys ``variants.<name>`` sets) and the noise."""

    seed: int = Field(0, ge=0, lt=SEED_LIMIT, description="draws every seed effect and noise")
    seed_sd: float = Field(
        0.01, ge=0, description="sd of the per-seed loss effect every variant of a seed shares"
    )
    run_sd: float = Field(0.004, ge=0, description="sd of each run's own loss noise")
    seed_edge_sd: float = Field(
        0.0, ge=0, le=5, description="sd of ln(edge) every variant of a seed shares"
    )
    vocab_size: int = Field(256, ge=2, le=65536, description="sets ℓ0 = ln(vocab_size)")
    unigram_loss: float = Field(3.25, gt=0, description="the corpus's unigram floor (nats)")
    tokens_per_s: float = Field(1.0e4, gt=0, description="simulated throughput (train time)")
    pace_s: float = Field(
        0.0,
        ge=0,
        le=600,
        description="wall seconds a full-length run takes (it sleeps): for testing claims, "
        "kills and schedulers; not part of the run id, since it changes no result",
    )
    default: TruthConfig = Field(default_factory=TruthConfig)
    variants: dict[str, dict[str, float | None]] = Field(
        default_factory=dict, description="variant name -> keys of its truth that differ"
    )

    @model_validator(mode="after")
    def _variants_are_truths(self) -> SimulateConfig:
        for name in self.variants:
            self.truth(name)  # raises on an unknown key or a bad value
        return self

    def truth(self, variant: str) -> TruthConfig:
        """The truth of ``variant``: the default with the keys ``variants`` sets for it."""
        return TruthConfig(**{**self.default.model_dump(), **self.variants.get(variant, {})})
