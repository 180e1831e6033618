"""What a topic or summary says that its entry's body does not already say (pure).

Search weighs an entry's topic and summary above its body (BM25F field weights), as
separate evidence of what the entry is about. A topic or summary *made from* the body (its
first line, an extractive gist) is no such evidence: its words are the body's, counted a
second and third time at a higher weight, and for a short entry (a chat turn) that is its
whole text. Indexed as given, an entry stored through a surface that derives them (MCP
``offload``, the proxy) ranks unlike the same text stored without them.

:func:`novel` keeps the pieces of such a text that the body does not hold word for word
(pieces are lines and `` | ``-joined parts; a clipped piece's ellipsis, a short leading
label such as ``error:``, and a comma list whose every item the body holds count as
copied). A piece of one word is always kept: a keyword a person chose ("auth") says what
the entry is about even where the body uses it too; so is a longer topic the body does
not hold verbatim ("auth refactor notes"). Comparison ignores differences of whitespace.
"""

from __future__ import annotations

import re

__all__ = ["novel"]

# where a derived text joins its pieces: lines, and gist's " | " between sections
_PIECES = re.compile(r"\n| \| ")
# a short leading label of a piece ("error: ", "ids: ", "sections: ")
_LABEL = re.compile(r"[A-Za-z][A-Za-z ]{0,23}: ")
_ELLIPSES = "…."


def novel(text: str, body: str) -> str:
    """``text`` without the pieces that ``body`` already holds word for word ("" when
    every piece is copied); pieces kept in order, joined by newlines."""
    if not text.strip():
        return ""
    flat_body: str | None = None
    kept: list[str] = []
    for raw in _PIECES.split(text):
        piece = raw.strip()
        if not piece:
            continue
        if flat_body is None:
            flat_body = " ".join(body.split())
        if not _copied(piece, flat_body):
            kept.append(piece)
    return "\n".join(kept)


def _copied(piece: str, flat_body: str) -> bool:
    """Whether ``piece`` (clipped, labelled, or a list of items) repeats the body."""
    flat = " ".join(piece.split()).strip(_ELLIPSES + " ")
    if _extract(flat, flat_body):
        return True
    label = _LABEL.match(flat)
    if label is None:
        return False
    rest = flat[label.end() :].strip(_ELLIPSES + " ")
    if _extract(rest, flat_body):
        return True
    items = [i.strip(_ELLIPSES + " ") for i in rest.split(",")]
    return len(items) > 1 and all(i and i in flat_body for i in items)


def _extract(flat: str, flat_body: str) -> bool:
    """A run of several words, or the whole body, found verbatim in the body."""
    return bool(flat) and (flat == flat_body or (" " in flat and flat in flat_body))
