"""Subword tokens: a byte-level BPE (Hugging Face ``tokenizers``) trained on the train split only.

``data.tokenizer: bpe`` splits the text first (the last ``val_fraction`` of its characters is
validation), trains a byte-level BPE of ``data.bpe_vocab_size`` ids on the training text alone,
so no statistic of the validation text leaks into the vocabulary, and encodes both splits with
it. The trained tokenizer is cached under :func:`ablate.training.tokens.cache_dir`, keyed by the
sha256 of the training text and the settings, so every run of an experiment reuses one. A text
dataset's BPE (:mod:`ablate.training.text_datasets`) learns from its training rows, streamed
(:func:`cached_documents_tokenizer`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable

import numpy as np
import tokenizers
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from ablate.core.folders import write_atomic
from ablate.training.tokens import cache_dir


def split_text(text: str, val_fraction: float) -> tuple[str, str]:
    """The first 1 − ``val_fraction`` of the characters for training, the rest for validation."""
    cut = len(text) - int(len(text) * val_fraction)
    return text[:cut], text[cut:]


def train_tokenizer(text: str | Iterable[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE of ``vocab_size`` ids (the 256 bytes and the merges) learned on
    ``text`` (one string, or documents one after another)."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator([text] if isinstance(text, str) else text, trainer)
    return tokenizer


def cached_tokenizer(train_text: str, vocab_size: int) -> Tokenizer:
    """The tokenizer for this training text and size: from the cache, else trained and cached."""
    key = json.dumps([hashlib.sha256(train_text.encode()).hexdigest(), vocab_size, "byte-bpe"])
    name = hashlib.sha256(f"{key}{tokenizers.__version__}".encode()).hexdigest()[:24]
    path = cache_dir() / "tokenizers" / f"{name}.json"
    if path.is_file():
        return Tokenizer.from_file(str(path))
    tokenizer = train_tokenizer(train_text, vocab_size)
    write_atomic(path, lambda tmp: tokenizer.save(str(tmp)))
    return tokenizer


def cached_documents_tokenizer(
    documents: Callable[[], Iterable[str]], key: list[object], vocab_size: int
) -> Tokenizer:
    """The tokenizer trained on ``documents()`` (a text dataset's training rows, streamed),
    cached under ``key`` (what names those documents: their files' contents and column) and
    the size: from the cache, else trained and cached."""
    name = json.dumps([key, vocab_size, "byte-bpe", tokenizers.__version__])
    path = cache_dir() / "tokenizers" / f"{hashlib.sha256(name.encode()).hexdigest()[:24]}.json"
    if path.is_file():
        return Tokenizer.from_file(str(path))
    tokenizer = train_tokenizer(documents(), vocab_size)
    write_atomic(path, lambda tmp: tokenizer.save(str(tmp)))
    return tokenizer


def encode(tokenizer: Tokenizer, text: str) -> np.ndarray:
    """The ids of ``text``, int64."""
    return np.asarray(tokenizer.encode(text).ids, dtype=np.int64)
