"""Archives that decompress to far more than they weigh, built in a few kilobytes.

A zstd frame may hold RLE blocks: four bytes that stand for up to 128 KiB of one byte. So a
gigabyte line costs ~32 KB to write and nothing to compress, and a reader that does not
bound what it reads would allocate the whole of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import zstandard

HEADER = b'{"format": "offload-archive", "version": 1}\n'
_MAGIC = (0xFD2FB528).to_bytes(4, "little")
_BLOCK = 128 * 1024  # zstd's largest block
_RAW, _RLE = 0, 1


def _block(kind: int, size: int, payload: bytes, last: bool) -> bytes:
    return ((size << 3) | (kind << 1) | int(last)).to_bytes(3, "little") + payload


def line_bomb(path: Path, line_bytes: int) -> int:
    """Write an archive whose second line is ``line_bytes`` of ``a`` (no newline before
    the end); the file's size in bytes."""
    # no content size, no checksum, a 128 KiB window (Window_Descriptor: exponent 7)
    parts = [_MAGIC, bytes([0x00, 0x38]), _block(_RAW, len(HEADER), HEADER, False)]
    left = line_bytes
    while left:
        n = min(left, _BLOCK)
        left -= n
        parts.append(_block(_RLE, n, b"a", False))
    parts.append(_block(_RAW, 1, b"\n", True))
    data = b"".join(parts)
    path.write_bytes(data)
    return len(data)


def record_bomb(path: Path, records: int) -> int:
    """Write an archive of ``records`` identical counter records; the file's size."""
    line = json.dumps({"type": "counter", "name": "n", "value": 1}).encode() + b"\n"
    with path.open("wb") as out, zstandard.ZstdCompressor(level=1).stream_writer(out) as zw:
        zw.write(HEADER)
        chunk = line * 4096
        for _ in range(records // 4096):
            zw.write(chunk)
        zw.write(line * (records % 4096))
    return path.stat().st_size
