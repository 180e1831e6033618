"""Block codec: zstd-compressed bodies, verified against their sha256 on every read."""

from __future__ import annotations

import threading

import zstandard

from offload.core.hashing import decode, sha256_hex
from offload.errors import IntegrityError

# Below this size compression costs more than it saves.
MIN_COMPRESS = 64
_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_local, "c", None)
    if c is None:
        c = _local.c = zstandard.ZstdCompressor(level=3)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "d", None)
    if d is None:
        d = _local.d = zstandard.ZstdDecompressor()
    return d


def pack(data: bytes) -> tuple[str, bytes]:
    """Compress plaintext bytes; returns (codec, stored bytes)."""
    if len(data) < MIN_COMPRESS:
        return "raw", data
    packed: bytes = _compressor().compress(data)
    if len(packed) >= len(data):
        return "raw", data
    return "zstd", packed


def unpack(digest: str, codec: str, stored: bytes) -> str:
    """Decompress and verify; a mismatch raises IntegrityError, never returns bad text."""
    try:
        data = stored if codec == "raw" else _decompressor().decompress(stored)
    except zstandard.ZstdError as exc:
        raise IntegrityError(
            f"block {digest[:12]} cannot be decompressed ({exc}); run `offload doctor`"
        ) from exc
    if sha256_hex(data) != digest:
        raise IntegrityError(
            f"block {digest[:12]} does not match its hash (corrupted); run `offload doctor`"
        )
    return decode(data)
