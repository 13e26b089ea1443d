"""Typed schema of one run's configuration: every section (model and its norm, train and its
stability criterion and probes; data: :mod:`ablate.core.data_config`; runtime:
:mod:`ablate.core.runtime`), key and default.

An experiment file is YAML with a *base* (``data``, ``model``, ``train``, ``runtime``), a list of
``seeds`` and named ``variants``. Each variant is a mapping of dotted keys to values
(``model.norm.kind: rmsnorm``) applied to the base before validation, so any field can be
ablated; the file's other sections and the resolved experiment are in
:mod:`ablate.core.experiment`. Every problem raises :class:`~ablate.core.errors.ConfigError`
with one line that names the file, the key and what is allowed (:mod:`ablate.core.load` raises
and words those lines).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from ablate.core.data_config import DataConfig
from ablate.core.norm_kinds import KINDS, with_kernel
from ablate.core.runtime import RuntimeConfig
from ablate.core.section import StrictSection

NormKind = Literal[tuple(KINDS)]  # type: ignore[valid-type]  # the kinds of ablate.core.norm_kinds
Placement = Literal["pre", "post", "sandwich", "deepnorm", "reordered", "none"]
SITES = ("attn", "mlp", "final")  # where a norm sits, for per-site keys (alpha_init_<site>)
DEPTH_SCALED = ("pre", "sandwich")  # placements whose norms feed the sublayer: depth_scale
Precision = Literal["32", "bf16-mixed", "bf16-true", "16-mixed", "16-true"]
NormImpl = Literal["auto", "reference", "torch", "cpp"]

NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class NormConfig(StrictSection):
    """Which normalization, where it sits, and its numerics.

    Placements (see :class:`ablate.nn.model.Block`): ``pre`` x + f(norm(x)); ``post``
    norm(x + f(x)); ``sandwich`` (Sandwich-LN / Peri-LN) x + norm(f(norm(x))); ``deepnorm``
    norm(alpha x + f(x)) with DeepNet's alpha and beta; ``reordered`` (OLMo 2) x + norm(f(x));
    ``none``: no norm anywhere (a baseline; ``kind`` is then unused). ``mix_post_layers`` makes
    the first layers of a Pre-Norm model Post-Norm (Mix-LN), and ``depth_scale`` scales each
    input norm's output by 1/sqrt(layer) (LayerNorm Scaling).
    """

    kind: NormKind = "layernorm"
    placement: Placement = "pre"
    eps: float = Field(1e-5, gt=0, lt=1)
    bias: bool | None = Field(
        None, description="learnable bias; default: the kind's (ablate.core.norm_kinds)"
    )
    qk_norm: bool = Field(
        False, description="also normalize attention queries and keys per head (same kind)"
    )
    alpha_init: float = Field(0.5, gt=0, le=100, description="dyt: initial alpha of tanh(alpha x)")
    alpha_init_attn: float | None = Field(
        None,
        gt=0,
        le=100,
        description="dyt: alpha_init of the attention sublayer's norms (q/k norms included); "
        "null: alpha_init",
    )
    alpha_init_mlp: float | None = Field(
        None,
        gt=0,
        le=100,
        description="dyt: alpha_init of the MLP sublayer's norms; null: alpha_init",
    )
    alpha_init_final: float | None = Field(
        None, gt=0, le=100, description="dyt: alpha_init of the final norm; null: alpha_init"
    )
    mix_post_layers: int = Field(
        0,
        ge=0,
        le=127,
        description="Mix-LN: the first this many layers Post-Norm, the rest Pre-Norm "
        "(placement pre; fewer than model.n_layers)",
    )
    depth_scale: bool = Field(
        False,
        description="LayerNorm Scaling: each input norm's output times 1/sqrt(its layer, from 1) "
        "(placements pre and sandwich; the final norm unscaled)",
    )
    fp32_reduction: bool = Field(
        True, description="compute the statistics in fp32 when the input is bf16/fp16"
    )
    impl: NormImpl = Field(
        "auto",
        description="kernel: auto (per device), reference, torch, cpp (RMSNorm, LayerNorm; CPU)",
    )

    def init_of(self, key: str, site: str | None) -> float:
        """The init value of a scalar at ``site`` (attn, mlp, final): ``<key>_<site>`` where
        set, else ``key`` (``alpha_init``)."""
        specific = getattr(self, f"{key}_{site}", None) if site else None
        return float(specific if specific is not None else getattr(self, key))

    def placement_of(self, layer: int) -> str:
        """The placement of block ``layer`` (0-based): Post-Norm in Mix-LN's first layers."""
        return "post" if layer < self.mix_post_layers else self.placement

    def as_used(self) -> dict[str, Any]:
        """This section as JSON with the keys its kind does not read at their defaults: two
        norms that compute the same are the same run and no difference between variants."""
        dump = self.model_dump(mode="json")
        for key in KINDS[self.kind].unused():
            dump[key] = type(self).model_fields[key].default
        return dump

    @model_validator(mode="after")
    def _default_bias(self) -> NormConfig:
        if self.bias is None:
            self.bias = KINDS[self.kind].bias
        if self.impl == "cpp" and "cpp" not in KINDS[self.kind].kernels:
            raise ValueError(
                f"model.norm.impl: cpp is ablate's kernel for {', '.join(with_kernel('cpp'))}; "
                f"for {self.kind} use auto, torch or reference"
            )
        return self

    @model_validator(mode="after")
    def _placement_keys(self) -> NormConfig:
        if self.mix_post_layers and self.placement != "pre":
            raise ValueError(
                "model.norm.mix_post_layers: Mix-LN puts Post-Norm before Pre-Norm layers; it "
                f"needs placement pre, not {self.placement}"
            )
        if self.depth_scale and self.placement not in DEPTH_SCALED:
            raise ValueError(
                "model.norm.depth_scale: scales the norm before each sublayer; placement "
                f"{self.placement} has none (allowed: {', '.join(DEPTH_SCALED)})"
            )
        return self


ModelSource = Literal["ablate", "litgpt", "python"]
FACTORY_PATTERN = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
# Fields of litgpt's Config that ablate sets itself: the context from model.seq_len, the
# vocabulary from the data.
LITGPT_SET_BY_ABLATE = ("block_size", "vocab_size", "padded_vocab_size")
# ModelConfig keys that only ablate's own model (and a python factory) reads: a litgpt model
# takes its shape and norms from model.litgpt, so these must stay at their defaults there.
ABLATE_MODEL_KEYS = (
    "d_model",
    "n_layers",
    "n_heads",
    "d_ff",
    "dropout",
    "tie_weights",
    "mlp",
    "position",
    "linear_bias",
    "softcap_attn",
    "softcap_output",
    "norm",
)


class LitgptSection(BaseModel):
    """``model.litgpt``: a litgpt config by ``name`` and any of its own fields beside it
    (``n_layer``, ``n_embd``, ``norm_class_name``, ...), checked against litgpt when the
    experiment starts (:mod:`ablate.nn.sources`)."""

    model_config = ConfigDict(extra="allow", validate_assignment=True)

    name: str = Field(description="a name litgpt knows (litgpt.Config.from_name)")

    @model_validator(mode="after")
    def _not_set_by_ablate(self) -> LitgptSection:
        for key in LITGPT_SET_BY_ABLATE:
            if key in (self.model_extra or {}):
                raise ValueError(
                    f"model.litgpt.{key}: set by ablate (the context from model.seq_len, the "
                    "vocabulary from the data); leave it out"
                )
        return self

    def fields(self) -> dict[str, object]:
        """The litgpt Config fields given beside the name."""
        return dict(self.model_extra or {})


class ModelConfig(StrictSection):
    """Decoder-only transformer shape and block choices; the norm is a sub-section.

    The defaults are a GPT-2-style block (learned positions, GELU MLP, biases); ``position:
    rope``, ``mlp: swiglu`` and ``linear_bias: false`` make it LLaMA-style, each on its own.
    ``source`` says whose model this is: ablate's own, a litgpt config (``litgpt``), or a
    user's factory (``factory``); see :mod:`ablate.nn.sources`.
    """

    d_model: int = Field(128, ge=8, le=8192)
    n_layers: int = Field(4, ge=1, le=128)
    n_heads: int = Field(4, ge=1, le=128)
    d_ff: int | None = Field(None, ge=8, description="MLP width; default 4 * d_model")
    seq_len: int = Field(128, ge=2, le=65536)
    dropout: float = Field(0.0, ge=0, lt=1)
    tie_weights: bool = True
    init_std: float = Field(0.02, gt=0, le=1)
    mlp: Literal["gelu", "swiglu"] = Field(
        "gelu", description="swiglu: SiLU-gated, hidden 2/3 of d_ff (same parameter count)"
    )
    position: Literal["learned", "rope"] = Field(
        "learned", description="learned absolute embeddings, or rotary on queries and keys"
    )
    linear_bias: bool = Field(True, description="biases in the attention and MLP linear layers")
    softcap_attn: float | None = Field(
        None,
        gt=0,
        le=1e4,
        description="soft-cap the attention logits: c tanh(s / c) (Gemma 2: 50); null: none",
    )
    softcap_output: float | None = Field(
        None,
        gt=0,
        le=1e4,
        description="soft-cap the output logits: c tanh(z / c) (Gemma 2: 30); null: none",
    )
    norm: NormConfig = Field(default_factory=NormConfig)
    source: ModelSource = Field(
        "ablate", description="ablate's model, a litgpt config, or a python factory"
    )
    litgpt: LitgptSection | None = Field(
        None, description="source litgpt: name plus litgpt Config fields"
    )
    factory: str | None = Field(
        None, description="source python: package.module:function returning the model"
    )

    def norm_kind(self) -> str:
        """The norm as the run records it: ``model.norm.kind``, or for a litgpt model its
        ``norm_class_name`` (``config default`` when the config's own is kept)."""
        if self.litgpt is not None:
            return str(self.litgpt.fields().get("norm_class_name", "config default"))
        return self.norm.kind

    def norm_placement(self) -> str:
        """``model.norm.placement`` for ablate's model; the source's name (``litgpt``,
        ``python``) for a model that places its norms itself."""
        return self.norm.placement if self.source == "ablate" else self.source

    @model_validator(mode="after")
    def _source_keys(self) -> ModelConfig:
        if (self.source == "litgpt") != (self.litgpt is not None):
            raise ValueError(
                "model.litgpt: needed with model.source: litgpt and only there "
                f"(source is {self.source})"
            )
        if (self.source == "python") != (self.factory is not None):
            raise ValueError(
                "model.factory: needed with model.source: python and only there "
                f"(source is {self.source})"
            )
        if self.factory is not None and not FACTORY_PATTERN.match(self.factory):
            raise ValueError(f"model.factory: {self.factory!r} is not package.module:function")
        if self.source == "litgpt":
            defaults = ModelConfig()
            for key in ABLATE_MODEL_KEYS:
                if getattr(self, key) != getattr(defaults, key):
                    raise ValueError(
                        f"model.{key}: ablate's model only; a litgpt model takes its shape and "
                        "norms from model.litgpt (n_layer, n_embd, n_head, norm_class_name, ...)"
                    )
        return self

    @model_validator(mode="after")
    def _heads_divide(self) -> ModelConfig:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"model.d_model ({self.d_model}) must be divisible by model.n_heads "
                f"({self.n_heads})"
            )
        if self.norm.mix_post_layers >= self.n_layers:
            raise ValueError(
                f"model.norm.mix_post_layers ({self.norm.mix_post_layers}) must be below "
                f"model.n_layers ({self.n_layers}); all layers Post-Norm is placement post"
            )
        if self.position == "rope" and (self.d_model // self.n_heads) % 2:
            raise ValueError(
                f"model.position: rope rotates pairs of features; d_model / n_heads = "
                f"{self.d_model // self.n_heads} must be even"
            )
        return self


class StabilityConfig(StrictSection):
    """The stability criterion (:mod:`ablate.core.stability`): when a run diverged or collapsed."""

    threshold: float | None = Field(
        None,
        gt=0,
        description="train loss above this diverges; default: the run's start loss "
        "max(ln(vocab), loss of step 1) + divergence_margin",
    )
    divergence_margin: float = Field(
        0.5, ge=0, le=100, description="default threshold: this far above the start loss"
    )
    after_warmup: bool = True
    window: int = Field(
        5, ge=1, le=1000, description="steps averaged before comparing with the threshold"
    )
    floor: Literal["unigram", "initial"] = Field(
        "unigram",
        description="what a run must beat: the corpus's unigram cross-entropy, or ln(vocab)",
    )
    final_margin: float = Field(
        0.1, ge=0, description="collapsed if the final val loss >= floor - final_margin"
    )


class ProbeConfig(StrictSection):
    """What :class:`ablate.training.probes.ModelProbe` measures, and how often (docs/probes.md)."""

    interval: int = Field(
        25, ge=0, description="optimizer steps between probe steps (0 disables the probes)"
    )
    attention: bool = Field(
        True, description="also compute each layer's largest attention logit (one extra QK^T)"
    )


class TrainConfig(StrictSection):
    """Optimizer, schedule, budget, precision and evaluation cadence."""

    batch_size: int = Field(32, ge=1, le=65536)
    tokens: int = Field(600_000, ge=1, description="token budget: steps = tokens // (batch*seq)")
    lr: float = Field(1e-3, gt=0, le=100)
    min_lr_ratio: float = Field(0.1, ge=0, le=1)
    warmup_steps: int = Field(20, ge=0)
    schedule: Literal["cosine", "constant"] = "cosine"
    weight_decay: float = Field(0.1, ge=0)
    beta1: float = Field(0.9, ge=0, lt=1)
    beta2: float = Field(0.95, ge=0, lt=1)
    adam_eps: float = Field(
        1e-8, gt=0, le=1, description="AdamW's eps (1e-8 is 0 in fp16: 16-true needs ~1e-4)"
    )
    grad_clip: float | None = Field(1.0, gt=0, description="max grad norm; null disables")
    z_loss: float = Field(
        0.0,
        ge=0,
        le=1,
        description="coefficient of the auxiliary loss mean(logsumexp(logits)^2) added to the "
        "training objective (PaLM: 1e-4); the logged losses stay cross-entropy; 0: none",
    )
    precision: Precision = "32"
    eval_interval: int = Field(25, ge=1, description="optimizer steps between evaluations")
    eval_batches: int = Field(8, ge=1, le=10_000)
    final_eval: Literal["windows", "split"] = Field(
        "windows",
        description="the final val loss over the eval_batches windows, or over the whole"
        " validation split (every full batch of non-overlapping windows)",
    )
    stability: StabilityConfig = Field(default_factory=StabilityConfig)
    probes: ProbeConfig = Field(default_factory=ProbeConfig)


class RunConfig(StrictSection):
    """Everything one training run needs, after a variant's overrides."""

    data: DataConfig = Field(default_factory=DataConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    runtime: RuntimeConfig = Field(default_factory=RuntimeConfig)

    @model_validator(mode="after")
    def _batch_splits_evenly(self) -> RunConfig:
        world = self.runtime.processes()
        if self.train.batch_size % world:
            raise ValueError(
                f"train.batch_size ({self.train.batch_size}) must split evenly among the "
                f"{world} processes of runtime.devices x runtime.num_nodes"
            )
        return self

    def steps(self) -> int:
        """Optimizer steps that the token budget buys at this batch and sequence size."""
        return self.train.tokens // self.tokens_per_step()

    def tokens_per_step(self) -> int:
        """Tokens consumed by one optimizer step."""
        return self.train.batch_size * self.model.seq_len
