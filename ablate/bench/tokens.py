"""Benchmark: opening a token file or shard set of any size and drawing its first batch, time
and resident memory, against a tiny one of the same layout.

Writes a sparse set of ``--gb`` GB (no disk space used: a sparse file reads as zeros, but for a
few non-zero blocks): one raw uint16 file, or with ``--shards N`` N llm.c shards (a header, then
uint16 ids, as modded-nanogpt's fineweb10B). Then, in this process, it builds the corpus as runs
do: first with the scan (every id checked and digested in bounded chunks), then as every later
run of the experiment does, with the scan cached (:mod:`ablate.training.tokens`); each time it
draws the first training batch; the first open twice, on files just written and then on
files in the page cache (a scan reads every id: on a cold disk, at the disk's speed). It does
the same for a tiny set of the same layout (64 Ki ids a
file) and prints the seconds, the resident memory each added, and the large set's excess over
the tiny one. Issue 76's target for a set of 2 GB or more: at most 2 s and 100 MB more than a
tiny one.

    python -m ablate.bench.tokens --gb 2 --shards 20
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from ablate.core.config import DataConfig
from ablate.training.data import batch_offsets, gather_windows, load_corpus
from ablate.training.memory import read_peak_rss_mb, read_rss_mb, reset_peak_rss
from ablate.training.token_formats import HEADER_INTS

MARKED_BLOCKS = 16  # non-zero blocks written into each sparse file, so the ids are not all 0
TINY_IDS = 1 << 16  # ids per file of the tiny set
GPT2_MAGIC = 20240520  # llm.c's header for uint16 ids
PHASES = (  # each open, and the scan cache it finds (a fresh one scans every id)
    ("first open, the files just written (scans)", "a"),
    ("first open, the files in the page cache (scans)", "b"),
    ("later open (scan cached)", "b"),
)


def sparse_set(folder: Path, n_tokens: int, shards: int, vocab_size: int) -> list[Path]:
    """``n_tokens`` ids in ``shards`` files under ``folder`` (one raw uint16 file, or llm.c
    shards), sparse but for :data:`MARKED_BLOCKS` blocks of seeded ids below ``vocab_size``
    in each."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    paths = []
    for k, count in enumerate(np.diff(np.linspace(0, n_tokens, shards + 1).astype(np.int64))):
        path = folder / (f"train_{k:06d}.bin" if shards > 1 else "train.bin")
        offset = HEADER_INTS * 4 if shards > 1 else 0
        with path.open("wb") as handle:
            if shards > 1:
                header = np.zeros(HEADER_INTS, dtype="<i4")
                header[:3] = (GPT2_MAGIC, 1, count)
                handle.write(header.tobytes())
            handle.truncate(offset + 2 * int(count))
            block = min(4096, int(count))
            for start in np.linspace(0, count - block, MARKED_BLOCKS).astype(np.int64):
                handle.seek(offset + 2 * int(start))
                handle.write(rng.integers(0, vocab_size, block, dtype=np.uint16).tobytes())
        paths.append(path)
    return paths


def measure(paths: list[Path], vocab_size: int, seq_len: int, batch_size: int) -> dict[str, float]:
    """Seconds to build the corpus and draw the first batch, and the resident memory it added
    at its peak (MiB over the resident set before it)."""
    before = read_rss_mb() or float("nan")
    reset_peak_rss()
    start = time.perf_counter()
    path = str(paths[0]) if len(paths) == 1 else [str(p) for p in paths]
    corpus = load_corpus(
        DataConfig(source="tokens_file", path=path, vocab_size=vocab_size), seq_len
    )
    offsets = batch_offsets(len(corpus.train), seq_len, batch_size, 1, seed=0)
    batch = gather_windows(corpus.train, offsets[0], seq_len)
    seconds = time.perf_counter() - start
    assert batch.shape == (batch_size, seq_len + 1)
    return {
        "seconds": seconds,
        "added_mb": (read_peak_rss_mb() or float("nan")) - before,
        "tokens": float(len(corpus.train) + len(corpus.val)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=2.0, help="the set's size in GB (default 2)")
    parser.add_argument("--shards", type=int, default=1, help="llm.c shards (default: one file)")
    parser.add_argument("--vocab-size", type=int, default=50304)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the files")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        sets = {
            "tiny": sparse_set(Path(folder) / "tiny", TINY_IDS * args.shards, args.shards, 256),
            "large": sparse_set(
                Path(folder) / "large", int(args.gb * 1e9) // 2, args.shards, args.vocab_size
            ),
        }
        found: dict[tuple[str, str], dict[str, float]] = {}
        for size, paths in sets.items():
            for when, cache in PHASES:
                os.environ["ABLATE_CACHE"] = str(Path(folder) / f"cache_{size}_{cache}")
                got = measure(paths, args.vocab_size, args.seq_len, args.batch_size)
                found[(size, when)] = got
                print(
                    f"{size} set, {len(paths)} file(s), {got['tokens']:,.0f} ids: {when}: open "
                    f"and first batch ({args.batch_size} x {args.seq_len + 1}) "
                    f"{got['seconds']:.2f} s, resident +{got['added_mb']:.0f} MiB",
                    flush=True,
                )
        for when, _ in PHASES:
            large, tiny = found[("large", when)], found[("tiny", when)]
            print(
                f"large over tiny, {when}: +{large['seconds'] - tiny['seconds']:.2f} s, "
                f"+{large['added_mb'] - tiny['added_mb']:.0f} MiB resident",
                flush=True,
            )


if __name__ == "__main__":
    main()
