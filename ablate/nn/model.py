"""A small decoder whose norm kind and placement are parameters, and its fair init.

The block is GPT-2-style by default (learned positions, GELU MLP, biases in every linear layer)
and LLaMA-style by three keys, each ablatable on its own: ``position: rope``
(:class:`~ablate.nn.attention.Rotary`), ``mlp: swiglu`` (:class:`MLP`, same parameter count) and
``linear_bias: false``.

Placements: Pre-Norm, Post-Norm, Sandwich (Peri-LN), DeepNorm, reordered (OLMo 2) and none (see
:class:`Block`), Mix-LN's Post-then-Pre layers and LayerNorm Scaling's 1/sqrt(layer); any norm
kind of :mod:`ablate.nn.norms` fits any placement, and ``qk_norm`` adds per-head norms on queries
and keys. ``softcap_attn`` and ``softcap_output`` soft-cap the attention and output logits
(Gemma 2).

Everything but the normalization is fixed by :class:`~ablate.core.config.ModelConfig`. Parameters
are initialized *by name*: each one draws from its own generator seeded from ``(seed, name)``, so
a variant that owns an extra parameter (LayerNorm's bias) leaves every shared parameter bitwise
identical to the other variant's. :func:`shared_init_digest` hashes the parameters that do not
belong to a norm, which is what any two norm variants of the same shape share.
:func:`parameter_groups` splits the parameters into weight-decay and no-decay groups (nanoGPT).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ablate.core.config import ModelConfig
from ablate.nn.attention import CausalSelfAttention, KVCache, softcap
from ablate.nn.norms import build_norm, is_norm

FINAL_NORM_PLACEMENTS = ("pre", "sandwich", "reordered")
DEEPNORM_SCALED = ("attn.proj.weight", "mlp.fc.weight", "mlp.proj.weight")


def make_norm(cfg: ModelConfig, site: str, dim: int | None = None) -> nn.Module:
    """The configured norm at ``site`` (attn, mlp, final) over ``dim`` features (default
    d_model)."""
    return build_norm(cfg.norm, dim or cfg.d_model, site)


def depth_scale(layer: int) -> float:
    """LayerNorm Scaling's factor of block ``layer`` (0-based): 1/sqrt(layer + 1) (Sun et al.
    2025, "The Curse of Depth")."""
    return 1.0 / math.sqrt(layer + 1)


def deepnorm_alpha(n_layers: int) -> float:
    """DeepNet's residual scale for a decoder-only model: alpha = (2N)^(1/4) (Wang et al. 2022)."""
    return (2 * n_layers) ** 0.25


def deepnorm_beta(n_layers: int) -> float:
    """DeepNet's init gain of the value, output and MLP matrices: beta = (8N)^(-1/4)."""
    return (8 * n_layers) ** -0.25


def swiglu_hidden(d_ff: int) -> int:
    """SwiGLU's hidden width for a GELU MLP of width ``d_ff``: round(2/3 d_ff), so its three
    matrices (3 d h) hold as many weights as GELU's two (2 d d_ff), to within 1%."""
    return round(2 * d_ff / 3)


class MLP(nn.Module):
    """The feed-forward network: GELU, ``proj(gelu(fc(x)))``, or SwiGLU (Shazeer 2020),
    ``proj(silu(gate) * up)`` with ``fc`` holding the gate and up matrices stacked."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        width = cfg.d_ff or 4 * cfg.d_model
        self.gated = cfg.mlp == "swiglu"
        hidden = swiglu_hidden(width) if self.gated else width
        self.fc = nn.Linear(cfg.d_model, 2 * hidden if self.gated else hidden, bias=cfg.linear_bias)
        self.proj = nn.Linear(hidden, cfg.d_model, bias=cfg.linear_bias)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc(x)
        if self.gated:
            gate, up = h.chunk(2, dim=-1)
            return self.drop(self.proj(F.silu(gate) * up))
        return self.drop(self.proj(F.gelu(h)))


class Block(nn.Module):
    """One transformer block, the ``layer``-th (0-based); the placement decides where its norms
    sit.

    ``pre``: x + f(norm(x)); ``post``: norm(x + f(x)); ``sandwich``: x + norm_out(f(norm(x)));
    ``deepnorm``: norm(alpha * x + f(x)); ``reordered``: x + norm(f(x)); ``none``: x + f(x).
    ``f`` is attention, then the MLP. Under Mix-LN (``mix_post_layers``) the first layers are
    ``post``; under ``depth_scale`` the norm before ``f`` is scaled by 1/sqrt(layer + 1).
    """

    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.placement = cfg.norm.placement_of(layer)
        has_norm = self.placement != "none"
        self.norm_attn = make_norm(cfg, "attn") if has_norm else None
        self.attn = CausalSelfAttention(cfg)
        self.norm_attn_out = make_norm(cfg, "attn") if self.placement == "sandwich" else None
        self.norm_mlp = make_norm(cfg, "mlp") if has_norm else None
        self.mlp = MLP(cfg)
        self.norm_mlp_out = make_norm(cfg, "mlp") if self.placement == "sandwich" else None
        self.drop = nn.Dropout(cfg.dropout)
        self.alpha = deepnorm_alpha(cfg.n_layers) if self.placement == "deepnorm" else 1.0
        self.input_scale = depth_scale(layer) if cfg.norm.depth_scale else 1.0

    def forward(
        self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0
    ) -> torch.Tensor:
        def attend(h: torch.Tensor) -> torch.Tensor:
            return self.drop(self.attn(h, cache, layer))

        x = self.sublayer(x, attend, self.norm_attn, self.norm_attn_out)
        return self.sublayer(x, self.mlp, self.norm_mlp, self.norm_mlp_out)

    def sublayer(
        self,
        x: torch.Tensor,
        f: Callable[[torch.Tensor], torch.Tensor],
        norm: nn.Module | None,
        norm_out: nn.Module | None,
    ) -> torch.Tensor:
        """One residual line under this block's placement."""
        if norm is None:  # placement none
            return x + f(x)
        if self.placement == "pre":
            return x + f(self.scaled(norm(x)))
        if self.placement == "sandwich":
            assert norm_out is not None
            return x + norm_out(f(self.scaled(norm(x))))
        if self.placement == "reordered":
            return x + norm(f(x))
        return norm(self.alpha * x + f(x))  # post (alpha 1) and deepnorm

    def scaled(self, h: torch.Tensor) -> torch.Tensor:
        """An input norm's output under LayerNorm Scaling (``h`` itself without it)."""
        return h * self.input_scale if self.input_scale != 1.0 else h


class GPT(nn.Module):
    """Token (+ learned position) embeddings, ``n_layers`` blocks, a final norm where needed, LM
    head (its logits soft-capped under ``softcap_output``); under ``position: rope`` positions
    enter in each attention instead.

    Pre-Norm (Mix-LN's too), Sandwich and reordered end with a final norm on the residual
    stream; Post-Norm and DeepNorm blocks already end in a norm, and the no-norm baseline has
    none.
    """

    def __init__(self, cfg: ModelConfig, vocab_size: int) -> None:
        super().__init__()
        self.cfg = cfg
        self.vocab_size = vocab_size
        self.tok_emb = nn.Embedding(vocab_size, cfg.d_model)
        learned = cfg.position == "learned"
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.d_model) if learned else None
        self.drop = nn.Dropout(cfg.dropout)
        self.blocks = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        final = cfg.norm.placement in FINAL_NORM_PLACEMENTS
        self.norm_f = make_norm(cfg, "final") if final else nn.Identity()
        self.head = nn.Linear(cfg.d_model, vocab_size, bias=False)
        if cfg.tie_weights:
            self.head.weight = self.tok_emb.weight

    def forward(self, idx: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        """Logits (B, T, V) for token ids ``idx`` (B, T); with a ``cache`` (decoding), ``idx``
        continues the cached positions, and the cache is extended by them."""
        start = cache.length if cache is not None else 0
        x = self.tok_emb(idx)  # (B, T, D)
        if self.pos_emb is not None:
            positions = torch.arange(start, start + idx.shape[1], device=idx.device)
            x = x + self.pos_emb(positions)
        x = self.drop(x)
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i)
        if cache is not None:
            cache.length += idx.shape[1]
        return softcap(self.head(self.norm_f(x)), self.cfg.softcap_output)


def next_token_loss(model: nn.Module, batch: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of any model (ids (B, T) -> logits (B, T, V)) over a
    batch of (B, T+1) token ids."""
    return next_token_objective(model, batch)[1]


def next_token_objective(
    model: nn.Module, batch: torch.Tensor, z_loss: float = 0.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The training objective and the cross-entropy of :func:`next_token_loss`: the two are
    one tensor without ``z_loss``; with it the objective adds ``z_loss`` * mean(log² Z), Z
    each position's softmax normalizer (PaLM's z-loss, which keeps log Z near 0)."""
    logits = model(batch[:, :-1]).flatten(0, 1).float()
    loss = F.cross_entropy(logits, batch[:, 1:].flatten())
    if not z_loss:
        return loss, loss
    return loss + z_loss * torch.logsumexp(logits, dim=-1).pow(2).mean(), loss


def name_seed(seed: int, name: str) -> int:
    """A 63-bit generator seed derived from the run seed and a parameter's name."""
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def gpt2_std(name: str, init_std: float, n_layers: int) -> float:
    """GPT-2 scheme: N(0, init_std), the residual output projections (``*proj.weight``: ablate's
    and litgpt's attention and MLP outputs) scaled by 1/sqrt(2 * n_layers)."""
    if name.endswith("proj.weight"):
        return init_std / math.sqrt(2 * n_layers)
    return init_std


def _init_std(name: str, cfg: ModelConfig) -> float:
    """:func:`gpt2_std`, except under DeepNorm, which replaces that down-scaling by its own:
    beta on the attention output and both MLP matrices (and on the value rows of ``qkv``, see
    :func:`init_parameters`)."""
    if cfg.norm.placement == "deepnorm":
        scaled = name.endswith(DEEPNORM_SCALED)
        return cfg.init_std * deepnorm_beta(cfg.n_layers) if scaled else cfg.init_std
    return gpt2_std(name, cfg.init_std, cfg.n_layers)


@torch.no_grad()
def init_by_name(model: nn.Module, seed: int, std: Callable[[str], float]) -> None:
    """Initialize every parameter of any model from its own ``(seed, name)`` generator.

    Norms reset themselves (gain one, bias zero, DyT's alpha); other biases start at zero;
    every other parameter (matrices, embeddings) is N(0, ``std(name)``).
    """
    norm_params = norm_parameter_names(model)
    for module in model.modules():
        reset = getattr(module, "reset_parameters", None)
        if is_norm(module) and callable(reset):
            reset()
    for name, param in model.named_parameters():
        if name in norm_params:
            continue
        if name.endswith("bias"):
            param.zero_()
            continue
        generator = torch.Generator().manual_seed(name_seed(seed, name))
        sample = torch.randn(param.shape, generator=generator, dtype=torch.float32)
        param.copy_(sample * std(name))


@torch.no_grad()
def init_parameters(model: GPT, seed: int) -> None:
    """:func:`init_by_name` with ablate's scheme (:func:`_init_std`). Under DeepNorm the value
    third of each ``qkv`` weight is scaled by beta as well (queries and keys keep
    ``init_std``, as in DeepNet)."""
    cfg = model.cfg
    init_by_name(model, seed, lambda name: _init_std(name, cfg))
    if cfg.norm.placement != "deepnorm":
        return
    for name, param in model.named_parameters():
        if name.endswith("attn.qkv.weight"):
            param[2 * cfg.d_model :].mul_(deepnorm_beta(cfg.n_layers))


def build_gpt(cfg: ModelConfig, vocab_size: int, seed: int) -> GPT:
    """ablate's own model for ``cfg`` with parameters initialized from ``seed`` by name."""
    model = GPT(cfg, vocab_size)
    init_parameters(model, seed)
    return model


def norm_parameter_names(model: nn.Module) -> set[str]:
    """Names of all parameters owned by normalization layers."""
    return {
        f"{mod_name}.{p_name}"
        for mod_name, module in model.named_modules()
        if is_norm(module)
        for p_name, _ in module.named_parameters(recurse=False)
    }


def parameter_digests(model: nn.Module) -> dict[str, str]:
    """sha256 (first 16 hex digits) of each parameter's bytes, by name."""
    return {
        name: hashlib.sha256(p.detach().cpu().contiguous().numpy().tobytes()).hexdigest()[:16]
        for name, p in model.named_parameters()
    }


def shared_init_digest(model: nn.Module) -> str:
    """One digest over every non-norm parameter (name and bytes): equal across norm variants."""
    norm_params = norm_parameter_names(model)
    h = hashlib.sha256()
    for name, digest in sorted(parameter_digests(model).items()):
        if name not in norm_params:
            h.update(f"{name}={digest};".encode())
    return h.hexdigest()[:16]


def count_parameters(model: nn.Module) -> int:
    """Number of distinct trainable parameters (tied weights counted once)."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """nanoGPT split: matrices and embeddings decay; gains, biases and other vectors do not."""
    params = [p for p in model.parameters() if p.requires_grad]
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
