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
# a longer piece is kept without searching for it (a gist line or a first line is shorter;
# the search's cost grows with the piece's words times the body's length)
_MAX_PIECE_CHARS = 400


def novel(text: str, body: str) -> str:
    """``text`` without the pieces that ``body`` already holds word for word ("" when
    every piece is copied); pieces kept in order, joined by newlines. The body is searched
    as it is (never copied or split: it may be tens of megabytes)."""
    if not text.strip():
        return ""
    kept: list[str] = []
    for raw in _PIECES.split(text):
        piece = raw.strip()
        if piece and not _copied(piece, body):
            kept.append(piece)
    return "\n".join(kept)


def _copied(piece: str, body: str) -> bool:
    """Whether ``piece`` (clipped, labelled, or a list of items) repeats the body."""
    flat = " ".join(piece.split()).strip(_ELLIPSES + " ")
    if len(flat) > _MAX_PIECE_CHARS:
        return False
    if _extract(flat, body):
        return True
    label = _LABEL.match(flat)
    if label is None:
        return False
    rest = flat[label.end() :].strip(_ELLIPSES + " ")
    if _extract(rest, body):
        return True
    items = [i.strip(_ELLIPSES + " ") for i in rest.split(",")]
    return len(items) > 1 and all(i and i in body for i in items)


def _extract(flat: str, body: str) -> bool:
    """A run of several words found verbatim in the body (whitespace between the words may
    differ), or the whole body itself."""
    if not flat:
        return False
    if len(body) <= 2 * len(flat) + 64 and " ".join(body.split()) == flat:
        return True
    return " " in flat and _holds(flat, body)


def _holds(flat: str, body: str) -> bool:
    """Whether ``body`` holds the words of ``flat`` in order, separated by any whitespace:
    a plain search first, then literal words joined by ``\\s+`` (each whitespace run of
    the body is scanned once per match attempt that reaches it: linear)."""
    if flat in body:
        return True
    words = flat.split(" ")
    # a match holds every word as it is: one the body lacks rules it out without the
    # pattern (compiling one per topic or summary cost more than searching a long body)
    if not all(word in body for word in words):
        return False
    pattern = r"\s+".join(re.escape(word) for word in words)
    return re.search(pattern, body) is not None
