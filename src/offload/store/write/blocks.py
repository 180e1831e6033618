"""Block codec: zstd-compressed bodies, verified against their sha256 on every read."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import IO, TypeVar

import zstandard

from offload.core.hashing import decode, encoded_windows, sha256_hex
from offload.core.lru import Lru
from offload.errors import IntegrityError

T = TypeVar("T")
# Below this size compression costs more than it saves.
MIN_COMPRESS = 64


def per_thread(make: Callable[[], T]) -> Callable[[], T]:
    """A getter of one object per thread, made on its first use: zstandard's compressors
    and decompressors must not be shared between threads."""
    local = threading.local()

    def get() -> T:
        made: T | None = getattr(local, "made", None)
        if made is None:
            made = local.made = make()
        return made

    return get


_compressor = per_thread(lambda: zstandard.ZstdCompressor(level=6))
# a zstd frame's reader: the frame says how it was written
decompressor = per_thread(zstandard.ZstdDecompressor)
#: The most one zstd block can inflate to (RFC 8878: 128 KiB), and the fewest bytes it
#: takes (a 3-byte header and the one byte an RLE block repeats).
_BLOCK_MOST = 128 * 1024
_BLOCK_LEAST = 4


def pack(data: bytes) -> tuple[str, bytes]:
    """Compress plaintext bytes; returns (codec, stored bytes)."""
    if len(data) < MIN_COMPRESS:
        return "raw", data
    packed: bytes = _compressor().compress(data)
    if len(packed) >= len(data):
        return "raw", data
    return "zstd", packed


def pack_text(text: str, size: int) -> tuple[str, bytes]:
    """:func:`pack` of ``text``'s UTF-8 bytes (``size`` of them), encoded and compressed a
    window at a time: a big body's bytes are never held whole beside its text."""
    stream = _compressor().compressobj(size=size)  # the frame says its size: decompress()
    parts = [stream.compress(w) for w in encoded_windows(text)]
    parts.append(stream.flush())
    packed = b"".join(parts)
    if len(packed) >= size:
        return "raw", b"".join(encoded_windows(text))
    return "zstd", packed


def pack_text_into(text: str, size: int, out: IO[bytes]) -> str:
    """:func:`pack_text` of ``text`` written to ``out`` (an empty file) a window at a time
    instead of returned: a big body's stored bytes are never held in memory. Returns the
    codec; ``out`` then holds exactly the stored bytes."""
    stream = _compressor().compressobj(size=size)
    written = 0
    for w in encoded_windows(text):
        written += out.write(stream.compress(w))
    written += out.write(stream.flush())
    if written < size:
        return "zstd"
    out.seek(0)
    out.truncate()
    for w in encoded_windows(text):
        out.write(w)
    return "raw"


def unpack(digest: str, codec: str, stored: bytes) -> str:
    """Decompress and verify; a mismatch raises IntegrityError, never returns bad text.
    A frame declaring more than its bytes could inflate to is refused before anything is
    allocated (the decompressor allocates what the frame declares: 40 GB raised
    MemoryError)."""
    try:
        if codec != "raw" and declared_size(stored) > _most_inflated(len(stored)):
            raise zstandard.ZstdError(
                f"its frame declares {declared_size(stored)} bytes, more than "
                f"{len(stored)} compressed bytes can hold"
            )
        data = stored if codec == "raw" else decompressor().decompress(stored)
    except zstandard.ZstdError as exc:
        raise IntegrityError(
            f"block {digest[:12]} cannot be decompressed ({exc}); run `offload doctor`"
        ) from exc
    if sha256_hex(data) != digest:
        raise IntegrityError(
            f"block {digest[:12]} does not match its hash (corrupted); run `offload doctor`"
        )
    return decode(data)


def declared_size(stored: bytes) -> int:
    """The content size a zstd frame's header declares (-1: none, or no frame header)."""
    try:
        return int(zstandard.frame_content_size(stored))
    except zstandard.ZstdError:
        return -1


def _most_inflated(stored: int) -> int:
    """The most bytes a zstd frame of ``stored`` bytes can inflate to: every byte after
    the magic number in blocks of the fewest bytes, each inflating to the most."""
    return (stored // _BLOCK_LEAST + 1) * _BLOCK_MOST


class BodyCache:
    """Verified plaintexts by hash, least recently used out first, bounded in characters.

    Blocks are immutable (identity is the hash), so a cached body never goes stale; paging
    through one large body re-reads it without decompressing and re-hashing every time.
    Small bodies (under ``small_body`` characters: a search's snippets, a turn read back)
    cost microseconds to read again, so they share a bound of their own, ``small_chars``:
    a serving process that reads thousands of them keeps a few MB, not ``max_chars``.
    """

    def __init__(
        self,
        max_chars: int = 32 * 1024 * 1024,
        small_chars: int = 4 * 1024 * 1024,
        small_body: int = 64 * 1024,
    ) -> None:
        self.small_body = small_body
        self._large: Lru[str, str] = Lru(max_chars, weigh=len)
        self._small: Lru[str, str] = Lru(small_chars, weigh=len)

    def get(self, digest: str) -> str | None:
        """The cached body, or None."""
        text = self._small.get(digest)
        return self._large.get(digest) if text is None else text

    @property
    def held_chars(self) -> int:
        """Characters of the bodies held now."""
        return self._small.weight + self._large.weight

    def clear(self) -> None:
        """Forget every body (a long-running process's quiet time: they are read again)."""
        self._small.clear()
        self._large.clear()

    def put(self, digest: str, text: str) -> None:
        """Remember a verified body (one larger than its share of the cache is not kept)."""
        (self._small if len(text) < self.small_body else self._large).put(digest, text)
