"""What a file of token ids holds and where: raw ids, a ``.npy`` array, or an llm.c shard.

Raw files are ids of ``data.token_dtype`` (uint16, nanoGPT's ``train.bin``, or uint32 for
vocabularies over 65,536). An llm.c shard (modded-nanogpt's ``fineweb_train_000001.bin``) is a
header of :data:`HEADER_INTS` int32 — magic number, version, the count of ids — then the ids;
it is recognised by its magic number (:data:`KNOWN_HEADERS`, or one the experiment declares in
``data.header_magics``), and a header that does not match its file's size is refused, as is a
file that starts like such a header with a magic number nobody declared (read raw, its header
would become ids). :func:`open_set` opens a shard set's files, in order, as one
:class:`~ablate.training.tokens.TokenSet`; :func:`write_shard` writes the llm.c layout.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ablate.training.tokens import TokenFileError, TokenSet, TokenSpan

HEADER_INTS = 256  # llm.c's shard header: 256 int32 (magic, version, token count, zeros)
KNOWN_HEADERS = {  # llm.c's magic numbers -> the ids' dtype (dev/data/data_common.py)
    20240520: np.dtype(np.uint16),  # GPT-2 tokens (llm.c, modded-nanogpt's fineweb10B)
    20240801: np.dtype(np.uint32),  # Llama 3 tokens (llm.c)
}
RAW_DTYPE = np.dtype(np.uint16)  # a raw file's ids unless data.token_dtype says uint32


def open_set(
    paths: list[Path], dtype: np.dtype = RAW_DTYPE, magics: tuple[int, ...] = ()
) -> TokenSet:
    """The files ``paths``, in order, as one run of ids (:func:`open_tokens` each); every file
    must hold ids of one dtype, and none may be listed twice."""
    seen: dict[Path, Path] = {}
    for path in paths:
        if path.resolve() in seen:
            raise TokenFileError(f"{path}: listed twice in one set (as {seen[path.resolve()]})")
        seen[path.resolve()] = path
    spans = tuple(open_tokens(path, dtype, magics) for path in paths)
    kinds = {span.dtype.str for span in spans}
    if len(kinds) > 1:
        raise TokenFileError(
            f"{paths[0]}: a shard set holds ids of one dtype; its files hold {sorted(kinds)}"
        )
    return TokenSet(spans)


def headered(path: Path, size: int, magics: tuple[int, ...], dtype: np.dtype) -> TokenSpan | None:
    """The ids of an llm.c shard (a header of :data:`HEADER_INTS` int32 whose first is a magic
    number of :data:`KNOWN_HEADERS` or of ``magics``, whose ids are ``dtype``), or None for a
    file without such a header. A header whose token count does not match the file's size is
    refused: a truncated shard, or not this layout."""
    header_bytes = HEADER_INTS * 4
    if size < header_bytes:
        first = np.fromfile(path, dtype="<i4", count=1)
        if len(first) and (int(first[0]) in KNOWN_HEADERS or int(first[0]) in magics):
            raise TokenFileError(
                f"{path}: starts with llm.c's magic {int(first[0])} but holds {size:,} bytes, "
                f"under its {header_bytes:,}-byte header: truncated"
            )
        return None
    header = np.fromfile(path, dtype="<i4", count=HEADER_INTS)
    magic = int(header[0])
    if magic not in KNOWN_HEADERS and magic not in magics:
        if looks_headered(header, size):
            raise TokenFileError(
                f"{path}: starts with an llm.c header (magic {magic}, its count matching the "
                f"file's size) of a magic number not known: declare it (data.header_magics: "
                f"[{magic}]) or the header is read as ids"
            )
        return None
    width = KNOWN_HEADERS.get(magic, np.dtype(dtype))
    count = int(header[2])
    expected = header_bytes + count * width.itemsize
    if count < 0 or size != expected:
        raise TokenFileError(
            f"{path}: its llm.c header (magic {magic}) counts {count:,} {width} ids, "
            f"{expected:,} bytes with the header; the file has {size:,}: truncated, or not "
            "this layout"
        )
    return TokenSpan(path, width, header_bytes, count)


def write_shard(path: Path, ids: np.ndarray, magic: int = 20240520, version: int = 1) -> None:
    """Write ``ids`` as one llm.c shard: the header (``magic``, ``version``, the count, zeros),
    then the ids as the magic's dtype (:data:`KNOWN_HEADERS`; uint16 for another magic)."""
    width = KNOWN_HEADERS.get(magic, RAW_DTYPE)
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (magic, version, len(ids))
    with path.open("wb") as handle:
        handle.write(header.tobytes())
        handle.write(np.asarray(ids).astype(width).tobytes())


def looks_headered(header: np.ndarray, size: int) -> bool:
    """Whether the first :data:`HEADER_INTS` int32 of a file read as a header of llm.c's
    layout (ints 3 on all zero, the count of ids of 2 or 4 bytes filling the file exactly)."""
    count = int(header[2])
    fills = any(size == len(header) * 4 + count * width for width in (2, 4))
    return count > 0 and fills and not header[3:].any()


def open_tokens(path: Path, dtype: np.dtype = RAW_DTYPE, magics: tuple[int, ...] = ()) -> TokenSpan:
    """The ids of one file, without reading them: a ``.npy`` array (1-D, integer), an llm.c
    shard (:func:`headered`), or raw ids of ``dtype``. An empty file is refused."""
    dtype = np.dtype(dtype)
    if path.suffix == ".npy":
        try:
            header = np.load(path, mmap_mode="r", allow_pickle=False)
        except (ValueError, EOFError, OSError):
            raise TokenFileError(f"{path}: not a readable .npy array (numpy.save format)") from None
        if header.ndim != 1 or not np.issubdtype(header.dtype, np.integer):
            raise TokenFileError(
                f"{path}: must hold a 1-D integer array, got {header.dtype}{header.shape}"
            )
        offset = header.offset if isinstance(header, np.memmap) else 0
        if len(header) == 0:
            raise TokenFileError(f"{path}: holds no ids (an empty array)")
        return TokenSpan(path, header.dtype, offset, len(header))
    size = path.stat().st_size
    found = headered(path, size, magics, dtype)
    if found is not None:
        if len(found) == 0:
            raise TokenFileError(f"{path}: its llm.c header counts no ids: an empty shard")
        return found
    if size == 0:
        raise TokenFileError(f"{path}: empty: a token file holds at least one id")
    if size % dtype.itemsize:
        raise TokenFileError(
            f"{path}: raw ids of {dtype} ({dtype.itemsize} bytes each) but {size:,} bytes: "
            "truncated, or another data.token_dtype"
        )
    return TokenSpan(path, dtype, 0, size // dtype.itemsize)
