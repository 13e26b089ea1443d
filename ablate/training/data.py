"""Corpora, tokenization, the train/val split and the batch order.

Four sources (``data.source``):

- ``builtin_text`` (default): the English prose of ``pydoc_data.topics``, which ships with every
  CPython, byte-level (vocabulary 256);
- ``synthetic``: a random first-order Markov chain with a known entropy rate (the loss floor);
- ``text_file``: any local UTF-8 file, byte- or char-level;
- ``tokens_file``: pre-tokenized ids, raw uint16 (nanoGPT's ``train.bin``) or ``.npy``.

The split is the last ``val_fraction`` of the tokens. The batch order is a table of window
offsets drawn once, up front, from a ``torch.Generator`` seeded by the data seed: batch *i* is
the same whatever the variant, the global RNG, evaluation, the number of loader workers or the
point a run resumed from. Validation uses fixed, evenly spaced windows. Under DDP
(:class:`ablate.training.task.RunData`) process *r* of *W* takes sequences ``r*B/W .. (r+1)*B/W`` of
every batch, so the global batch sequence is the same as with one process.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ablate.core.config import DataConfig


class DataError(ValueError):
    """A corpus that cannot be used, as one line naming the file and the problem."""


@dataclass(frozen=True)
class Corpus:
    """Token ids split into train and val, with the vocabulary size and provenance."""

    train: torch.Tensor  # (N_train,) int64
    val: torch.Tensor  # (N_val,) int64
    vocab_size: int
    digest: str
    entropy_floor: float | None = None  # nats/token, known only for the synthetic source
    unigram_loss: float = float("nan")  # nats/token: train-split frequencies scored on val


def unigram_loss(train: np.ndarray, val: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy (nats/token) on ``val`` of the token frequencies of ``train`` with add-½
    smoothing: what a model that learned only unigram statistics scores (the trivial floor)."""
    counts = np.bincount(train, minlength=vocab_size).astype(np.float64) + 0.5
    log_probs = np.log(counts / counts.sum())
    return float(-log_probs[val].mean())


def builtin_text() -> bytes:
    """The ~0.47 MB of English help text in ``pydoc_data.topics``, in a fixed order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics)).encode("utf-8")


def markov_chain(vocab: int, branching: int, seed: int) -> torch.Tensor:
    """A (vocab, vocab) transition matrix where each state moves to ``branching`` random states."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.zeros(vocab, vocab, dtype=torch.float64)
    for state in range(vocab):
        targets = torch.randperm(vocab, generator=g)[:branching]
        weights = torch.rand(branching, generator=g, dtype=torch.float64) + 0.1
        probs[state, targets] = weights / weights.sum()
    return probs


def entropy_rate(transitions: torch.Tensor, steps: int = 2000) -> float:
    """Entropy rate (nats/token) of a Markov chain: sum_s pi(s) H(P[s]) at the stationary pi."""
    n = transitions.shape[0]
    pi = torch.full((n,), 1.0 / n, dtype=torch.float64)
    for _ in range(steps):
        pi = pi @ transitions
    logs = torch.where(transitions > 0, transitions.log(), torch.zeros_like(transitions))
    row_entropy = -(transitions * logs).sum(dim=1)
    return float((pi * row_entropy).sum())


def synthetic_tokens(cfg: DataConfig) -> tuple[np.ndarray, float]:
    """Sample ``synthetic_tokens`` ids from the chain; return them and the chain's entropy rate."""
    transitions = markov_chain(cfg.synthetic_vocab, cfg.synthetic_branching, cfg.synthetic_seed)
    g = torch.Generator().manual_seed(cfg.synthetic_seed + 1)
    uniforms = torch.rand(cfg.synthetic_tokens, generator=g, dtype=torch.float64).numpy()
    cumulative = transitions.cumsum(dim=1).numpy()
    cumulative[:, -1] = 1.0
    ids = np.empty(cfg.synthetic_tokens, dtype=np.int64)
    state = 0
    for i, u in enumerate(uniforms):
        state = int(np.searchsorted(cumulative[state], u, side="right"))
        ids[i] = state
    return ids, entropy_rate(transitions)


def _read_text(path: Path, tokenizer: str) -> tuple[np.ndarray, int]:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte {exc.start}); use data.source: tokens_file for ids"
        ) from None
    if tokenizer == "byte":
        return np.frombuffer(raw, dtype=np.uint8).astype(np.int64), 256
    alphabet = sorted(set(text))
    index = {ch: i for i, ch in enumerate(alphabet)}
    return np.fromiter((index[ch] for ch in text), dtype=np.int64, count=len(text)), len(alphabet)


def _read_tokens(path: Path, vocab_size: int | None) -> tuple[np.ndarray, int]:
    if path.suffix == ".npy":
        try:
            ids = np.load(path, allow_pickle=False)
        except ValueError:
            raise DataError(f"{path}: not a readable .npy array (numpy.save format)") from None
        if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
            raise DataError(f"{path}: must hold a 1-D integer array, got {ids.dtype}{ids.shape}")
    else:
        if path.stat().st_size % 2:
            raise DataError(f"{path}: raw token files are uint16; the size must be even")
        ids = np.fromfile(path, dtype=np.uint16)
    ids = ids.astype(np.int64)
    if ids.size and ids.min() < 0:
        raise DataError(f"{path}: token ids must be >= 0, found {ids.min()}")
    top = int(ids.max()) + 1 if ids.size else 0
    vocab = vocab_size or top
    if top > vocab:
        raise DataError(f"{path}: token id {top - 1} >= data.vocab_size {vocab}")
    return ids, vocab


def load_tokens(cfg: DataConfig) -> tuple[np.ndarray, int, float | None]:
    """All token ids of the configured source, its vocabulary size and entropy floor if known."""
    if cfg.source == "synthetic":
        ids, floor = synthetic_tokens(cfg)
        return ids, cfg.synthetic_vocab, floor
    if cfg.source == "builtin_text":
        return np.frombuffer(builtin_text(), dtype=np.uint8).astype(np.int64), 256, None
    path = Path(cfg.path or "")
    if not path.is_file():
        raise DataError(f"data.path: file not found: {path}")
    if cfg.source == "text_file":
        ids, vocab = _read_text(path, cfg.tokenizer)
    else:
        ids, vocab = _read_tokens(path, cfg.vocab_size)
    return ids, vocab, None


def load_corpus(cfg: DataConfig, seq_len: int) -> Corpus:
    """Load, split and check the corpus: both splits must hold at least one window."""
    ids, vocab, floor = load_tokens(cfg)
    n_val = int(len(ids) * cfg.val_fraction)
    train, val = ids[: len(ids) - n_val], ids[len(ids) - n_val :]
    if len(val) < seq_len + 1 or len(train) < seq_len + 1:
        raise DataError(
            f"data: {len(ids)} tokens split into {len(train)} train / {len(val)} val, "
            f"too few for model.seq_len {seq_len} (each split needs seq_len + 1)"
        )
    digest = hashlib.sha256(ids.astype(np.int64).tobytes()).hexdigest()[:16]
    return Corpus(
        torch.from_numpy(train.copy()),
        torch.from_numpy(val.copy()),
        vocab,
        digest,
        floor,
        unigram_loss(train, val, vocab),
    )


def batch_offsets(
    n_tokens: int, seq_len: int, batch_size: int, steps: int, seed: int
) -> torch.Tensor:
    """Start offsets (steps, batch) of all training windows, from a generator seeded by ``seed``."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_tokens - seq_len, (steps, batch_size), generator=g)


def eval_offsets(n_tokens: int, seq_len: int, batch_size: int, batches: int) -> torch.Tensor:
    """Evenly spaced validation windows (batches, batch): fixed, no randomness."""
    count = batches * batch_size
    starts = torch.linspace(0, n_tokens - seq_len - 1, count).round().long()
    return starts.view(batches, batch_size)


def gather_windows(tokens: torch.Tensor, offsets: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Windows of ``seq_len + 1`` ids at ``offsets`` (B,) -> (B, seq_len + 1)."""
    return tokens[offsets.unsqueeze(1) + torch.arange(seq_len + 1)]


class WindowBatches(Dataset):
    """Batch ``i`` is the windows at row ``i`` of an offset table; indexable, order-free."""

    def __init__(self, tokens: torch.Tensor, offsets: torch.Tensor, seq_len: int) -> None:
        self.tokens = tokens
        self.offsets = offsets
        self.seq_len = seq_len

    def __len__(self) -> int:
        return self.offsets.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return gather_windows(self.tokens, self.offsets[i], self.seq_len)


def batch_digest(corpus: Corpus, offsets: torch.Tensor) -> str:
    """Digest of the batch sequence: the corpus and the window table fix every batch."""
    h = hashlib.sha256(corpus.digest.encode())
    h.update(offsets.numpy().astype(np.int64).tobytes())
    return h.hexdigest()[:16]
