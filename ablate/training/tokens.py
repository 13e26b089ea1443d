"""Token files of any size: memory-mapped for batches, scanned in bounded chunks, never read whole.

A ``tokens_file`` (raw uint16 like nanoGPT's ``train.bin``, or ``.npy``) is opened as a
:class:`TokenSpan`; batches read only their windows' pages through a memory map. What a run
needs from the whole file — every id checked (non-negative, below the vocabulary), the digest
and the unigram floor — comes from one :func:`scan`: :data:`CHUNK` ids at a time through one
reused buffer, so memory stays bounded whatever the size. Spans of up to :data:`EXACT_LIMIT` ids
are digested and counted exactly (the digest of an in-memory corpus with the same ids); larger
ones from :data:`SAMPLE_BLOCKS` evenly spaced blocks of :data:`EXACT_LIMIT` ids in all, plus the
lengths. A scan's result is cached under :func:`cache_dir`, keyed by each file's path, inode,
size, modification and status-change times, so the runs of an experiment scan a file once and a
file rewritten in any way is scanned again.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ablate.core.folders import write_json_atomic

CHUNK = 1 << 24  # ids per bounded read (32 MiB of uint16)
EXACT_LIMIT = 1 << 24  # up to 16 Mi ids: exact digest and unigram counts
SAMPLE_BLOCKS = 64  # above it: this many evenly spaced blocks
CACHE_VERSION = 1  # bump when what a scan computes changes


class TokenFileError(ValueError):
    """A token file that cannot be used, as one line naming the file and the problem."""


@dataclass(frozen=True)
class TokenSpan:
    """A run of ``length`` ids of ``dtype`` in ``path``, from byte ``offset`` on."""

    path: Path
    dtype: np.dtype
    offset: int
    length: int

    def __len__(self) -> int:
        return self.length

    def split(self, at: int) -> tuple[TokenSpan, TokenSpan]:
        """The ids before ``at`` and from ``at`` on."""
        head = replace(self, length=at)
        tail = replace(self, offset=self.offset + at * self.dtype.itemsize, length=self.length - at)
        return head, tail

    def read(self, start: int, count: int) -> np.ndarray:
        """``count`` ids from ``start`` (clipped to the span), in a new array."""
        count = max(0, min(count, self.length - start))
        where = self.offset + start * self.dtype.itemsize
        return np.fromfile(self.path, dtype=self.dtype, count=count, offset=where)

    def chunks(self, size: int | None = None) -> Iterator[np.ndarray]:
        """The ids in consecutive pieces of at most ``size`` (default :data:`CHUNK`), each a view
        of one reused buffer: use a piece before asking for the next."""
        buffer = np.empty(min(size or CHUNK, self.length), dtype=self.dtype)
        raw = memoryview(buffer).cast("B")
        left = self.length
        with self.path.open("rb", buffering=0) as handle:
            handle.seek(self.offset)
            while left > 0:
                want = min(len(buffer), left) * self.dtype.itemsize
                got = handle.readinto(raw[:want])
                if not got:
                    raise TokenFileError(f"{self.path}: ends early (changed while read?)")
                count = got // self.dtype.itemsize
                left -= count
                yield buffer[:count]

    def memory_map(self) -> np.ndarray:
        """The ids as a read-only memory map (an empty array for an empty span)."""
        if self.length == 0:
            return np.zeros(0, dtype=self.dtype)
        return np.memmap(self.path, self.dtype, "r", offset=self.offset, shape=(self.length,))

    def identity(self) -> list[object]:
        """What names this span's bytes for the scan cache: file, inode, size, mtime and
        ctime, place, dtype. A rewrite in place that keeps the size and sets the mtime back
        (``os.utime``) still moves the ctime, which nothing but the clock sets."""
        stat = self.path.stat()
        place = [self.offset, self.length, self.dtype.str]
        times = [stat.st_mtime_ns, stat.st_ctime_ns]
        return [str(self.path.resolve()), stat.st_ino, stat.st_size, *times, *place]


class MappedIds:
    """A span's ids for batches: a memory map, made on first use, that pickles as the span, so a
    spawned DDP process maps the file itself instead of receiving a copy of it."""

    def __init__(self, span: TokenSpan) -> None:
        self.span = span
        self._map: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.span)

    @property
    def array(self) -> np.ndarray:
        if self._map is None:
            self._map = self.span.memory_map()
        return self._map

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        return np.asarray(self.array[index])

    def __getstate__(self) -> dict[str, TokenSpan]:
        return {"span": self.span}

    def __setstate__(self, state: dict[str, TokenSpan]) -> None:
        self.span, self._map = state["span"], None


def open_tokens(path: Path) -> TokenSpan:
    """The ids of a raw uint16 or ``.npy`` file (1-D, integer), without reading them."""
    if path.suffix == ".npy":
        try:
            header = np.load(path, mmap_mode="r", allow_pickle=False)
        except ValueError:
            raise TokenFileError(f"{path}: not a readable .npy array (numpy.save format)") from None
        if header.ndim != 1 or not np.issubdtype(header.dtype, np.integer):
            raise TokenFileError(
                f"{path}: must hold a 1-D integer array, got {header.dtype}{header.shape}"
            )
        offset = header.offset if isinstance(header, np.memmap) else 0
        return TokenSpan(path, header.dtype, offset, len(header))
    size = path.stat().st_size
    if size % 2:
        raise TokenFileError(f"{path}: raw token files are uint16; the size must be even")
    return TokenSpan(path, np.dtype(np.uint16), 0, size // 2)


def checked_vocab(spans: list[TokenSpan], vocab_size: int | None) -> int:
    """The vocabulary: ``vocab_size``, else the largest id + 1; every id is checked against it
    (and, for a signed dtype, for being >= 0) one chunk at a time."""
    top = 0
    for span in spans:
        signed = np.issubdtype(span.dtype, np.signedinteger)
        for piece in span.chunks():
            if signed and int(piece.min()) < 0:
                raise TokenFileError(f"{span.path}: token ids must be >= 0, found {piece.min()}")
            top = max(top, int(piece.max()) + 1)
            if vocab_size is not None and top > vocab_size:
                raise TokenFileError(
                    f"{span.path}: token id {top - 1} >= data.vocab_size {vocab_size}"
                )
    return vocab_size or top


def sample(span: TokenSpan) -> np.ndarray:
    """All of ``span`` up to :data:`EXACT_LIMIT` ids, else :data:`SAMPLE_BLOCKS` evenly spaced
    blocks that add up to :data:`EXACT_LIMIT`."""
    if len(span) <= EXACT_LIMIT:
        return span.read(0, len(span))
    block = EXACT_LIMIT // SAMPLE_BLOCKS
    starts = np.linspace(0, len(span) - block, SAMPLE_BLOCKS).astype(np.int64)
    return np.concatenate([span.read(int(s), block) for s in starts])


def digest(spans: list[TokenSpan]) -> str:
    """sha256 prefix of the ids as int64, streamed; for spans over :data:`EXACT_LIMIT` ids in
    all, of their lengths and :func:`sample` of each."""
    h = hashlib.sha256()
    if sum(len(s) for s in spans) <= EXACT_LIMIT:
        for span in spans:
            for piece in span.chunks():
                h.update(piece.astype(np.int64).tobytes())
    else:
        for span in spans:
            h.update(f"sampled:{len(span)}:".encode())
            h.update(sample(span).astype(np.int64).tobytes())
    return h.hexdigest()[:16]


def cache_dir() -> Path:
    """Where scans are cached: ``$ABLATE_CACHE``, else ``$XDG_CACHE_HOME/ablate`` or
    ``~/.cache/ablate``."""
    if os.environ.get("ABLATE_CACHE"):
        return Path(os.environ["ABLATE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ablate"


def scan(train: TokenSpan, val: TokenSpan, vocab_size: int | None) -> tuple[int, str]:
    """The checked vocabulary and the digest of a train / val pair, from the cache when the
    files are unchanged since they were last scanned."""
    identity = [CACHE_VERSION, train.identity(), val.identity(), vocab_size, EXACT_LIMIT]
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]
    path = cache_dir() / "token_scans" / f"{key}.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        return int(cached["vocab_size"]), str(cached["digest"])
    except (OSError, ValueError, KeyError):
        pass
    found = {"vocab_size": checked_vocab([train, val], vocab_size), "digest": digest([train, val])}
    try:
        write_json_atomic(path, {**found, "files": identity})
    except OSError:
        pass  # a read-only cache only costs the next run a scan
    return found["vocab_size"], found["digest"]
