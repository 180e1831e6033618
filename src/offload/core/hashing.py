"""Content identity: sha256 of the UTF-8 plaintext, and the ``ctx:sha256:`` reference form."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

from offload.errors import EncodingError

CTX_PREFIX = "ctx:sha256:"
SHORT_HEX = 12


def encode(text: str) -> bytes:
    """UTF-8 bytes of ``text``; lone surrogates are refused, never silently replaced."""
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EncodingError(
            f"text is not valid Unicode at character {exc.start} (a lone surrogate?); "
            "send UTF-8 text"
        ) from exc


# a big text is encoded this many characters at a time (never one copy of all of it)
WINDOW_CHARS = 1 << 20


def encoded_windows(text: str) -> Iterator[bytes]:
    """``text``'s UTF-8 bytes a window at a time (their concatenation is :func:`encode`'s);
    lone surrogates are refused as there, at their place in the whole text."""
    for at in range(0, len(text), WINDOW_CHARS):
        try:
            yield encode(text[at : at + WINDOW_CHARS])
        except EncodingError as exc:
            cause = exc.__cause__
            start = at + cause.start if isinstance(cause, UnicodeEncodeError) else at
            raise EncodingError(
                f"text is not valid Unicode at character {start} (a lone surrogate?); "
                "send UTF-8 text"
            ) from cause


def identity_of(text: str) -> tuple[str, int]:
    """The hex sha256 of ``text``'s UTF-8 encoding and its length in bytes, encoded a
    window at a time (a big body is never copied whole)."""
    digest = hashlib.sha256()
    size = 0
    for window in encoded_windows(text):
        digest.update(window)
        size += len(window)
    return digest.hexdigest(), size


def decode(data: bytes) -> str:
    """Decode UTF-8 bytes strictly; invalid input is a clear error."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise EncodingError(
            f"input is not valid UTF-8 at byte {exc.start}; offload stores text only"
        ) from exc


def sha256_hex(data: bytes) -> str:
    """Hex sha256 of raw bytes."""
    return hashlib.sha256(data).hexdigest()


def text_hash(text: str) -> str:
    """Identity of a text: hex sha256 of its UTF-8 encoding."""
    return sha256_hex(encode(text))


def ctx_ref(digest: str) -> str:
    """The full reference form ``ctx:sha256:<64 hex>``."""
    return CTX_PREFIX + digest


def short_ref(digest: str) -> str:
    """The short reference shown in stubs and listings (an unambiguous-in-practice prefix)."""
    return CTX_PREFIX + digest[:SHORT_HEX]
