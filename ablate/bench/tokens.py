"""Benchmark: opening a token file of any size and drawing its first batch, time and peak memory.

Writes a sparse raw uint16 file of ``--gb`` GB (no disk space used: a sparse file reads as
zeros) with a few non-zero blocks, then, in this process, builds the corpus twice as runs do:
first with the scan (every id checked in bounded chunks, digest), then as every later run of
the experiment does, with the scan cached (:mod:`ablate.training.tokens`); each time it draws
the first training batch, and it prints the seconds and the process's peak resident set. The
target for a 4 GB file: open and first batch in under 5 s, peak RSS under 1 GB.

    python -m ablate.bench.tokens --gb 4
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
from ablate.training.memory import read_peak_rss_mb, reset_peak_rss

MARKED_BLOCKS = 16  # non-zero blocks written into the sparse file, so the ids are not all 0


def sparse_token_file(path: Path, gigabytes: float, vocab_size: int) -> int:
    """A raw uint16 file of ``gigabytes`` GB, sparse but for :data:`MARKED_BLOCKS` blocks of
    seeded ids below ``vocab_size``; its length in tokens."""
    n_tokens = int(gigabytes * 1e9) // 2
    rng = np.random.default_rng(0)
    with path.open("wb") as handle:
        handle.truncate(2 * n_tokens)
        for start in np.linspace(0, n_tokens - 4096, MARKED_BLOCKS).astype(np.int64):
            handle.seek(2 * int(start))
            handle.write(rng.integers(0, vocab_size, 4096, dtype=np.uint16).tobytes())
    return n_tokens


def measure(path: Path, vocab_size: int, seq_len: int, batch_size: int) -> dict[str, float]:
    """Seconds to build the corpus and to draw the first batch, and the peak RSS in MiB."""
    reset_peak_rss()
    start = time.perf_counter()
    cfg = DataConfig(source="tokens_file", path=str(path), vocab_size=vocab_size)
    corpus = load_corpus(cfg, seq_len)
    opened = time.perf_counter()
    offsets = batch_offsets(len(corpus.train), seq_len, batch_size, 1, seed=0)
    batch = gather_windows(corpus.train, offsets[0], seq_len)
    done = time.perf_counter()
    assert batch.shape == (batch_size, seq_len + 1)
    return {
        "open_s": opened - start,
        "first_batch_s": done - opened,
        "total_s": done - start,
        "peak_rss_mb": read_peak_rss_mb() or float("nan"),
        "tokens": float(len(corpus.train) + len(corpus.val)),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gb", type=float, default=4.0, help="file size in GB (default 4)")
    parser.add_argument("--vocab-size", type=int, default=50304)
    parser.add_argument("--seq-len", type=int, default=1024)
    parser.add_argument("--batch-size", type=int, default=12)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        path = Path(folder) / "train.bin"
        os.environ["ABLATE_CACHE"] = str(Path(folder) / "cache")  # a cold cache, then a warm one
        n_tokens = sparse_token_file(path, args.gb, args.vocab_size)
        print(f"{path}: {args.gb:g} GB sparse, {n_tokens:,} tokens", flush=True)
        for when in ("first open (scans the file)", "later open (scan cached)"):
            found = measure(path, args.vocab_size, args.seq_len, args.batch_size)
            print(
                f"{when}: open {found['open_s']:.2f} s, first batch "
                f"({args.batch_size} x {args.seq_len + 1}) {found['first_batch_s']:.4f} s, "
                f"total {found['total_s']:.2f} s; peak RSS {found['peak_rss_mb']:.0f} MiB",
                flush=True,
            )


if __name__ == "__main__":
    main()
