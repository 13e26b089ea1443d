"""Token files and shard sets of any size: memory-mapped for batches, scanned in bounded chunks,
never read whole.

A ``tokens_file`` is one file or a shard set, read in order as one run of ids: a
:class:`TokenSet` of :class:`TokenSpan` (what each file holds and where:
:mod:`ablate.training.token_formats`). Batches read only their windows' pages through a memory
map per file (:class:`MappedIds`), so a window reads the same ids however the set is cut into
files.

What a run needs from the whole set — every id checked (non-negative, below the vocabulary),
the digest and the unigram floor — comes from one :func:`scan`, a bounded piece at a time, so
memory stays bounded whatever the size. Up to :data:`EXACT_LIMIT` ids the digest is of the ids
as int64 (an in-memory corpus's with the same ids); above it, of each :data:`BLOCK` ids' raw
bytes (every id counts), the blocks read and hashed by :data:`SCAN_THREADS` threads. The
unigram floor of a large set comes from :data:`SAMPLE_BLOCKS` evenly spaced blocks. A scan's
result is cached under :func:`cache_dir`, keyed by each file's path, inode, size, modification
and status-change times, so the runs of an experiment scan a set once and a file rewritten in
any way is scanned again. :func:`check_disjoint` refuses a validation file that is a training
file too.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from ablate.core.folders import write_json_atomic

CHUNK = 1 << 24  # ids per bounded read of a small set or a span (32 MiB of uint16)
EXACT_LIMIT = 1 << 24  # up to 16 Mi ids: exact digest and unigram counts
SAMPLE_BLOCKS = 64  # above it: this many evenly spaced blocks
CACHE_VERSION = 3  # bump when what a scan computes changes (3: large sets digested by blocks)
BLOCK = 1 << 26  # ids per independently hashed block of a large set (its digest's unit)
PIECE = 1 << 22  # ids a block's scan reads at a time (8 MiB of uint16)
SCAN_THREADS = min(4, os.cpu_count() or 1)  # blocks read and hashed at once
COUNT_BLOCK = 1 << 20  # ids per bincount in unigram_counts (8 MiB as int64)
FINGERPRINT = 1 << 20  # bytes read from each end of a file to find a repeated file cheaply


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


@dataclass(frozen=True)
class TokenSet:
    """Spans read in order as one run of ids: a shard set, or one file (one span)."""

    spans: tuple[TokenSpan, ...]

    def __len__(self) -> int:
        return sum(len(s) for s in self.spans)

    @property
    def starts(self) -> np.ndarray:
        """Where each span's ids begin in the set, and the set's length after them."""
        return np.concatenate([[0], np.cumsum([len(s) for s in self.spans])]).astype(np.int64)

    def split(self, at: int) -> tuple[TokenSet, TokenSet]:
        """The ids before ``at`` and from ``at`` on (a span that straddles ``at`` is cut)."""
        head: list[TokenSpan] = []
        tail: list[TokenSpan] = []
        for span, start in zip(self.spans, self.starts, strict=False):
            if start + len(span) <= at:
                head.append(span)
            elif start >= at:
                tail.append(span)
            else:
                before, after = span.split(int(at - start))
                head.append(before)
                tail.append(after)
        return TokenSet(tuple(head)), TokenSet(tuple(tail))

    def read(self, start: int, count: int) -> np.ndarray:
        """``count`` ids from ``start`` (clipped to the set), across files, in a new array."""
        pieces = []
        for span, first in zip(self.spans, self.starts, strict=False):
            lo, hi = max(start, int(first)), min(start + count, int(first) + len(span))
            if lo < hi:
                pieces.append(span.read(lo - int(first), hi - lo))
        dtype = self.spans[0].dtype if self.spans else np.dtype(np.uint16)
        return np.concatenate(pieces) if pieces else np.zeros(0, dtype=dtype)

    def path_at(self, position: int) -> Path:
        """The file that holds id ``position`` of the set."""
        return self.spans[int(np.searchsorted(self.starts, position, side="right")) - 1].path

    def identity(self) -> list[object]:
        """Each span's :meth:`TokenSpan.identity`, in order."""
        return [span.identity() for span in self.spans]


class MappedIds:
    """A set's ids for batches: a memory map per file, made on first use, that pickles as the
    set, so a spawned DDP process maps the files itself instead of receiving a copy of them."""

    def __init__(self, ids: TokenSet) -> None:
        self.ids = ids
        self._maps: list[np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def maps(self) -> list[np.ndarray]:
        if self._maps is None:
            self._maps = [span.memory_map() for span in self.ids.spans]
        return self._maps

    def __getitem__(self, index: np.ndarray) -> np.ndarray:
        """The ids at ``index`` (an array of positions in the set, any shape)."""
        index = np.asarray(index)
        if len(self.maps) == 1:
            return np.asarray(self.maps[0][index])
        starts = self.ids.starts
        which = np.searchsorted(starts, index, side="right") - 1
        found = np.empty(index.shape, dtype=np.result_type(*(m.dtype for m in self.maps)))
        for k in np.unique(which):
            inside = which == k
            found[inside] = self.maps[k][index[inside] - starts[k]]
        return found

    def __getstate__(self) -> dict[str, TokenSet]:
        return {"ids": self.ids}

    def __setstate__(self, state: dict[str, TokenSet]) -> None:
        self.ids, self._maps = state["ids"], None


def scanned(sets: list[TokenSet], vocab_size: int | None) -> tuple[int, str]:
    """One pass over every id: the vocabulary (``vocab_size``, else the largest id + 1; every
    id checked against it and, for a signed dtype, for being >= 0) and the digest: of the ids
    as int64 up to :data:`EXACT_LIMIT` ids in all, read in order; above it, of the sha256 of
    each :data:`BLOCK` ids of the raw bytes, in order, with each set's dtype and length (blocks
    of the set, not of its files: the same ids cut into other files give the same digest),
    the blocks read and hashed by :data:`SCAN_THREADS` threads at once."""
    if sum(len(s) for s in sets) <= EXACT_LIMIT:
        h, top = hashlib.sha256(), 0
        for ids in sets:
            for at in range(0, len(ids), CHUNK):
                piece = ids.read(at, CHUNK)
                top = max(top, checked(piece, ids, at, vocab_size))
                h.update(piece.astype(np.int64).tobytes())
        return vocab_size or top, h.hexdigest()[:16]
    blocks = [(ids, at) for ids in sets for at in range(0, len(ids), BLOCK)]
    pool = ThreadPoolExecutor(max_workers=SCAN_THREADS)
    try:
        found = list(pool.map(lambda block: hashed_block(*block, vocab_size), blocks))
    finally:  # a refused id or Ctrl-C: the blocks not begun are dropped, not waited for
        pool.shutdown(wait=False, cancel_futures=True)
    h = hashlib.sha256()
    for ids in sets:
        dtype = ids.spans[0].dtype.str if ids.spans else ""
        h.update(f"blocks:{dtype}:{len(ids)}:{BLOCK}:".encode())
        h.update(
            b"".join(
                digest for (of, _), (_, digest) in zip(blocks, found, strict=True) if of is ids
            )
        )
    top = max((block_top for block_top, _ in found), default=0)
    return vocab_size or top, h.hexdigest()[:16]


def hashed_block(ids: TokenSet, start: int, vocab_size: int | None) -> tuple[int, bytes]:
    """The largest id + 1 and the sha256 of the raw bytes of ids ``start`` to ``start`` +
    :data:`BLOCK` of ``ids``, read :data:`PIECE` ids at a time (each checked)."""
    h, top = hashlib.sha256(), 0
    for at in range(start, min(start + BLOCK, len(ids)), PIECE):
        piece = ids.read(at, min(PIECE, start + BLOCK - at))
        top = max(top, checked(piece, ids, at, vocab_size))
        h.update(piece)
    return top, h.digest()


def checked(piece: np.ndarray, ids: TokenSet, at: int, vocab_size: int | None) -> int:
    """The largest id + 1 of ``piece`` (ids ``at`` on of ``ids``), refused in one line that
    names the file where an id is negative or not below ``vocab_size``."""
    if not len(piece):
        return 0
    if np.issubdtype(piece.dtype, np.signedinteger) and int(piece.min()) < 0:
        where = ids.path_at(at + int(np.argmin(piece)))
        raise TokenFileError(f"{where}: token ids must be >= 0, found {piece.min()}")
    top = int(piece.max()) + 1
    if vocab_size is not None and top > vocab_size:
        where = ids.path_at(at + int(np.argmax(piece)))
        raise TokenFileError(f"{where}: token id {top - 1} >= data.vocab_size {vocab_size}")
    return top


def sampled(ids: TokenSet) -> list[tuple[int, int]]:
    """Where :func:`sample` reads, as (start, count): all of ``ids`` up to
    :data:`EXACT_LIMIT` ids, else :data:`SAMPLE_BLOCKS` evenly spaced blocks that add up to
    :data:`EXACT_LIMIT`."""
    if len(ids) <= EXACT_LIMIT:
        return [(0, len(ids))]
    block = EXACT_LIMIT // SAMPLE_BLOCKS
    starts = np.linspace(0, len(ids) - block, SAMPLE_BLOCKS).astype(np.int64)
    return [(int(s), block) for s in starts]


def sample(ids: TokenSet) -> np.ndarray:
    """The ids :func:`sampled` names, in one array (across files as one run of ids)."""
    return np.concatenate([ids.read(start, count) for start, count in sampled(ids)])


def unigram_counts(ids: TokenSet, vocab_size: int) -> np.ndarray:
    """How often each id occurs in :func:`sample`, counted :data:`COUNT_BLOCK` ids at a time
    (a bincount converts its input to int64: whole, it would hold 8 bytes an id at once)."""
    counts = np.zeros(vocab_size, dtype=np.int64)
    for start, count in sampled(ids):
        for at in range(start, start + count, COUNT_BLOCK):
            piece = ids.read(at, min(COUNT_BLOCK, start + count - at))
            counts += np.bincount(piece, minlength=vocab_size)
    return counts


def fingerprint(span: TokenSpan) -> str:
    """sha256 prefix of a span's size and the first and last :data:`FINGERPRINT` bytes of its
    ids: equal for the same file content, and cheap whatever the size."""
    size = len(span) * span.dtype.itemsize
    h = hashlib.sha256(f"{span.dtype.str}:{len(span)}:".encode())
    with span.path.open("rb") as handle:
        for start in (0, max(0, size - FINGERPRINT)):
            handle.seek(span.offset + start)
            h.update(handle.read(min(FINGERPRINT, size)))
    return h.hexdigest()[:24]


def content_digest(span: TokenSpan) -> str:
    """sha256 of a span's ids, read whole in chunks."""
    h = hashlib.sha256()
    for piece in span.chunks():
        h.update(piece)
    return h.hexdigest()


def check_disjoint(train: TokenSet, val: TokenSet) -> None:
    """Refuse a validation file that is a training file too, by path or by content (the same
    :func:`fingerprint`, then the same :func:`content_digest`)."""
    seen = {span.path.resolve(): span for span in train.spans}
    for span in val.spans:
        if span.path.resolve() in seen:
            raise TokenFileError(f"{span.path}: is both a training and a validation file")
    prints: dict[str, list[TokenSpan]] = {}
    for span in train.spans:
        prints.setdefault(fingerprint(span), []).append(span)
    for span in val.spans:
        for twin in prints.get(fingerprint(span), []):
            if content_digest(twin) != content_digest(span):
                continue
            raise TokenFileError(
                f"{span.path}: holds the same ids as training file {twin.path}: validation "
                "must be data the model did not train on"
            )


def cache_dir() -> Path:
    """Where scans are cached: ``$ABLATE_CACHE``, else ``$XDG_CACHE_HOME/ablate`` or
    ``~/.cache/ablate``."""
    if os.environ.get("ABLATE_CACHE"):
        return Path(os.environ["ABLATE_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "ablate"


def scan(
    train: TokenSet, val: TokenSet, vocab_size: int | None, separate: bool = False
) -> tuple[int, str]:
    """The checked vocabulary and the digest of a train / val pair (:func:`scanned`), from the
    cache when the files are unchanged since they were last scanned; a ``separate`` validation
    set (``data.val_path``) is first checked to share no file with training
    (:func:`check_disjoint`), once, like the rest of the scan."""
    identity = [CACHE_VERSION, train.identity(), val.identity(), vocab_size, EXACT_LIMIT]
    key = hashlib.sha256(json.dumps(identity).encode()).hexdigest()[:24]
    path = cache_dir() / "token_scans" / f"{key}.json"
    try:
        cached = json.loads(path.read_text(encoding="utf-8"))
        return int(cached["vocab_size"]), str(cached["digest"])
    except (OSError, ValueError, KeyError):
        pass
    if separate:
        check_disjoint(train, val)
    vocab, digest = scanned([train, val], vocab_size)
    found = {"vocab_size": vocab, "digest": digest}
    try:
        write_json_atomic(path, {**found, "files": identity})
    except OSError:
        pass  # a read-only cache only costs the next run a scan
    return found["vocab_size"], found["digest"]
