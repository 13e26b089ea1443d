"""Text datasets: parquet files and save_to_disk folders give the ids the same text gives as a
text file, with ablate's byte ids or a local tokenizer.json; tokenized once, then cached."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from ablate.core.config import DataConfig
from ablate.core.errors import DataError
from ablate.training import text_datasets
from ablate.training.bpe import train_tokenizer
from ablate.training.data import builtin_text, gather_windows, load_corpus

SEQ_LEN = 16


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ABLATE_CACHE", str(tmp_path / "cache"))


def _rows(text: str) -> list[str]:
    """``text`` cut into rows after each lone newline between a non-space and a letter (each
    row keeps its newline): a cut a byte-level BPE's pre-tokenizer makes there anyway."""
    return re.split(r"(?<=\S\n)(?=[A-Za-z])", text)


def _text() -> str:
    return builtin_text().decode("utf-8")[:60_000]


def _parquet(folder: Path, rows: list[str], files: int = 3) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, part in enumerate(np.array_split(np.array(rows, dtype=object), files)):
        paths.append(folder / f"shard_{k:05d}.parquet")
        pq.write_table(pa.table({"text": list(part), "id": list(range(len(part)))}), paths[-1])
    return paths


def _saved(folder: Path, table: pa.Table) -> Path:
    """``table`` as Hugging Face's save_to_disk writes it: an Arrow stream and state.json."""
    folder.mkdir(parents=True)
    with pa.OSFile(str(folder / "data-00000-of-00001.arrow"), "wb") as sink:
        with pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=100)
    state = {"_data_files": [{"filename": "data-00000-of-00001.arrow"}], "_split": "train"}
    (folder / "state.json").write_text(json.dumps(state))
    return folder


def _corpus(**data: object):  # noqa: ANN202
    return load_corpus(DataConfig(**data), SEQ_LEN)


def _same(a, b) -> None:  # noqa: ANN001
    assert (a.digest, a.vocab_size, len(a.train), len(a.val)) == (
        b.digest,
        b.vocab_size,
        len(b.train),
        len(b.val),
    )
    assert a.unigram_loss == pytest.approx(b.unigram_loss, rel=1e-12)
    offsets = torch.tensor([0, 17, len(a.train) - SEQ_LEN - 1])
    assert torch.equal(
        gather_windows(a.train, offsets, SEQ_LEN), gather_windows(b.train, offsets, SEQ_LEN)
    )


def test_a_parquet_folder_gives_the_byte_ids_of_the_same_text_as_a_file(tmp_path: Path) -> None:
    text = _text()
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    paths = _parquet(tmp_path / "pq", _rows(text))
    parquet = _corpus(source="text_dataset", path=[str(p) for p in paths])
    _same(parquet, _corpus(source="text_file", path=str(tmp_path / "text.txt")))
    assert parquet.tokens_per_byte == 1.0


def test_a_local_tokenizer_gives_the_same_ids_row_by_row_as_over_the_file(tmp_path: Path) -> None:
    text = _text()
    (tmp_path / "text.txt").write_text(text, encoding="utf-8")
    train_tokenizer(text, 600).save(str(tmp_path / "tokenizer.json"))
    paths = _parquet(tmp_path / "pq", _rows(text))
    tok = {"tokenizer": "file", "tokenizer_file": str(tmp_path / "tokenizer.json")}
    parquet = _corpus(source="text_dataset", path=[str(p) for p in paths], **tok)
    whole = _corpus(source="text_file", path=str(tmp_path / "text.txt"), **tok)
    _same(parquet, whole)
    assert parquet.vocab_size == 600 and parquet.tokens_per_byte == pytest.approx(
        whole.tokens_per_byte
    )
    assert parquet.tokens_per_byte < 0.6  # merges: fewer ids than bytes


def test_a_save_to_disk_folder_reads_like_the_parquet_files(tmp_path: Path) -> None:
    rows = _rows(_text())
    paths = _parquet(tmp_path / "pq", rows)
    saved = _saved(tmp_path / "saved", pa.table({"text": rows}))
    _same(
        _corpus(source="text_dataset", path=str(saved)),
        _corpus(source="text_dataset", path=[str(p) for p in paths]),
    )


def test_a_column_of_ids_is_read_as_it_is_and_an_eos_ends_each_document(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    docs = [rng.integers(0, 70_000, int(n)).tolist() for n in rng.integers(50, 400, 40)]
    saved = _saved(tmp_path / "ids", pa.table({"input_ids": docs}))
    corpus = _corpus(source="text_dataset", path=str(saved), text_column="input_ids")
    flat = np.concatenate([np.asarray(d) for d in docs])
    cut = len(flat) - int(len(flat) * 0.1)
    assert len(corpus.train) == cut and corpus.vocab_size == int(flat.max()) + 1
    assert np.array_equal(corpus.train[np.arange(cut)], flat[:cut])  # uint32: over 65,535


def test_an_eos_token_ends_each_document(tmp_path: Path) -> None:
    tokenizer = train_tokenizer(_text(), 400)
    tokenizer.add_special_tokens(["<|endoftext|>"])
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    eos = tokenizer.token_to_id("<|endoftext|>")
    paths = _parquet(tmp_path / "pq", ["hello there\n", "general kenobi\n"] * 300, files=2)
    tok = {"tokenizer": "file", "tokenizer_file": str(tmp_path / "tokenizer.json")}
    corpus = _corpus(
        source="text_dataset", path=[str(p) for p in paths], eos_token="<|endoftext|>", **tok
    )
    first, second = (tokenizer.encode(t).ids for t in ("hello there\n", "general kenobi\n"))
    row = [*first, eos, *second, eos]
    assert corpus.train[np.arange(len(row))].tolist() == row
    ids = np.concatenate(
        [corpus.train[np.arange(len(corpus.train))], corpus.val[np.arange(len(corpus.val))]]
    )
    assert int((ids == eos).sum()) == 600 and corpus.vocab_size == 401


def test_tokenized_once_then_read_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = [str(p) for p in _parquet(tmp_path / "pq", _rows(_text()))]
    first = _corpus(source="text_dataset", path=paths)
    calls: list[int] = []
    monkeypatch.setattr(text_datasets, "_tokenize_into", lambda *a: calls.append(1))
    read = []
    real = Path.open
    monkeypatch.setattr(
        Path, "open", lambda self, *a, **k: (read.append(self.suffix), real(self, *a, **k))[1]
    )
    again = _corpus(source="text_dataset", path=paths)
    assert calls == [] and again.digest == first.digest
    assert ".parquet" not in read  # the content digests came from their cache too


def test_a_dataset_that_cannot_be_read_is_refused_in_one_line(tmp_path: Path) -> None:
    paths = [str(p) for p in _parquet(tmp_path / "pq", ["hello world\n"] * 300)]
    with pytest.raises(
        DataError,
        match=r"shard_00000\.parquet: no column 'body' \(data\.text_column\); it has \['text', ",
    ):
        _corpus(source="text_dataset", path=paths, text_column="body")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DataError, match=r"empty: a folder without state\.json"):
        _corpus(source="text_dataset", path=str(tmp_path / "empty"))
    with pytest.raises(DataError, match=r"shard_00000\.parquet: column of int64"):
        _corpus(source="text_dataset", path=paths, text_column="id")
    train_tokenizer(_text(), 300).save(str(tmp_path / "tokenizer.json"))
    tok = {"tokenizer": "file", "tokenizer_file": str(tmp_path / "tokenizer.json")}
    with pytest.raises(DataError, match=r"data\.eos_token: '<\|endoftext\|>' is not in"):
        _corpus(source="text_dataset", path=paths, eos_token="<|endoftext|>", **tok)


def test_a_tokenizer_or_a_parquet_file_that_cannot_be_read_is_one_line(tmp_path: Path) -> None:
    paths = [str(p) for p in _parquet(tmp_path / "pq", ["hello world\n"] * 300)]
    (tmp_path / "tokenizer.json").write_text("{}")
    tok = {"tokenizer": "file", "tokenizer_file": str(tmp_path / "tokenizer.json")}
    with pytest.raises(DataError, match=r"tokenizer\.json: not a tokenizer\.json Hugging Face"):
        _corpus(source="text_dataset", path=paths, **tok)
    (tmp_path / "bad.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(DataError, match=r"bad\.parquet: pyarrow cannot read it"):
        _corpus(source="text_dataset", path=str(tmp_path / "bad.parquet"))


def test_ablate_s_bpe_learns_from_the_training_rows_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rows = _rows(_text())
    train = [str(p) for p in _parquet(tmp_path / "train", rows)]
    secret = ["zyzzyva quokka zyzzyva quokka\n"] * 400  # only in validation
    val = [str(p) for p in _parquet(tmp_path / "val", secret, files=1)]
    data = {"source": "text_dataset", "path": train, "val_path": val, "tokenizer": "bpe"}
    corpus = _corpus(**data, bpe_vocab_size=500)
    assert corpus.vocab_size == 500 and len(corpus.val) > 0
    learned = text_datasets.Encoder.trained([Path(p) for p in train], "text", 500).tokenizer
    assert learned.token_to_id("zyzzyva") is None  # no merge learned from validation text
    both = text_datasets.Encoder.trained([Path(p) for p in train + val], "text", 500).tokenizer
    assert both.token_to_id("zyzzyva") is not None  # the control: it would have been
    assert corpus.val[np.arange(6)].tolist() == learned.encode(secret[0]).ids[:6]
    from ablate.training import bpe

    monkeypatch.setattr(bpe, "train_tokenizer", lambda *a: pytest.fail("trained again"))
    assert _corpus(**data, bpe_vocab_size=500).digest == corpus.digest  # from the cache


def test_an_empty_file_or_a_validation_copy_is_refused_naming_the_input(tmp_path: Path) -> None:
    paths = _parquet(tmp_path / "pq", ["hello world\n"] * 300, files=2)
    pq.write_table(
        pa.table({"text": pa.array([], pa.string())}), tmp_path / "pq" / "shard_9.parquet"
    )
    with pytest.raises(DataError, match=r"shard_9\.parquet: no rows with ids in column 'text'"):
        _corpus(source="text_dataset", path=str(tmp_path / "pq"))  # the folder: all three
    (tmp_path / "val.parquet").write_bytes(paths[1].read_bytes())
    data = {"source": "text_dataset", "path": [str(p) for p in paths]}
    with pytest.raises(
        DataError, match=r"val\.parquet: holds the same data as training file .*shard_00001"
    ):
        _corpus(**data, val_path=str(tmp_path / "val.parquet"))


def test_a_folder_of_parquet_files_or_a_broken_state_json(tmp_path: Path) -> None:
    rows = _rows(_text())
    paths = _parquet(tmp_path / "pq", rows)
    folder = _corpus(source="text_dataset", path=str(tmp_path / "pq"))  # nanochat's layout
    _same(folder, _corpus(source="text_dataset", path=[str(p) for p in paths]))
    saved = _saved(tmp_path / "saved", pa.table({"text": rows}))
    (saved / "state.json").write_text("{not json")
    with pytest.raises(DataError, match=r"saved/state\.json: not save_to_disk's"):
        _corpus(source="text_dataset", path=str(saved))
