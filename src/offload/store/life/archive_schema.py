"""What an archive's records may hold: a fixed schema, and every hash checked against bytes.

An import writes only what passes here: each record type has a fixed set of keys, each key
a type and a range that both backends can store (PostgreSQL's ``integer`` columns are 32
bits, its ``bigint`` 64); a key this version does not know, a value of the wrong type, a
missing required key and a record that is not an object are refused, naming the line. The
SQL an import runs is fixed text; no key of a record ever reaches it as a name.

Hashes are claims, so each is checked against the bytes the record carries: an entry's
``block_hash`` is the sha256 of its ``body``; its ``content_hash`` is the body's hash or, for
a lossy entry, the hash of the ``original`` it carries. A lossy entry without its original
(``put(keep_original=False)``) makes a claim nothing in the archive backs: it is refused
unless the caller accepts unverified content hashes (an archive it wrote itself).
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from offload.core.hashing import sha256_hex
from offload.errors import InvalidInput
from offload.store.state import COUNTER_MAX
from offload.store.write.puts import check_label

FORMAT = "offload-archive"
# the version an export writes; 2 marks entry vectors that may be in the 4-bit form
# (store/write/vectors.py), which an offload reading only version 1 would misread, so it
# refuses the archive instead
VERSION = 2
# the versions an import reads: a version 1 archive's vectors are int8, still read
READS = (1, 2)
INT32 = 2**31 - 1
INT64 = 2**63 - 1
Record = dict[str, Any]
Check = Callable[[Any], Any]  # the value as stored, or ValueError saying what is wrong


class _Field:
    __slots__ = ("check", "default", "required")

    def __init__(self, check: Check, *, required: bool = True, default: Any = None) -> None:
        self.check, self.required, self.default = check, required, default


def _text(value: Any) -> str:
    if not isinstance(value, str):
        raise ValueError(f"must be text, got {_type(value)}")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"is not valid Unicode at character {exc.start}") from exc
    return value


def _nonempty(value: Any) -> str:
    if not _text(value).strip():
        raise ValueError("must not be empty")
    return str(value)


def _digest(value: Any) -> str:
    if not isinstance(value, str) or len(value) != 64 or value.strip("0123456789abcdef"):
        raise ValueError("must be a sha256 digest (64 lowercase hex digits)")
    return value


def _integer(lo: int, hi: int) -> Check:
    def check(value: Any) -> int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise ValueError(f"must be a whole number, got {_type(value)}")
        if not lo <= value <= hi:
            raise ValueError(f"must be within [{lo}, {hi}]")
        return value

    return check


def _real(lo: float = -math.inf, hi: float = math.inf) -> Check:
    def check(value: Any) -> float:
        if not isinstance(value, int | float) or isinstance(value, bool):
            raise ValueError(f"must be a number, got {_type(value)}")
        number = float(value)
        if not (math.isfinite(number) and lo <= number <= hi):
            raise ValueError(f"must be a finite number within [{lo}, {hi}]")
        return number

    return check


def _nullable(check: Check) -> Check:
    return lambda value: None if value is None else check(value)


def _boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {_type(value)}")
    return value


def _status(value: Any) -> str:
    if value not in ("cold", "hot"):
        raise ValueError("must be cold or hot")
    return str(value)


def _labels(value: Any) -> list[str]:
    if not isinstance(value, list):
        raise ValueError(f"must be a list of labels, got {_type(value)}")
    for label in value:
        try:
            check_label(label)
        except InvalidInput as exc:
            raise ValueError(str(exc)) from exc
    return list(value)


def _vector(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or set(value) != {"model", "data"}:
        raise ValueError("must be an object of a model and its data")
    model = _nonempty(value["model"])
    try:
        data = base64.b64decode(_text(value["data"]), validate=True)
    except binascii.Error as exc:
        raise ValueError(f"is not base64 ({exc})") from exc
    if len(data) <= 4:  # a float32 scale, then at least one int8 component
        raise ValueError("is too short")
    return {"model": model, "data": data}


def _ignored(value: Any) -> None:
    """A column of the exporting store's own (an id, a checkout's owner, a write stamp):
    earlier versions wrote some of these; they never travel."""
    if value is not None and not isinstance(value, int | str):
        raise ValueError(f"must be a number or text, got {_type(value)}")


_TEXT = _Field(_text, required=True)
_WHEN = _Field(_real())
_MAYBE_WHEN = _Field(_nullable(_real()), required=False)
_LOCAL = _Field(_ignored, required=False)

ENTRY: Mapping[str, _Field] = {
    "kind": _Field(_nonempty),
    "topic": _TEXT,
    "tags": _TEXT,
    "summary": _TEXT,
    "salience": _Field(_real(0.0, 1.0)),
    "status": _Field(_status, required=False, default="cold"),
    "pinned": _Field(_integer(0, 1)),
    "tokens": _Field(_integer(0, INT32)),
    "content_hash": _Field(_digest),
    "block_hash": _Field(_digest),
    "source": _TEXT,
    "scope": _TEXT,
    "created": _WHEN,
    "accessed": _WHEN,
    "access_count": _Field(_integer(0, INT32)),
    "expires": _MAYBE_WHEN,
    "regenerate": _TEXT,
    "checked_out": _MAYBE_WHEN,
    "checked_in": _MAYBE_WHEN,
    "event_time": _MAYBE_WHEN,
    "labels": _Field(_labels, required=False, default=[]),
    "body": _TEXT,
    "original": _Field(_text, required=False),
    "original_indexed": _Field(_boolean, required=False, default=False),
    "vector": _Field(_vector, required=False),
    **dict.fromkeys(("id", "nonce", "owner_pid", "owner_host", "changed"), _LOCAL),
}
TOMBSTONE: Mapping[str, _Field] = {
    "entry_id": _Field(_nullable(_integer(0, INT64)), required=False),
    "content_hash": _Field(_digest),
    "labels": _Field(_text, required=False, default=""),
    "topic": _Field(_text, required=False, default=""),
    "source": _Field(_text, required=False, default=""),
    "scope": _Field(_text, required=False, default=""),
    "reason": _TEXT,
    "gone": _WHEN,
    "regenerate": _Field(_text, required=False, default=""),
}
STATE: Mapping[str, _Field] = {
    "namespace": _TEXT,
    "key": _TEXT,
    "value": _TEXT,
    "updated": _WHEN,
}
COUNTER: Mapping[str, _Field] = {
    "name": _TEXT,
    "value": _Field(_integer(0, COUNTER_MAX)),  # as the store's own counters can reach
}
TALLY: Mapping[str, _Field] = {
    "namespace": _TEXT,
    "key": _TEXT,
    "name": _TEXT,
    "value": _Field(_integer(-INT64 - 1, INT64)),
}
SCHEMAS: Mapping[str, Mapping[str, _Field]] = {
    "entry": ENTRY,
    "tombstone": TOMBSTONE,
    "state": STATE,
    "counter": COUNTER,
    "tally": TALLY,
}


def _type(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def check_header(path: Path, value: Any) -> None:
    """Refuse a first line that is not this format's header of a version read here."""
    if (
        not isinstance(value, dict)
        or value.get("format") != FORMAT
        or set(value)
        - {
            "format",
            "version",
        }
    ):
        raise InvalidInput(f"{path}: not an offload archive (missing header)")
    version = value.get("version")
    if type(version) is not int or version not in READS:
        shown = str(version)[:20]
        reads = ", ".join(map(str, READS))
        newer = type(version) is int and version > max(READS)
        why = ": a newer offload wrote it; import it with that version, or upgrade this one"
        raise InvalidInput(
            f"{path}: archive version {shown} is not supported (this offload reads {reads})"
            + (why if newer else "")
        )


def check_record(path: Path, n: int, value: Any, *, accept_unverified: bool = False) -> Record:
    """The record on line ``n`` as it will be stored: its known keys checked, defaults
    filled in, the local columns dropped and (for an entry) every hash verified."""
    if not isinstance(value, dict):
        raise InvalidInput(f"{path}: line {n} is not a record (a JSON {_type(value)})")
    kind = value.get("type")
    schema = SCHEMAS.get(kind) if isinstance(kind, str) else None
    if schema is None:
        shown = str(kind)[:40]
        raise InvalidInput(f"{path}: line {n} has an unknown record type {shown!r}")
    unknown = sorted(k for k in value if k != "type" and k not in schema)
    if unknown:
        raise InvalidInput(f"{path}: line {n} ({kind}) has an unknown key {unknown[0][:40]!r}")
    out: Record = {"type": kind}
    for name, field in schema.items():
        if name not in value:
            if field.required:
                raise InvalidInput(f"{path}: line {n} ({kind}) lacks {name!r}")
            if field.default is not None:
                out[name] = field.check(field.default)  # a fresh value, never shared
            continue
        try:
            checked = field.check(value[name])
        except ValueError as exc:
            raise InvalidInput(f"{path}: line {n} ({kind}): {name} {exc}") from exc
        if field.check is not _ignored:
            out[name] = checked
    if kind == "entry":
        _verify(path, n, out, accept_unverified)
    return out


def _hash(text: str) -> str:
    return sha256_hex(text.encode("utf-8"))  # encodable: _text checked it


def _verify(path: Path, n: int, r: Record, accept_unverified: bool) -> None:
    """Every hash an entry claims, against the bytes it carries."""
    where = f"{path}: line {n} (entry {r['content_hash'][:12]})"
    if _hash(r["body"]) != r["block_hash"]:
        raise InvalidInput(f"{where}: its body does not match its block_hash")
    lossy = r["content_hash"] != r["block_hash"]
    if "original" in r:
        if not lossy:
            raise InvalidInput(f"{where}: carries an original but is not lossy")
        if _hash(r["original"]) != r["content_hash"]:
            raise InvalidInput(f"{where}: its original does not match its content_hash")
    elif lossy and not accept_unverified:
        raise InvalidInput(
            f"{where}: its content_hash names an original the archive does not carry, so it "
            "cannot be verified; import with --accept-unverified only an archive you trust"
        )


__all__ = ["FORMAT", "READS", "SCHEMAS", "VERSION", "Record", "check_header", "check_record"]
