"""Corpora, tokenization, the train/val split and the batch order.

Four sources (``data.source``):

- ``builtin_text`` (default): the English prose of ``pydoc_data.topics``, which ships with every
  CPython, byte-level (vocabulary 256);
- ``synthetic``: a random first-order Markov chain with a known entropy rate (the loss floor);
- ``text_file``: any local UTF-8 file, byte- or char-level;
- ``tokens_file``: pre-tokenized ids of any size, one file or a shard set (a glob or a list,
  read in order as one run of ids): raw uint16 (nanoGPT's ``train.bin``) or uint32, ``.npy``,
  or llm.c's headered shards (modded-nanogpt's fineweb10B); memory-mapped, never read whole
  (:mod:`ablate.training.tokens`); validation from the same ids (the last ``val_fraction``) or
  from ``data.val_path`` (nanoGPT's ``val.bin``, a validation shard).

The split is the last ``val_fraction`` of the tokens; with ``test_fraction`` a test split is held
out after it (train | val | test), which only evaluations score and no stage selects on. The
batch order is a table of window offsets drawn once, up front, from a ``torch.Generator``
seeded by the data seed: batch *i* is the same whatever the variant, the global RNG,
evaluation, the number of loader workers or the point a run resumed from. Validation (and
test) uses fixed, evenly spaced windows. Under DDP (:class:`ablate.training.task.RunData`)
process *r* of *W* takes sequences ``r*B/W .. (r+1)*B/W`` of every batch, so the global batch
sequence is the same as with one process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sized
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ablate.core.config import DataConfig
from ablate.core.errors import DataError
from ablate.core.plan import RunSpec
from ablate.nn.model import name_seed
from ablate.training import token_formats, tokens


@dataclass(frozen=True)
class Corpus:
    """Token ids split into train and val, with the vocabulary size and provenance."""

    train: torch.Tensor | tokens.MappedIds  # (N_train,) int64, or a token file's ids, mapped
    val: torch.Tensor | tokens.MappedIds
    vocab_size: int
    digest: str
    entropy_floor: float | None = None  # nats/token, known only for the synthetic source
    unigram_loss: float = float("nan")  # nats/token: train-split frequencies scored on val
    tokens_per_byte: float | None = None  # for text: ids per UTF-8 byte (1 byte-level)
    test: torch.Tensor | None = None  # the held-out test split (``data.test_fraction``), if any


def unigram_loss(train: np.ndarray, val: np.ndarray, vocab_size: int) -> float:
    """Cross-entropy (nats/token) on ``val`` of the token frequencies of ``train`` with add-½
    smoothing: what a model that learned only unigram statistics scores (the trivial floor)."""
    return counted_loss(
        np.bincount(train, minlength=vocab_size), np.bincount(val, minlength=vocab_size)
    )


def counted_loss(train_counts: np.ndarray, val_counts: np.ndarray) -> float:
    """:func:`unigram_loss` from each split's counts of every id."""
    counts = train_counts.astype(np.float64) + 0.5
    log_probs = np.log(counts / counts.sum())
    return float(-(val_counts * log_probs).sum() / val_counts.sum())


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


def source_text(cfg: DataConfig) -> tuple[bytes, str]:
    """The bytes and the text of a text source (the built-in help text, or a UTF-8 file)."""
    if cfg.source == "builtin_text":
        raw = builtin_text()
        return raw, raw.decode("utf-8")
    path = Path(cfg.path or "")
    if not path.is_file():
        raise DataError(f"data.path: file not found: {path}")
    raw = path.read_bytes()
    try:
        return raw, raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DataError(
            f"{path}: not UTF-8 text (byte {exc.start}); use data.source: tokens_file for ids"
        ) from None


def load_tokens(cfg: DataConfig) -> tuple[np.ndarray, int, float | None, float | None]:
    """All token ids of an in-memory source (builtin, synthetic, text file), its vocabulary
    size, its entropy floor if known and, for text, ids per byte."""
    if cfg.source == "synthetic":
        ids, floor = synthetic_tokens(cfg)
        return ids, cfg.synthetic_vocab, floor, None
    raw, text = source_text(cfg)
    if cfg.tokenizer == "file":
        from ablate.training.text_datasets import load_tokenizer

        tokenizer = load_tokenizer(cfg.tokenizer_file or "")
        ids = np.asarray(tokenizer.encode(text).ids, dtype=np.int64)
        return ids, tokenizer.get_vocab_size(), None, len(ids) / len(raw)
    if cfg.tokenizer == "char" and cfg.source == "text_file":
        alphabet = sorted(set(text))
        index = {ch: i for i, ch in enumerate(alphabet)}
        ids = np.fromiter((index[ch] for ch in text), dtype=np.int64, count=len(text))
        return ids, len(alphabet), None, len(ids) / len(raw)
    return np.frombuffer(raw, dtype=np.uint8).astype(np.int64), 256, None, 1.0


def ids_digest(ids: np.ndarray) -> str:
    """sha256 prefix of in-memory ids as int64 (a token file's equals it: :mod:`tokens`)."""
    return hashlib.sha256(ids.astype(np.int64).tobytes()).hexdigest()[:16]


def _split(
    ids: np.ndarray, val_fraction: float, test_fraction: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Train, val and test ids: the last ``test_fraction`` of the ids for testing (None when
    0), the ``val_fraction`` before it for validation, the rest for training. The training part
    depends only on the sum of the fractions: splitting a validation split into val and test
    keeps every training batch."""
    n_held, n_test = int(len(ids) * (val_fraction + test_fraction)), int(len(ids) * test_fraction)
    end_val = len(ids) - n_test
    test = ids[end_val:] if test_fraction else None
    return ids[: len(ids) - n_held], ids[len(ids) - n_held : end_val], test


def _check_windows(train: Sized, val: Sized, seq_len: int) -> None:
    if len(val) < seq_len + 1 or len(train) < seq_len + 1:
        raise DataError(
            f"data: {len(train) + len(val)} tokens split into {len(train)} train / {len(val)} "
            f"val, too few for model.seq_len {seq_len} (each split needs seq_len + 1)"
        )


def files_of(value: str | list[str]) -> list[Path]:
    """``data.path`` or ``data.val_path`` as its files, in order (the loader expanded globs)."""
    return [Path(v) for v in ([value] if isinstance(value, str) else value)]


def token_file_corpus(cfg: DataConfig, seq_len: int) -> Corpus:
    """A ``tokens_file`` corpus, memory-mapped (:mod:`ablate.training.tokens`): ``data.path``
    (one file or a shard set) split by ``val_fraction``, or ``data.path`` for training and
    ``data.val_path`` for validation, which may share no file with it, by path or by content."""
    magics = tuple(cfg.header_magics)
    dtype = np.dtype(cfg.token_dtype)
    for key, needed in (("path", cfg.path), ("val_path", cfg.val_path)):
        for file in files_of(needed) if needed else []:
            if not file.is_file():
                raise DataError(f"data.{key}: file not found: {file}")
    try:
        whole = token_formats.open_set(files_of(cfg.path or ""), dtype, magics)
        val = None
        if cfg.val_path:
            val = token_formats.open_set(files_of(cfg.val_path), dtype, magics)
    except tokens.TokenFileError as exc:
        raise DataError(str(exc)) from None
    if (cfg.vocab_size or 0) > 1 << 16 and dtype.itemsize == 2:
        raw = [s.path for s in whole.spans if s.offset == 0 and s.path.suffix != ".npy"]
        if raw:
            raise DataError(
                f"{raw[0]}: raw ids read as uint16 for data.vocab_size {cfg.vocab_size:,}, "
                "over 65,536: set data.token_dtype: uint32"
            )
    return mapped_corpus(whole, val, cfg, seq_len, cfg.vocab_size)


def mapped_corpus(
    whole: tokens.TokenSet,
    val: tokens.TokenSet | None,
    cfg: DataConfig,
    seq_len: int,
    vocab_size: int | None,
    per_byte: float | None = None,
) -> Corpus:
    """A corpus of token files: ``whole`` split by ``val_fraction``, or ``whole`` for training
    and a separate ``val``; every id checked against ``vocab_size`` (else the vocabulary is the
    largest id + 1), digested, and the unigram floor counted (:func:`tokens.scan`)."""
    try:
        if val is None:
            train, val = whole.split(len(whole) - int(len(whole) * cfg.val_fraction))
        else:
            train = whole
        _check_windows(train, val, seq_len)
        vocab, digest = tokens.scan(train, val, vocab_size, separate=bool(cfg.val_path))
    except tokens.TokenFileError as exc:
        raise DataError(str(exc)) from None
    floor = counted_loss(tokens.unigram_counts(train, vocab), tokens.unigram_counts(val, vocab))
    return Corpus(
        tokens.MappedIds(train), tokens.MappedIds(val), vocab, digest, None, floor, per_byte
    )


def text_dataset_corpus(cfg: DataConfig, seq_len: int) -> Corpus:
    """A ``text_dataset`` corpus: its column tokenized once into cached token files
    (:mod:`ablate.training.text_datasets`), then mapped as a shard set (:func:`mapped_corpus`);
    validation from its last ``val_fraction`` or from ``data.val_path``, tokenized the same way."""
    from ablate.training import text_datasets  # pyarrow: only for this source

    if cfg.tokenizer == "file":
        encoder = text_datasets.Encoder.from_file(cfg.tokenizer_file or "", cfg.eos_token)
    elif cfg.tokenizer == "bpe":
        paths = files_of(cfg.path or "")
        encoder = text_datasets.Encoder.trained(paths, cfg.text_column, cfg.bpe_vocab_size)
    else:
        encoder = text_datasets.Encoder()
    found = {
        key: text_datasets.tokenized(files_of(value), cfg.text_column, encoder, cfg.vocab_size)
        for key, value in (("path", cfg.path), ("val_path", cfg.val_path))
        if value
    }
    if cfg.val_path:
        text_datasets.check_disjoint(files_of(cfg.path or ""), files_of(cfg.val_path))
    per_byte = None
    if found["path"].text_bytes:
        per_byte = sum(f.ids for f in found.values()) / sum(f.text_bytes for f in found.values())
    try:
        sets = {k: token_formats.open_set(f.files, np.dtype(f.dtype)) for k, f in found.items()}
    except tokens.TokenFileError as exc:
        raise DataError(str(exc)) from None
    vocab = cfg.vocab_size or (encoder.vocab_size if found["path"].text_bytes else None)
    return mapped_corpus(sets["path"], sets.get("val_path"), cfg, seq_len, vocab, per_byte)


def bpe_corpus(cfg: DataConfig, seq_len: int) -> Corpus:
    """A text split first, a byte-level BPE trained on the train part only (cached), both parts
    encoded with it (:mod:`ablate.training.bpe`)."""
    from ablate.training import bpe  # Hugging Face tokenizers: only for this source

    raw, text = source_text(cfg)
    train_text, val_text = bpe.split_text(text, cfg.val_fraction)
    tokenizer = bpe.cached_tokenizer(train_text, cfg.bpe_vocab_size)
    train, val = bpe.encode(tokenizer, train_text), bpe.encode(tokenizer, val_text)
    _check_windows(train, val, seq_len)
    vocab = tokenizer.get_vocab_size()
    ids = np.concatenate([train, val])
    return Corpus(
        torch.from_numpy(train),
        torch.from_numpy(val),
        vocab,
        ids_digest(ids),
        None,
        unigram_loss(train, val, vocab),
        len(ids) / len(raw),
    )


def load_corpus(cfg: DataConfig, seq_len: int) -> Corpus:
    """Load, split and check the corpus: both splits must hold at least one window."""
    if cfg.source == "tokens_file":
        return token_file_corpus(cfg, seq_len)
    if cfg.source == "text_dataset":
        return text_dataset_corpus(cfg, seq_len)
    if cfg.tokenizer == "bpe":
        return bpe_corpus(cfg, seq_len)
    ids, vocab, floor, per_byte = load_tokens(cfg)
    train, val, test = _split(ids, cfg.val_fraction, cfg.test_fraction)
    _check_windows(train, val, seq_len)
    if test is not None and len(test) < seq_len + 1:
        raise DataError(
            f"data.test_fraction: the test split holds {len(test)} tokens, too few for "
            f"model.seq_len {seq_len} (it needs seq_len + 1)"
        )
    return Corpus(
        torch.from_numpy(train.copy()),
        torch.from_numpy(val.copy()),
        vocab,
        ids_digest(ids),
        floor,
        unigram_loss(train, val, vocab),
        per_byte,
        None if test is None else torch.from_numpy(test.copy()),
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


def split_offsets(n_tokens: int, seq_len: int, batch_size: int) -> torch.Tensor:
    """The whole split as non-overlapping windows (each token predicted once), in every full
    batch of them: (batches, batch). The last partial batch (under ``batch_size`` windows) is
    left out, so every batch weighs the same in the mean."""
    windows = (n_tokens - 1) // seq_len
    batches = windows // batch_size
    if batches == 0:
        raise ValueError(
            f"the validation split ({n_tokens} tokens) holds no batch of {batch_size} windows"
            f" of {seq_len} tokens"
        )
    starts = torch.arange(batches * batch_size) * seq_len
    return starts.view(batches, batch_size)


def gather_windows(
    ids: torch.Tensor | tokens.MappedIds, offsets: torch.Tensor, seq_len: int
) -> torch.Tensor:
    """Windows of ``seq_len + 1`` ids at ``offsets`` (B,) -> (B, seq_len + 1), int64; from a
    token file only those windows' pages are read."""
    index = offsets.unsqueeze(1) + torch.arange(seq_len + 1)
    if isinstance(ids, torch.Tensor):
        return ids[index]
    return torch.from_numpy(ids[index.numpy()].astype(np.int64))


class WindowBatches(Dataset):
    """Batch ``i`` is the windows at row ``i`` of an offset table; indexable, order-free."""

    def __init__(self, ids: torch.Tensor | np.ndarray, offsets: torch.Tensor, seq_len: int) -> None:
        self.ids = ids
        self.offsets = offsets
        self.seq_len = seq_len

    def __len__(self) -> int:
        return self.offsets.shape[0]

    def __getitem__(self, i: int) -> torch.Tensor:
        return gather_windows(self.ids, self.offsets[i], self.seq_len)


def train_offsets_of(spec: RunSpec, corpus: Corpus) -> torch.Tensor:
    """A run's batch order over ``corpus``: from its data seed (a continued-training run draws
    from a generator of its own)."""
    cfg = spec.config
    data_seed = spec.data_seed if spec.init_from is None else name_seed(spec.data_seed, "continue")
    seq_len = cfg.model.seq_len
    return batch_offsets(len(corpus.train), seq_len, cfg.train.batch_size, cfg.steps(), data_seed)


def expected_data_digest(spec: RunSpec, corpus: Corpus) -> str:
    """The ``data_digest`` a run of ``spec`` trained on ``corpus`` records: a stored run whose
    digest differs was trained on other data."""
    return batch_digest(corpus, train_offsets_of(spec, corpus))


def batch_digest(corpus: Corpus, offsets: torch.Tensor) -> str:
    """Digest of the batch sequence: the corpus and the window table fix every batch."""
    h = hashlib.sha256(corpus.digest.encode())
    h.update(offsets.numpy().astype(np.int64).tobytes())
    return h.hexdigest()[:16]
