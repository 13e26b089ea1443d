"""Small example data in the layouts labs keep, generated from text every Python has, so that
``experiments/shard_set.yaml`` and ``experiments/parquet_text.yaml`` run anywhere.

- ``fineweb_style/``: modded-nanogpt's fineweb10B layout, ``fineweb_train_000001.bin`` … and
  ``fineweb_val_000000.bin``: llm.c shards (a header of 256 int32 — magic 20240520, version 1,
  the count — then uint16 ids), here the bytes of the built-in help text (byte-level ids,
  vocabulary 256): :data:`TRAIN_SHARDS` training shards of :data:`SHARD_IDS` ids and one
  validation shard of :data:`VAL_IDS`, taken after the training ones.
- ``text_parquet/``: nanochat's layout, parquet files with a ``text`` column (here the help
  text's paragraphs, one a row, in :data:`PARQUET_FILES` files), and a local ``tokenizer.json``
  beside them: ablate's byte-level BPE of :data:`BPE_VOCAB` ids trained on that text.

The committed sets in ``experiments/data/`` are what this writes (tested).

    python -m ablate.bench.example_data experiments/data
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import numpy as np

from ablate.training.data import builtin_text
from ablate.training.token_formats import write_shard

TRAIN_SHARDS = 4
SHARD_IDS = 40_000
VAL_IDS = 20_000
PARQUET_FILES = 2
PARQUET_BYTES = 300_000  # of the help text, in whole paragraphs
BPE_VOCAB = 1024


def write_shard_set(folder: Path) -> list[Path]:
    """Write the fineweb10B-style set into ``folder``; the files written, training first."""
    ids = np.frombuffer(builtin_text(), dtype=np.uint8).astype(np.uint16)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k in range(TRAIN_SHARDS):
        paths.append(folder / f"fineweb_train_{k + 1:06d}.bin")
        write_shard(paths[-1], ids[k * SHARD_IDS : (k + 1) * SHARD_IDS])
    start = TRAIN_SHARDS * SHARD_IDS
    paths.append(folder / "fineweb_val_000000.bin")
    write_shard(paths[-1], ids[start : start + VAL_IDS])
    return paths


def paragraphs() -> list[str]:
    """The help text's first :data:`PARQUET_BYTES` bytes or so, as paragraphs (each keeps the
    blank line after it)."""
    text = builtin_text()[:PARQUET_BYTES].decode("utf-8", errors="ignore")
    return [p for p in re.split(r"(?<=\n\n)", text) if p]


def write_text_parquet(folder: Path) -> list[Path]:
    """Write the parquet files and the tokenizer into ``folder``; the files written."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from ablate.training.bpe import train_tokenizer

    rows = paragraphs()
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for k, part in enumerate(np.array_split(np.arange(len(rows)), PARQUET_FILES)):
        paths.append(folder / f"shard_{k:05d}.parquet")
        pq.write_table(pa.table({"text": [rows[i] for i in part]}), paths[-1])
    paths.append(folder / "tokenizer.json")
    train_tokenizer("".join(rows), BPE_VOCAB).save(str(paths[-1]))
    return paths


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("root", type=Path, help="where to write fineweb_style/ and text_parquet/")
    args = parser.parse_args(argv)
    written = write_shard_set(args.root / "fineweb_style")
    written += write_text_parquet(args.root / "text_parquet")
    for path in written:
        print(f"{path}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
