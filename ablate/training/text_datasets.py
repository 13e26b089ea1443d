"""Text as labs keep it: parquet files (nanochat's fineweb-edu shards) and Hugging Face
``save_to_disk`` folders (Arrow files and a ``state.json``), read with pyarrow a batch of rows
at a time, tokenized once and cached as token files.

``data.source: text_dataset`` reads one column, ``data.text_column``: text, tokenized with
ablate's byte ids, a local Hugging Face ``tokenizer.json`` (``data.tokenizer: file``) or
ablate's BPE learned on the training dataset's rows (``bpe``), each row a document
(``data.eos_token`` appended after each); or token ids already (a list of ints a row), read as
they are. The ids of each input file go to one raw token file (uint16, uint32 for a vocabulary
over 65,536) under :func:`ablate.training.tokens.cache_dir`, in a folder keyed by the input
files' contents and the tokenizer's, so every later run, and any experiment that reads the same
text the same way, opens the token files at once (:mod:`ablate.training.tokens` maps them as a
shard set). Each input file's content digest is itself cached by its path, inode, size and
times, so a run does not read the text again to find its tokens.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ablate.core.errors import DataError
from ablate.core.folders import write_json_atomic
from ablate.training.tokens import cache_dir

CACHE_VERSION = 2  # bump when what a tokenized folder holds changes (2: the width not keyed)
BATCH_ROWS = 1024  # rows read and tokenized at a time
DONE = "done.json"  # written last in a tokenized folder: its files, dtype and counts


@dataclass(frozen=True)
class Tokenized:
    """A dataset's ids as raw token files, in the input files' order."""

    files: list[Path]
    dtype: str  # uint16 or uint32
    ids: int
    text_bytes: int  # UTF-8 bytes of the text tokenized (0 for a column of ids)


def dataset_files(paths: list[Path]) -> list[Path]:
    """The files of ``paths``: parquet and Arrow files as given, a ``save_to_disk`` folder as
    the Arrow files its ``state.json`` lists, in order."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir() and not (path / "state.json").is_file():
            parquet = sorted(path.glob("*.parquet"))  # nanochat's layout: a folder of shards
            if not parquet:
                raise DataError(
                    f"{path}: a folder without state.json or parquet files: not a Hugging Face "
                    "save_to_disk folder"
                )
            files += parquet
        elif path.is_dir():
            try:
                entries = json.loads((path / "state.json").read_text(encoding="utf-8"))
                files += [path / entry["filename"] for entry in entries["_data_files"]]
            except (ValueError, KeyError, TypeError):
                raise DataError(
                    f"{path}/state.json: not save_to_disk's (no _data_files list of filenames)"
                ) from None
        elif path.suffix in (".parquet", ".arrow"):
            files.append(path)
        else:
            raise DataError(
                f"{path}: text_dataset reads .parquet files, .arrow files or save_to_disk folders"
            )
    if not files:
        raise DataError(f"{paths[0]}: names no data file")
    return files


def columns(path: Path, column: str) -> Iterator[Any]:
    """``column`` of ``path`` (parquet, or an Arrow IPC stream as ``save_to_disk`` writes it),
    :data:`BATCH_ROWS` rows at a time, as pyarrow arrays; a file pyarrow cannot read is a
    one-line :class:`DataError`."""
    try:
        import pyarrow as pa
    except ImportError:
        raise DataError(
            "data.source text_dataset reads with pyarrow: pip install 'ablate[data]'"
        ) from None
    try:
        yield from _columns(path, column)
    except (pa.ArrowException, OSError) as exc:
        raise DataError(f"{path}: pyarrow cannot read it: {str(exc).splitlines()[0]}") from None


def _columns(path: Path, column: str) -> Iterator[Any]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    if path.suffix == ".parquet":
        parquet = pq.ParquetFile(path)
        _has_column(path, parquet.schema_arrow.names, column)
        for batch in parquet.iter_batches(batch_size=BATCH_ROWS, columns=[column]):
            yield batch.column(0)
        return
    with pa.memory_map(str(path)) as source:
        try:
            reader = pa.ipc.open_stream(source)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)  # the random-access layout, where one writes it
            _has_column(path, reader.schema.names, column)
            for k in range(reader.num_record_batches):
                yield reader.get_batch(k).column(column)
            return
        _has_column(path, reader.schema.names, column)
        for batch in reader:
            yield batch.column(column)


def holds_ids(path: Path, column: str) -> bool:
    """Whether ``column`` of ``path`` holds lists (of token ids), by its first batch."""
    first = next(columns(path, column), None)
    if first is None:
        return False
    import pyarrow as pa

    return pa.types.is_list(first.type) or pa.types.is_large_list(first.type)


def _has_column(path: Path, names: list[str], column: str) -> None:
    if column not in names:
        raise DataError(f"{path}: no column {column!r} (data.text_column); it has {names}")


def load_tokenizer(path: str) -> Any:
    """A local Hugging Face ``tokenizer.json``, or a one-line :class:`DataError`."""
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_file(path)
    except Exception as exc:  # tokenizers raises a bare Exception for a file it cannot read
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        message = f"{path}: not a tokenizer.json Hugging Face tokenizers reads: {first}"
        raise DataError(message) from None


class Encoder:
    """Text to ids: ablate's byte ids, or a Hugging Face tokenizer; a row is a document,
    followed by ``eos`` ids. ``identity`` names the tokenizer in the cache key."""

    def __init__(self, tokenizer: Any = None, eos: list[int] | None = None) -> None:
        self.tokenizer = tokenizer
        self.eos = eos or []
        self.identity = (
            "byte" if tokenizer is None else hashlib.sha256(tokenizer.to_str().encode()).hexdigest()
        )

    @classmethod
    def from_file(cls, tokenizer_file: str, eos_token: str | None) -> Encoder:
        """A local ``tokenizer.json`` (:func:`load_tokenizer`), ``eos_token`` one of its."""
        tokenizer = load_tokenizer(tokenizer_file)
        eos = []
        if eos_token is not None:
            found = tokenizer.token_to_id(eos_token)
            if found is None:
                raise DataError(f"data.eos_token: {eos_token!r} is not in {tokenizer_file}")
            eos = [found]
        return cls(tokenizer, eos)

    @classmethod
    def trained(cls, paths: list[Path], column: str, vocab_size: int) -> Encoder:
        """ablate's byte-level BPE of ``vocab_size`` ids learned on ``paths``' rows alone (the
        training dataset: validation comes from ``data.val_path``), cached by their contents."""
        from ablate.training.bpe import cached_documents_tokenizer

        files = dataset_files(paths)

        def documents() -> Iterator[str]:
            for path in files:
                for array in columns(path, column):
                    yield from (text for text in array.to_pylist() if text)

        key: list[object] = [[content_digest(f) for f in files], column]
        return cls(cached_documents_tokenizer(documents, key, vocab_size))

    @property
    def vocab_size(self) -> int:
        return 256 if self.tokenizer is None else self.tokenizer.get_vocab_size()

    def encode(self, texts: list[str]) -> np.ndarray:
        """The ids of ``texts``, one document after another (each followed by the eos id)."""
        if self.tokenizer is None:
            return np.frombuffer("".join(texts).encode("utf-8"), dtype=np.uint8)
        rows = [e.ids + self.eos for e in self.tokenizer.encode_batch(texts)]
        return np.fromiter((i for row in rows for i in row), dtype=np.int64)


def ids_of(array: Any, encoder: Encoder, path: Path) -> tuple[np.ndarray, int]:
    """One batch of a column as ids, and the UTF-8 bytes of its text (0 for ids)."""
    import pyarrow as pa

    if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
        texts = [t for t in array.to_pylist() if t is not None]
        return encoder.encode(texts), sum(len(t.encode("utf-8")) for t in texts)
    if pa.types.is_list(array.type) or pa.types.is_large_list(array.type):
        flat = array.flatten()
        if pa.types.is_integer(flat.type):
            return flat.to_numpy(zero_copy_only=False).astype(np.int64), 0
    raise DataError(f"{path}: column of {array.type}: text_dataset reads text or lists of ids")


def content_digest(path: Path) -> str:
    """sha256 of a file's bytes, cached by its path, inode, size and times."""
    stat = path.stat()
    identity = [str(path.resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns]
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]
    cached = cache_dir() / "file_digests" / f"{key}.json"
    try:
        return str(json.loads(cached.read_text(encoding="utf-8"))["sha256"])
    except (OSError, ValueError, KeyError):
        pass
    h = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 24):
            h.update(chunk)
    try:
        write_json_atomic(cached, {"sha256": h.hexdigest(), "file": identity})
    except OSError:
        pass  # a read-only cache only costs the next run a read
    return h.hexdigest()


def tokenized(
    paths: list[Path], column: str, encoder: Encoder, vocab_size: int | None = None
) -> Tokenized:
    """The token files of ``paths``' ``column``: from the cache, else tokenized into it; ids
    as uint32 where ``vocab_size`` (else the tokenizer's vocabulary) is over 65,536, or a
    column of ids comes without a ``vocab_size``."""
    files = dataset_files(paths)
    key = [CACHE_VERSION, [content_digest(f) for f in files], column, encoder.identity]
    key.append(encoder.eos)
    folder = cache_dir() / "text_tokens" / hashlib.sha256(json.dumps(key).encode()).hexdigest()[:24]
    if not (folder / DONE).is_file():  # the width is a way of storing the ids, not in the key
        bound = vocab_size or (None if holds_ids(files[0], column) else encoder.vocab_size)
        wide = bound is None or bound > 1 << 16
        _tokenize_into(folder, files, column, encoder, np.dtype(np.uint32 if wide else np.uint16))
    done = json.loads((folder / DONE).read_text(encoding="utf-8"))
    return Tokenized(
        [folder / name for name in done["files"]], done["dtype"], done["ids"], done["text_bytes"]
    )


def check_disjoint(train: list[Path], val: list[Path]) -> None:
    """Refuse a validation dataset that shares an input file with training, by path or by
    content (:func:`content_digest`), naming both files."""
    seen = {content_digest(f): f for f in dataset_files(train)}
    for path in dataset_files(val):
        twin = seen.get(content_digest(path))
        if twin is not None:
            raise DataError(
                f"{path}: holds the same data as training file {twin}: validation must be "
                "data the model did not train on"
            )


def _tokenize_into(
    folder: Path, files: list[Path], column: str, encoder: Encoder, dtype: np.dtype
) -> None:
    """Tokenize ``files`` into a temporary folder beside ``folder``, then move it there whole
    (a run that stops halfway leaves nothing a later one would take as done)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(dir=folder.parent, prefix=".partial-"))
    try:
        names, total, text_bytes = [], 0, 0
        for k, path in enumerate(files):
            names.append(f"{k:06d}.bin")
            with (work / names[-1]).open("wb") as out:
                for array in columns(path, column):
                    ids, size = ids_of(array, encoder, path)
                    if len(ids) and (ids.min() < 0 or ids.max() >= np.iinfo(dtype).max + 1):
                        raise DataError(f"{path}: ids outside {dtype}: {ids.min()}..{ids.max()}")
                    out.write(ids.astype(dtype).tobytes())
                    total, text_bytes = total + len(ids), text_bytes + size
            if (work / names[-1]).stat().st_size == 0:
                raise DataError(f"{path}: no rows with ids in column {column!r}: an empty file")
        summary = {"files": names, "dtype": dtype.name, "ids": total, "text_bytes": text_bytes}
        write_json_atomic(work / DONE, summary)
        try:
            os.replace(work, folder)
        except OSError:  # another run of the experiment finished it first: keep that one
            shutil.rmtree(work, ignore_errors=True)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
