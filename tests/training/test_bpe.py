"""Subword tokens: a byte-level BPE trained on the train split only, cached, its vocabulary
followed by the corpus (floor, ℓ0), and tokens per byte recorded."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from ablate.core.config import DataConfig
from ablate.training import bpe
from ablate.training.data import load_corpus, unigram_loss

TRAIN_WORDS = "the norm of the layer is the root mean square of the values " * 60
ONLY_IN_VAL = "zyzzogeton " * 80


def _corpus(tmp_path: Path, text: str, **data: object):  # noqa: ANN202
    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    cfg = DataConfig(source="text_file", path=str(path), tokenizer="bpe", **data)
    return load_corpus(cfg, 16)


def test_the_tokenizer_learns_from_the_train_split_only(tmp_path: Path) -> None:
    text = TRAIN_WORDS + ONLY_IN_VAL  # the last 20% of the characters: the validation text
    train_text, val_text = bpe.split_text(text, 0.2)
    assert ONLY_IN_VAL.strip() in val_text and "zyzzogeton" not in train_text
    tokenizer = bpe.train_tokenizer(train_text, 300)
    assert len(tokenizer.encode(" zyzzogeton").ids) > 3  # never seen: spelled in pieces
    assert len(tokenizer.encode(" square").ids) == 1  # a training word: one merged id
    seen = bpe.train_tokenizer(text, 300)  # the control: trained on everything
    assert len(seen.encode(" zyzzogeton").ids) == 1
    corpus = _corpus(tmp_path, text, val_fraction=0.2, bpe_vocab_size=300)
    assert corpus.vocab_size == tokenizer.get_vocab_size() <= 300
    assert corpus.val.tolist() == tokenizer.encode(val_text).ids
    expected = unigram_loss(corpus.train.numpy(), corpus.val.numpy(), corpus.vocab_size)
    assert corpus.unigram_loss == expected  # over the BPE vocabulary (here above ln V: the
    # validation text is words the training text never had)
    n_bytes = len(text.encode("utf-8"))
    assert corpus.tokens_per_byte == (len(corpus.train) + len(corpus.val)) / n_bytes < 0.5


def test_a_trained_tokenizer_is_reused_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))
    first = _corpus(tmp_path, TRAIN_WORDS * 2, bpe_vocab_size=280)
    assert len(list((tmp_path / "cache" / "tokenizers").glob("*.json"))) == 1

    def no_training(*args: object) -> None:
        raise AssertionError("trained again")

    monkeypatch.setattr(bpe, "train_tokenizer", no_training)
    again = _corpus(tmp_path, TRAIN_WORDS * 2, bpe_vocab_size=280)
    assert again.train.tolist() == first.train.tolist() and again.digest == first.digest
    assert first.unigram_loss < math.log(first.vocab_size)  # like text: below uniform
    with pytest.raises(AssertionError, match="trained again"):  # another size: another one
        _corpus(tmp_path, TRAIN_WORDS * 2, bpe_vocab_size=290)


def test_bpe_needs_a_text_source() -> None:
    with pytest.raises(ValueError, match="data.tokenizer: bpe needs text"):
        DataConfig(source="synthetic", tokenizer="bpe")


@pytest.mark.trains
def test_a_run_on_bpe_tokens_records_its_vocabulary_and_compression(tmp_path: Path) -> None:
    from conftest import tiny_config

    from ablate.core.plan import RunSpec
    from ablate.training.run import execute_run

    config = tiny_config(**{"data.tokenizer": "bpe", "data.bpe_vocab_size": 512})
    summary = execute_run(RunSpec("e", "bpe", 0, config), tmp_path)
    assert summary.status == "finished" and summary.vocab_size == 512
    assert summary.initial_loss == pytest.approx(math.log(512))
    assert 0.3 < summary.tokens_per_byte < 0.7  # English prose: ~2-3 bytes per id
    assert summary.unigram_loss < summary.initial_loss
    assert summary.final_val_loss < summary.initial_loss
