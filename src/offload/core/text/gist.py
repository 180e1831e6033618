"""Extractive gists: a few short lines saying what a text is, with no model.

Built only from what is literally in the text — headings, the first meaningful lines, the
error line that matters, the identifiers it mentions most — so the same text always gives
the same bytes (stubs must be deterministic to keep provider prompt caches warm).
"""

from __future__ import annotations

import json
import re
from collections import Counter

from offload.core.text.markdown import headings, is_atx_heading
from offload.errors import InvalidInput

__all__ = ["gist", "identifiers"]

# Very large texts are read through a window (their head and tail) so a gist stays cheap.
_HEAD_CHARS = 200_000
_TAIL_CHARS = 50_000
_JSON_MAX_CHARS = 16_000_000

# A scheme is short; bounding it keeps a scan over a long dotted run linear.
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{0,31}://\S+")
_CANDIDATE = re.compile(r"[\w./~@+-]+")
_DOTTED = re.compile(r"[A-Za-z_][\w-]*(?:\.[A-Za-z_0-9][\w-]*)+")
_SNAKE = re.compile(r"_*[A-Za-z][A-Za-z0-9]*(?:_+[A-Za-z0-9]+)+_*")
# One capital after the first hump, then any alphanumerics: the same language as
# ``(?:[A-Z][A-Za-z0-9]*)+`` without its exponential backtracking (``'aB' * 28 + '+x'``).
_CAMEL = re.compile(r"(?:[A-Z][a-z0-9]+|[a-z][a-z0-9]*)[A-Z][A-Za-z0-9]*")
_ERR_CODE = re.compile(r"ERR_[A-Z0-9_]+|E\d{3,}")
_HAS_LETTER = re.compile(r"[A-Za-z]")

# Lines that report an error, not lines that merely mention one (``import FooError``).
# Only ever searched: a ``\b[\w.]*`` prefix before ``Error`` always matches (from the start
# of the word), so it is left out; rescanning it from every boundary was quadratic.
_ERROR_LINE = re.compile(
    r"(?:Error|Exception)\b(?:\[\w+\])?:"  # ValueError: …, error[E0382]: …
    r"|^\s*(?:E\s+)?[\w.]*(?:Error|Exception)\s*$"  # a bare exception line
    r"|\b(?:error|fatal|panic|FATAL|ERROR|Fatal|Panic)(?:\[\w+\])?[:!]"
    r"|^\s*(?:panic|fatal)\b|\bpanicked\b|\b(?:ERROR|FATAL|CRITICAL)\b|\bFAILED\b"
    r"|\bE\d{3,}\b|\bERR_[A-Z_]+"
)
# A word every alternative of _ERROR_LINE needs: lines (and texts) without one are not
# searched with it (most tool outputs have none; a literal scan is several times cheaper).
_ERROR_HINT = re.compile(
    r"Error|Exception|error|fatal|panic|FATAL|ERROR|Fatal|Panic|CRITICAL|FAILED|ERR_|E\d{3}"
)
_TRACEBACK = re.compile(r"\s*Traceback \(most recent call last\)")
_TRACE_FRAME = re.compile(r"\s*File \".*\", line \d+")
_FENCE = re.compile(r" {0,3}(?:`{3,}|~{3,})")
_BOILERPLATE = {"{", "}", "[", "]", "(", ")", "---", "...", "```", "~~~", "<!doctype html>"}
_FIRST_LINES = 2
_HEADINGS = 5
_SCAN_LINES = 2000  # headings and first lines come from the top of the text
_LINE_CHARS = 120  # one first line at most, so the others keep some room
_ERROR_CHARS = 160


def _window(text: str) -> str:
    if len(text) <= _HEAD_CHARS + _TAIL_CHARS:
        return text
    return text[:_HEAD_CHARS] + "\n" + text[-_TAIL_CHARS:]


def _classify(token: str) -> bool:
    if len(token) < 4:
        return False
    if token.islower() and "." not in token and "_" not in token and "/" not in token:
        return False  # a plain lower-case word (most tokens): no pattern below takes it
    if not _HAS_LETTER.search(token):
        return False
    if "/" in token:
        return token.strip("/.~") != "" and not token.startswith("//")
    return bool(
        _ERR_CODE.fullmatch(token)
        or _DOTTED.fullmatch(token)
        or _SNAKE.fullmatch(token)
        or _CAMEL.fullmatch(token)
    )


def identifiers(text: str, limit: int = 8) -> list[str]:
    """The salient identifiers of ``text``, most frequent first (ties: first seen first).

    Identifiers are CamelCase / camelCase names, names with an underscore, dotted names
    (``os.path.join``, ``config.py``), file paths (``src/a/b.py``) and error codes
    (``ERR_NOT_FOUND``, ``E501``); URLs are left out. Names shorter than 4 characters
    are ignored. Texts over ~250 k characters are read through their head and tail.
    """
    if limit <= 0:
        return []
    tokens = [t.strip(".-+~@") for t in _CANDIDATE.findall(_URL.sub(" ", _window(text)))]
    counts = Counter(tokens)  # its keys in the order first seen; each classified once
    kept = [token for token in counts if _classify(token)]
    kept.sort(key=lambda t: -counts[t])  # stable: ties stay first seen first
    return kept[:limit]


def _clean(line: str) -> str:
    return " ".join(line.split())


def _clip(line: str, limit: int) -> str:
    if limit <= 0:
        return ""
    if len(line) <= limit:
        return line
    return line[: limit - 1].rstrip() + "…"


def _meaningful(line: str) -> bool:
    stripped = line.strip()
    if not stripped or stripped.lower() in _BOILERPLATE or stripped.startswith("#!"):
        return False
    if _FENCE.match(line) or is_atx_heading(line):
        return False
    return any(ch.isalnum() for ch in stripped)


def _first_lines(lines: list[str], skip: str) -> list[str]:
    out: list[str] = []
    for line in lines:
        if _meaningful(line) and not (_TRACEBACK.match(line) or _TRACE_FRAME.match(line)):
            cleaned = _clean(line)
            if cleaned == skip:
                continue
            cleaned = _clip(cleaned, _LINE_CHARS)
            if cleaned not in out:
                out.append(cleaned)
            if len(out) == _FIRST_LINES:
                break
    return out


def _error_line(lines: list[str]) -> tuple[str, int]:
    """The error line worth showing (the last line of the last traceback if there is one)
    and how many lines look like errors."""
    hits = [
        i
        for i, line in enumerate(lines)
        if _ERROR_HINT.search(line) and _ERROR_LINE.search(line) and not _TRACEBACK.match(line)
    ]
    if not hits:
        return "", 0
    tracebacks = [i for i, line in enumerate(lines) if _TRACEBACK.match(line)]
    chosen = hits[0]
    if tracebacks:
        after = [i for i in hits if i > tracebacks[-1] and not _TRACE_FRAME.match(lines[i])]
        # The exception line closes a traceback: the first unindented hit after its header.
        unindented = [i for i in after if not lines[i][:1].isspace()]
        if unindented:
            chosen = unindented[0]
        elif after:
            chosen = after[-1]
    return _clean(lines[chosen]), len(hits)


def _json_summary(text: str) -> str | None:
    stripped = text.strip()
    if not stripped or stripped[0] not in "{[" or len(stripped) > _JSON_MAX_CHARS:
        return None
    try:
        data = json.loads(stripped)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict):
        keys = [str(k) for k in data]
        noun = "key" if len(keys) == 1 else "keys"
        return (
            f"JSON object, {len(keys)} {noun}: " + ", ".join(keys) if keys else "JSON object, empty"
        )
    if isinstance(data, list):
        noun = "item" if len(data) == 1 else "items"
        head = f"JSON array of {len(data)} {noun}"
        if data and all(isinstance(x, dict) for x in data):
            item_keys: dict[str, None] = {}
            for item in data[:50]:
                for k in item:
                    item_keys.setdefault(str(k), None)
            return f"{head} (objects; keys: " + ", ".join(item_keys) + ")"
        return head
    return None


def gist(text: str, max_chars: int = 280) -> str:
    """A deterministic one-to-few-line summary of ``text``, never longer than ``max_chars``.

    JSON is described by its top-level keys or array length. Other text gets, as room
    allows: its first headings, its first meaningful lines (skipping blanks, punctuation,
    braces, ``---``, shebangs), the error line that matters (the exception line after the
    last traceback, else the first error-looking line, with a count when there are more),
    and its most frequent identifiers. Error lines are lines that report an error
    (``ValueError: …``, ``error: …``, ``FAILED``, ``panic``, ``fatal:``, ``E501``,
    ``ERR_CODE``, an ``ERROR`` log level), not lines that merely name an error class.
    Empty or blank text is ``(empty)``. Headings and first lines come from the first
    2000 lines; very large texts are read through their head and tail.
    """
    if max_chars < 0:
        raise InvalidInput(f"max_chars must be >= 0, not {max_chars}")
    if not text.strip():
        return _clip("(empty)", max_chars)

    json_line = _json_summary(text)
    if json_line is not None:
        ids = identifiers(text, limit=6)
        ids_line = "ids: " + ", ".join(ids) if ids else ""
        return _fit([json_line, ids_line], [0, 1], max_chars)

    window = _window(text)
    lines = window.splitlines()
    top = "\n".join(lines[:_SCAN_LINES])
    heads = [h.title for h in headings(top)[:_HEADINGS] if h.title]
    error, n_errors = _error_line(lines) if _ERROR_HINT.search(window) else ("", 0)
    first = _first_lines(lines[:_SCAN_LINES], skip=error)
    ids = identifiers(text)

    # Display order: headings, first lines, error, identifiers.
    parts: list[str] = []
    parts.append("sections: " + " | ".join(heads) if heads else "")
    parts.append(first[0] if first else "")
    parts.append(first[1] if len(first) > 1 else "")
    more = f" (+{n_errors - 1} more error lines)" if n_errors > 1 else ""
    parts.append(f"error: {_clip(error, _ERROR_CHARS)}{more}" if error else "")
    parts.append("ids: " + ", ".join(ids) if ids else "")
    # What survives when room is short: first line, error, headings, ids, second line.
    priority = [1, 3, 0, 4, 2]
    return _fit(parts, priority, max_chars)


def _fit(parts: list[str], priority: list[int], max_chars: int) -> str:
    """Keep parts in priority order while they fit (clipping the last one that half
    fits), then join the kept ones in display order, one per line."""
    kept: dict[int, str] = {}
    used = 0
    for idx in priority:
        part = parts[idx]
        if not part:
            continue
        room = max_chars - used - (1 if kept else 0)  # the newline joining it
        if room <= 0:
            break
        if len(part) > room:
            # Clip only a part that still says something; else leave the room unused.
            if room < 24 and kept:
                continue
            part = _clip(part, room)
        kept[idx] = part
        used += len(part) + (1 if len(kept) > 1 else 0)
    out = "\n".join(kept[i] for i in sorted(kept))
    return _clip(out, max_chars)
