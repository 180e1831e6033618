"""Reading an archive's lines within bounds: a hostile archive costs bounded memory and time.

An archive is one zstd frame of JSON lines (store/life/archive.py). A few kilobytes of zstd can
stand for gigabytes of text, so nothing here trusts the sizes the input implies:

- the frame is walked block by block before any of it is decompressed (cheap: a block
  header every up to 128 KiB of text), so a truncated archive is refused whole instead of
  importing the lines before the cut;
- lines are read one at a time, each at most :attr:`ImportLimits.line_bytes` long (the read
  stops one byte past the bound, so a 3 GiB line costs the bound, not 3 GiB);
- the number of records and the decompressed total are bounded too.

Each bound is a store setting (``store.import_max_line_mb``, ``import_max_records``,
``import_max_mb``); the error names the one that tripped and how to raise it.
"""

from __future__ import annotations

import io
import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import zstandard

from offload.config import StoreSettings
from offload.errors import InvalidInput, NotAFile

MIB = 1024 * 1024
_ZSTD_MAGIC = 0xFD2FB528
# Frame_Header_Descriptor: bytes of the dictionary id by its flag, of the content size by its
# flag (the first with and without Single_Segment)
_DID_BYTES = (0, 1, 2, 4)
_FCS_BYTES = (0, 2, 4, 8)
_RLE, _RESERVED = 1, 3


@dataclass(frozen=True)
class ImportLimits:
    """How much of an archive an import reads before refusing it (None: no bound)."""

    line_bytes: int | None = StoreSettings.import_max_line_mb * MIB
    records: int | None = StoreSettings.import_max_records
    total_bytes: int | None = StoreSettings.import_max_mb * MIB

    @classmethod
    def of(cls, s: StoreSettings) -> ImportLimits:
        """The bounds the store settings name."""
        return cls(s.import_max_line_mb * MIB, s.import_max_records, s.import_max_mb * MIB)

    @classmethod
    def unbounded(cls) -> ImportLimits:
        """No bound: for an archive this process has just written itself (a migration)."""
        return cls(None, None, None)


def _raise_hint(setting: str) -> str:
    env = "OFFLOAD_STORE__" + setting.upper()
    return f"raise store.{setting} ([store] in offload.toml, or {env}) if it is genuine"


def may_replace(path: Path) -> bool:
    """True when the regular file at ``path`` is empty or begins as a zstd frame (an older
    archive, most likely): what an export may write over without losing a user's file."""
    try:
        with path.open("rb") as raw:
            head = raw.read(4)
    except OSError as exc:
        raise InvalidInput(f"cannot read what {path} holds: {exc.strerror or exc}") from exc
    return not head or (len(head) == 4 and int.from_bytes(head, "little") == _ZSTD_MAGIC)


def check_frame(path: Path, raw: BinaryIO) -> None:
    """Refuse ``raw`` unless it holds a whole zstd frame (its header, every block to the one
    marked last, its checksum when it has one), read without decompressing anything."""
    size = os.fstat(raw.fileno()).st_size
    head = raw.read(5)
    if len(head) < 5 or int.from_bytes(head[:4], "little") != _ZSTD_MAGIC:
        raise InvalidInput(f"{path}: not an offload archive (not zstd-compressed)")
    fhd = head[4]
    single = (fhd >> 5) & 1
    if (fhd >> 3) & 1:
        raise InvalidInput(f"{path}: not an offload archive (a reserved zstd header bit is set)")
    fcs = _FCS_BYTES[fhd >> 6] or single
    pos = 5 + (0 if single else 1) + _DID_BYTES[fhd & 3] + fcs
    while True:
        raw.seek(pos)
        header = raw.read(3)
        if len(header) < 3:
            raise InvalidInput(f"{path}: the archive is truncated (its zstd frame is cut short)")
        value = int.from_bytes(header, "little")
        kind, length = (value >> 1) & 3, value >> 3
        if kind == _RESERVED:
            raise InvalidInput(f"{path}: the archive is corrupt (a reserved zstd block type)")
        pos += 3 + (1 if kind == _RLE else length)
        if pos > size:
            raise InvalidInput(f"{path}: the archive is truncated (its zstd frame is cut short)")
        if value & 1:
            break
    if (fhd >> 2) & 1 and pos + 4 > size:
        raise InvalidInput(f"{path}: the archive is truncated (its checksum is missing)")
    raw.seek(0)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number an archive may hold")


def _parse(path: Path, n: int, line: bytes | bytearray) -> Any:
    try:
        return json.loads(line.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as exc:
        raise InvalidInput(f"{path}: line {n} is not UTF-8 (byte {exc.start})") from exc
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{path}: line {n} is not JSON ({exc.msg})") from exc
    except (ValueError, RecursionError) as exc:  # NaN/Infinity, nesting past the parser's depth
        raise InvalidInput(f"{path}: line {n} is not an archive record ({exc})") from exc


def lines(path: Path, limits: ImportLimits) -> Iterator[tuple[int, Any]]:
    """(line number, parsed JSON value) of each line of the archive at ``path``, within
    ``limits``; InvalidInput naming the line (and the bound) for anything else."""
    cap = limits.line_bytes if limits.line_bytes is not None else -1
    total = 0
    try:
        with path.open("rb") as raw:
            check_frame(path, raw)
            with zstandard.ZstdDecompressor().stream_reader(raw) as zr:
                text = io.BufferedReader(zr, buffer_size=MIB)
                n = 0
                while line := _line(text, cap):
                    n += 1
                    _bound(path, n, line, limits)
                    total += len(line)
                    if limits.total_bytes is not None and total > limits.total_bytes:
                        mib = limits.total_bytes // MIB
                        raise InvalidInput(
                            f"{path}: the archive holds more than {mib} MiB of text "
                            f"(store.import_max_mb); {_raise_hint('import_max_mb')}"
                        )
                    yield n, _parse(path, n, line)
    except zstandard.ZstdError as exc:
        raise InvalidInput(f"{path}: not an offload archive ({exc})") from exc
    except OSError as exc:  # missing, a directory, unreadable: a path (exit 4), as add's
        raise NotAFile(f"{path}: cannot read ({exc.strerror or exc})") from exc


def _line(text: io.BufferedReader[Any], cap: int) -> bytes | bytearray:
    """The next line, read a mebibyte at a time and never more than one byte past ``cap``
    (-1: no bound); kept in one growing buffer, so an over-long line costs about its bound,
    not twice it as ``readline(cap)`` does when it joins its pieces."""
    if cap < 0:
        return text.readline()
    buf = bytearray()
    while len(buf) <= cap:
        piece = text.readline(min(MIB, cap + 1 - len(buf)))
        if not piece:
            break
        buf += piece
        if piece.endswith(b"\n"):
            break
    return buf


def _bound(path: Path, n: int, line: bytes | bytearray, limits: ImportLimits) -> None:
    if limits.line_bytes is not None and len(line) > limits.line_bytes:
        mib = _mib(limits.line_bytes)
        raise InvalidInput(
            f"{path}: line {n} is longer than {mib} MiB (store.import_max_line_mb); "
            f"{_raise_hint('import_max_line_mb')}"
        )
    if limits.records is not None and n > limits.records:
        raise InvalidInput(
            f"{path}: the archive holds more than {limits.records} records "
            f"(store.import_max_records); {_raise_hint('import_max_records')}"
        )


def _mib(n: int) -> str:
    value = n / MIB
    return str(int(value)) if value == math.floor(value) else f"{value:.2f}"


__all__ = ["MIB", "ImportLimits", "check_frame", "lines"]
