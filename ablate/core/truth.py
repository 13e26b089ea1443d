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
    shape: list[tuple[float, float]] | None = Field(
        None,
        description="the valley as measured instead of the quadratic: (log2(lr / opt_lr), nats "
        "above best_loss) points, linear between them, flat beyond the ends",
    )
    run_sd_above: float | None = Field(
        None, ge=0, description="sd of a run's own noise above opt_lr; null: runtime's run_sd"
    )
    spike_rate: float = Field(
        0.0, ge=0, le=1, description="the most a run's chance of a loss excursion reaches"
    )
    spike_lr: float = Field(
        1.0, gt=0, le=1000, description="the LR where that chance is half of spike_rate"
    )
    spike_width: float = Field(
        0.5, gt=0, le=10, description="octaves over which the chance rises (logistic scale)"
    )
    spike_size: float = Field(
        0.1, gt=0, le=10, description="mean of an excursion's loss excess (exponential), nats"
    )

    noise: list[tuple[float, float, float, float]] | None = Field(
        None,
        description="the run noise as measured, instead of run_sd, run_sd_above and the spike "
        "keys: (log2(lr / opt_lr), normal sd, excursion chance, excursion mean) rows, linear "
        "between them, flat beyond the ends",
    )

    @model_validator(mode="after")
    def _shape_is_a_valley(self) -> TruthConfig:
        if self.shape is not None:
            offsets = [x for x, _ in self.shape]
            if len(offsets) < 2 or offsets != sorted(set(offsets)):
                raise ValueError("shape: at least two points, in increasing log2(lr / opt_lr)")
        return self

    @model_validator(mode="after")
    def _noise_is_a_table(self) -> TruthConfig:
        if self.noise is not None:
            offsets = [row[0] for row in self.noise]
            if len(offsets) < 2 or offsets != sorted(set(offsets)):
                raise ValueError("noise: at least two rows, in increasing log2(lr / opt_lr)")
            rows = self.noise
            if any(sd < 0 or not 0 <= chance <= 1 or size <= 0 for _, sd, chance, size in rows):
                raise ValueError("noise: each row's sd >= 0, chance in [0, 1], mean excess > 0")
        return self

    @model_validator(mode="after")
    def _collapse_below_divergence(self) -> TruthConfig:
        if self.collapse_lr is not None and self.collapse_lr >= self.divergence_lr:
            raise ValueError(
                f"collapse_lr ({self.collapse_lr:g}) must be below divergence_lr "
                f"({self.divergence_lr:g})"
            )
        return self


# Truth keys added after simulated results were stored: left out of a simulated run's identity
# while at their defaults, so that every earlier simulated run keeps its id and its draws.
LATER_TRUTH_KEYS = (
    "shape",
    "run_sd_above",
    "spike_rate",
    "spike_lr",
    "spike_width",
    "spike_size",
    "noise",
)


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
    variants: dict[str, dict[str, float | list[tuple[float, ...]] | None]] = Field(
        default_factory=dict, description="variant name -> keys of its truth that differ"
    )

    @model_validator(mode="after")
    def _variants_are_truths(self) -> SimulateConfig:
        for overrides in self.variants.values():  # raises on an unknown key or a bad value
            TruthConfig(**{**self.default.model_dump(), **overrides})
        return self

    def identity(self) -> dict:
        """The section as a run's id hashes it: without ``pace_s`` (it changes no result) and
        without :data:`LATER_TRUTH_KEYS` at their defaults."""
        found = self.model_dump(mode="json", exclude={"pace_s"})
        defaults = TruthConfig().model_dump(mode="json")
        found["default"] = {
            key: value
            for key, value in found["default"].items()
            if key not in LATER_TRUTH_KEYS or value != defaults[key]
        }
        return found

    def truth(self, variant: str) -> TruthConfig:
        """The truth of ``variant``: the default with the keys ``variants`` sets for it (a copy:
        checked once, when the section was, since a simulated run asks for it several times)."""
        return self.default.model_copy(update=self.variants.get(variant, {}))
