"""A small shard set in modded-nanogpt's fineweb10B layout, generated from text every Python has,
so that ``experiments/shard_set.yaml`` runs anywhere.

fineweb10B as modded-nanogpt downloads it is ``fineweb_train_000001.bin`` … and
``fineweb_val_000000.bin``: llm.c shards (a header of 256 int32 — magic 20240520, version 1, the
count — then uint16 GPT-2 token ids). This writes the same layout from the bytes of the built-in
help text (byte-level ids, vocabulary 256): :data:`TRAIN_SHARDS` training shards of
:data:`SHARD_IDS` ids and one validation shard of :data:`VAL_IDS`, the validation ids taken
after the training ones (no overlap). The committed set in ``experiments/data/fineweb_style/``
is what this writes (tested).

    python -m ablate.bench.shard_set experiments/data/fineweb_style
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from ablate.training.data import builtin_text
from ablate.training.token_formats import write_shard

TRAIN_SHARDS = 4
SHARD_IDS = 40_000
VAL_IDS = 20_000


def write_shard_set(folder: Path) -> list[Path]:
    """Write the set into ``folder``; the files written, training shards first."""
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


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where to write the shards")
    args = parser.parse_args(argv)
    for path in write_shard_set(args.folder):
        print(f"{path}: {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
