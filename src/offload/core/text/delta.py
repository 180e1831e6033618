"""Near-duplicate bodies: whether a text is an earlier one with a few lines changed, and
which lines.

A file read again after an edit, a command run again: the new body is mostly the lines of
an earlier one. Its stub can then say "same as <earlier> except these lines" instead of a
gist of the whole (:mod:`offload.proxy.rewrite.stubs.message_stubs`).

Every step is bounded and runs in time about linear in the texts' sizes, never quadratic:

- a text's :class:`Shape` (its line hashes and digest) is made once per content and
  memoised (:class:`Shapes`, bounded in characters); texts over :data:`MAX_CHARS`
  characters or :data:`MAX_LINES` lines are never compared;
- candidates are ranked by the Jaccard resemblance of their sets of line hashes (a set
  intersection each) and only the most resembling one is diffed;
- the diff anchors on lines that occur once in each text (patience diff: a longest
  increasing subsequence, ``O(k log k)``) and matches the common ends of each gap between
  anchors; what is left in a gap is one changed hunk. It is a valid diff (applying it to
  the old lines gives the new ones exactly), not always a minimal one.

A text is a near duplicate of an earlier one when at least :data:`MIN_SHARED` of its
characters lie in lines it shares unchanged with it: more than half of it is already said
by the earlier body, so naming the earlier body and the changed lines says the most.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from offload.core.hashing import text_hash
from offload.core.lru import MISSING, Lru
from offload.core.text.lines import line_content, split_lines
from offload.core.untrusted import inline

#: Texts larger than this (characters or lines) are never compared: the bound on one test.
MAX_CHARS = 512 * 1024
MAX_LINES = 16384
#: The share of a text's characters that must lie in lines shared unchanged with the
#: earlier text for it to count as a near duplicate of it.
MIN_SHARED = 0.5
#: Characters of changed lines shown at most (the rest is counted, and read in the whole).
SHOWN_CHARS = 480
#: Characters of one shown line at most.
LINE_CHARS = 160
#: Leading blanks of a shown line kept at most (indentation matters in code).
INDENT_CHARS = 16


@dataclass(frozen=True)
class Shape:
    """What the resemblance test needs of one text, made once per content."""

    text: str
    digest: str  # sha256 hex of the text (what its stub's reference names)
    hashes: frozenset[int]  # the process's hash of each distinct line (never persisted)


def shape(text: str) -> Shape | None:
    """The shape of ``text``; None when it is too large to compare or has under 2 lines."""
    if len(text) > MAX_CHARS:
        return None
    lines = text.split("\n")
    if not 2 <= len(lines) <= MAX_LINES:
        return None
    return Shape(text, text_hash(text), frozenset(map(hash, lines)))


def resemblance(a: Shape, b: Shape) -> float:
    """Jaccard resemblance of the two texts' sets of distinct lines (0 to 1)."""
    if not a.hashes or not b.hashes:
        return 0.0
    shared = len(a.hashes & b.hashes)
    return shared / (len(a.hashes) + len(b.hashes) - shared)


class Shapes:
    """Shapes by content, least recently used out first, bounded by what they hold in memory
    (:func:`footprint`; thread-safe).

    Looked up by the text's length and Python hash (a text object caches its hash, so a
    text seen again costs nothing), then confirmed by comparing the text itself.
    """

    def __init__(self, max_bytes: int = 16 * 1024 * 1024) -> None:
        self._items: Lru[tuple[int, int], Shape | None] = Lru(max_bytes, weigh=footprint)

    @property
    def max_bytes(self) -> int:
        """The most memory the shapes kept may hold (as :func:`footprint` counts it)."""
        return self._items.bound

    def __len__(self) -> int:
        return len(self._items)

    def shrink(self, max_bytes: int) -> None:
        """Keep only the shapes used last, at most ``max_bytes`` of them."""
        self._items.shrink(max_bytes)

    def get(self, text: str) -> Shape | None:
        """The shape of ``text`` (None: not comparable), made on its first use."""
        key = (len(text), hash(text))
        hit = self._items.get(key, MISSING)
        if hit is not MISSING and (hit is None or hit.text == text):
            return hit
        made = shape(text)
        self._items.put(key, made)
        return made


# what a text found not comparable costs in the cache (its key): such texts still count
# toward the bound, however many there are
NOT_COMPARABLE_BYTES = 64
# what one distinct line's hash costs a shape (CPython 3.11: a slot of the frozenset and an
# int, ~105 bytes), and the shape itself with its digest
LINE_BYTES = 104
SHAPE_BYTES = 256


def footprint(made: Shape | None) -> int:
    """About the bytes a cached shape holds: its text (one byte a character, ASCII's cost),
    its line hashes and itself; a shape of many short lines holds more in hashes than text."""
    if made is None:
        return NOT_COMPARABLE_BYTES
    return len(made.text) + LINE_BYTES * len(made.hashes) + SHAPE_BYTES


def nearest(new: Shape, candidates: Sequence[Shape]) -> int | None:
    """The index of the candidate most resembling ``new`` (the first of equals: callers
    list the nearest first), None when none shares a line or one equals it."""
    best, best_score = None, 0.0
    for index, candidate in enumerate(candidates):
        if candidate.digest == new.digest:
            return None  # the same content: it has the same stub already
        score = resemblance(new, candidate)
        if score > best_score:
            best, best_score = index, score
    return best


@dataclass(frozen=True)
class Hunk:
    """Old lines ``[old_start, old_end)`` became new lines ``[new_start, new_end)`` (0-based)."""

    old_start: int
    old_end: int
    new_start: int
    new_end: int


def _unique(lines: Sequence[str], lo: int, hi: int) -> dict[str, int]:
    """Lines occurring once in ``lines[lo:hi]``, with their index."""
    seen: dict[str, int] = {}
    repeated: set[str] = set()
    for i in range(lo, hi):
        line = lines[i]
        if line in seen:
            repeated.add(line)
        else:
            seen[line] = i
    for line in repeated:
        del seen[line]
    return seen


def _anchors(old: Sequence[str], new: Sequence[str]) -> list[tuple[int, int]]:
    """Pairs (old index, new index) of lines unique in both, kept in both orders: the
    longest increasing run of new indices taken in old order (patience sorting)."""
    in_old = _unique(old, 0, len(old))
    in_new = _unique(new, 0, len(new))
    pairs = sorted((i, in_new[line]) for line, i in in_old.items() if line in in_new)
    tails: list[int] = []  # tails[k]: the smallest new index ending a run of k + 1
    ends: list[int] = []  # the pair index behind each tail
    back: list[int] = [-1] * len(pairs)
    for p, (_, j) in enumerate(pairs):
        k = bisect_left(tails, j)
        if k == len(tails):
            tails.append(j)
            ends.append(p)
        else:
            tails[k], ends[k] = j, p
        back[p] = ends[k - 1] if k else -1
    chain: list[tuple[int, int]] = []
    p = ends[-1] if ends else -1
    while p >= 0:
        chain.append(pairs[p])
        p = back[p]
    return chain[::-1]


def hunks(old: Sequence[str], new: Sequence[str]) -> list[Hunk]:
    """The changed hunks that turn ``old`` into ``new`` (lines compared exactly)."""
    out: list[Hunk] = []
    i = j = 0
    for ai, aj in [*_anchors(old, new), (len(old), len(new))]:
        # the gap [i, ai) x [j, aj): match its common start and end, the rest changed
        while i < ai and j < aj and old[i] == new[j]:
            i, j = i + 1, j + 1
        ei, ej = ai, aj
        while ei > i and ej > j and old[ei - 1] == new[ej - 1]:
            ei, ej = ei - 1, ej - 1
        if i < ei or j < ej:
            out.append(Hunk(i, ei, j, ej))
        i, j = ai + 1, aj + 1
    return out


def apply(old: Sequence[str], changes: Sequence[Hunk], new: Sequence[str]) -> list[str]:
    """``old`` with ``changes`` applied, the changed lines taken from ``new`` (a check that
    a diff is valid: it gives ``new`` back)."""
    out: list[str] = []
    at = 0
    for h in changes:
        out.extend(old[at : h.old_start])
        out.extend(new[h.new_start : h.new_end])
        at = h.old_end
    out.extend(old[at:])
    return out


@dataclass(frozen=True)
class Delta:
    """How a text differs from an earlier one."""

    hunks: tuple[Hunk, ...]
    shared: float  # share of the new text's characters in unchanged lines
    added: int  # new lines in changed hunks
    removed: int  # old lines in changed hunks


def delta(old: str, new: str) -> Delta | None:
    """How ``new`` differs from ``old`` when it is a near duplicate of it (at least
    :data:`MIN_SHARED` of its characters in unchanged lines); None otherwise, or when
    either is too large to compare."""
    if max(len(old), len(new)) > MAX_CHARS or not new:
        return None
    a, b = split_lines(old), split_lines(new)
    if max(len(a), len(b)) > MAX_LINES:
        return None
    changes = hunks(a, b)
    changed_chars = sum(len(line) for h in changes for line in b[h.new_start : h.new_end])
    shared = 1.0 - changed_chars / len(new)
    if not changes or shared < MIN_SHARED:
        return None
    added = sum(h.new_end - h.new_start for h in changes)
    removed = sum(h.old_end - h.old_start for h in changes)
    return Delta(tuple(changes), shared, added, removed)


def _shown(sign: str, raw: str) -> str:
    """One changed line for a stub: its indentation kept (bounded), the rest one inert
    line (the text is stored content, so untrusted)."""
    content = line_content(raw)
    body = content.lstrip(" \t")
    indent = min(len(content) - len(body), INDENT_CHARS)
    return sign + " " * indent + inline(body, LINE_CHARS, line_break=" ")


def _header(h: Hunk) -> str:
    """Unified-diff numbering: 1-based starts, an empty side named by the line before."""
    old_n, new_n = h.old_end - h.old_start, h.new_end - h.new_start
    old_at = h.old_start + 1 if old_n else h.old_start
    new_at = h.new_start + 1 if new_n else h.new_start
    return f"@@ -{_range(old_at, old_n)} +{_range(new_at, new_n)} @@"


def _range(start: int, n: int) -> str:
    """A hunk side as unified diff writes it: ``16`` for one line, ``16,3`` otherwise."""
    return str(start) if n == 1 else f"{start},{n}"


def render(
    d: Delta, old: str, new: str, limit: int = SHOWN_CHARS, removed: bool = True
) -> list[str]:
    """The changed lines as unified-diff hunks (no context lines), at most ``limit``
    characters of them. When they do not all fit, or without ``removed``, the removed
    lines are left out (each hunk's header still counts them) so the new lines come first;
    the new lines past the limit are counted on a last line. Only the lines shown are
    rendered: the work is bounded by ``limit``, not by the size of the change."""
    a, b = split_lines(old), split_lines(new)
    if removed:
        whole: list[str] = []
        used = 0
        for _, row in _rows(d, a, b, removed=True):
            used += len(row) + 1
            if used > limit:
                break
            whole.append(row)
        else:
            return whole
    rows: list[str] = []
    used = shown = 0
    for changed, row in _rows(d, a, b, removed=False):
        if used + len(row) + 1 > limit and rows:
            left = d.added - shown
            rows.append(f"… {left:,} more new line{'' if left == 1 else 's'}")
            break
        rows.append(row)
        used += len(row) + 1
        shown += changed
    return rows


def _rows(
    d: Delta, a: Sequence[str], b: Sequence[str], removed: bool
) -> Iterator[tuple[bool, str]]:
    """(is a new line, row) of every hunk, made as they are taken: its header, its removed
    lines (when ``removed``), its new lines."""
    for h in d.hunks:
        yield False, _header(h)
        if removed:
            for line in a[h.old_start : h.old_end]:
                yield False, _shown("-", line)
        for line in b[h.new_start : h.new_end]:
            yield True, _shown("+", line)
