"""Budgets, the extractive compressed form of a section, and the line that advertises it.

Pure: no clock, no store, no randomness. The same text, budget and token counter give the
same bytes in every process, so a prompt built from these sections keeps provider prompt
caches warm.

The extractive form keeps whole lines of the original, in their original order, chosen by
priority until the budget is used:

1. the first meaningful line (usually a title);
2. structure from :func:`offload.core.text.preview.contents` (markdown headings, code
   definitions, log sections, tracebacks), shallow levels first;
3. key lines: instructions that bind (``must``, ``never``, ``do not`` …), lines that report
   an error, and the last meaningful lines (where logs and ``git status`` say what matters);
4. the first meaningful line under each heading;
5. lines naming the text's most frequent identifiers (:func:`offload.core.text.gist.identifiers`);
6. everything else, top to bottom.

Each run of omitted lines becomes one ``[… lines A-B]`` marker, so a reader knows exactly
what to retrieve. Lines longer than :data:`LINE_CHARS` are clipped. JSON gets the
structural preview of :func:`offload.core.text.preview.preview` instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from offload.core.text.gist import identifiers
from offload.core.text.lines import line_content, split_lines
from offload.core.text.preview import contents, detect_kind, preview
from offload.core.tokens import TokenCounter
from offload.errors import InvalidInput

__all__ = [
    "LINE_CHARS",
    "Budget",
    "advertise",
    "extractive",
    "gap_marker",
]

LINE_CHARS = 240  # a kept line longer than this is clipped (minified code, long paragraphs)
_TOC_ENTRIES = 400

_IMPERATIVE = re.compile(
    r"\b(?:must|never|always|required?|important|do not|don't|avoid|only|warning|note|"
    r"critical|forbidden|prefer)\b",
    re.IGNORECASE,
)
# Only ever searched: ``FooError:`` needs no ``\b[\w.]*`` prefix (it always matches from the
# start of the word), and rescanning that prefix from every boundary was quadratic.
_ERROR = re.compile(
    r"(?:Error|Exception)\b:|\b(?:error|fatal|panic)(?:\[\w+\])?[:!]"
    r"|\b(?:ERROR|FATAL|CRITICAL|FAILED)\b|^\s*(?:modified|deleted|new file|renamed|both)\s*:",
)
_FENCE = re.compile(r" {0,3}(?:`{3,}|~{3,})")


@dataclass(frozen=True)
class Budget:
    """A section's budget: tokens, characters, or both (both must hold)."""

    max_tokens: int | None = None
    max_chars: int | None = None

    def __post_init__(self) -> None:
        if self.max_tokens is None and self.max_chars is None:
            raise InvalidInput("a budget needs max_tokens or max_chars")
        for what, value in (("max_tokens", self.max_tokens), ("max_chars", self.max_chars)):
            if value is not None and (isinstance(value, bool) or value < 1):
                raise InvalidInput(f"{what} must be a positive integer, not {value!r}")

    def fits(self, text: str, counter: TokenCounter) -> bool:
        """Whether ``text`` is within every limit of this budget."""
        if self.max_chars is not None and len(text) > self.max_chars:
            return False
        return self.max_tokens is None or counter.count(text) <= self.max_tokens

    def shrink(self, tokens: int, chars: int) -> Budget | None:
        """This budget minus a fixed cost; None when nothing is left."""
        max_tokens = None if self.max_tokens is None else self.max_tokens - tokens
        max_chars = None if self.max_chars is None else self.max_chars - chars
        if (max_tokens is not None and max_tokens < 1) or (max_chars is not None and max_chars < 1):
            return None
        return Budget(max_tokens, max_chars)


def advertise(name: str, original_tokens: int, tokens: int, reference: str, tool: str) -> str:
    """The line that says a section was compressed and how to get the original back.

    ``Section "Project Instructions" compressed (2,310 → 420 tokens). Original available
    via RetrieveContext(reference="ctx:sha256:…").``
    """
    shown = name.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")
    return (
        f'Section "{shown}" compressed ({original_tokens:,} → {tokens:,} tokens). '
        f'Original available via {tool}(reference="{reference}").'
    )


def gap_marker(first: int, last: int) -> str:
    """The line standing for omitted lines ``first``..``last`` (1-based, inclusive)."""
    return f"[… line {first}]" if first == last else f"[… lines {first}-{last}]"


def _clip(line: str) -> str:
    return line if len(line) <= LINE_CHARS else line[: LINE_CHARS - 1].rstrip() + "…"


def _meaningful(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not _FENCE.match(line) and any(c.isalnum() for c in stripped)


def _priorities(lines: list[str], text: str) -> list[int]:
    """Line indexes (0-based) in the order they should be kept; every line exactly once."""
    order: list[int] = []
    seen: set[int] = set()

    def take(indexes: list[int]) -> None:
        for i in indexes:
            if 0 <= i < len(lines) and i not in seen:
                seen.add(i)
                order.append(i)

    meaningful = [i for i, line in enumerate(lines) if _meaningful(line)]
    take(meaningful[:1])
    toc = contents(text, max_entries=_TOC_ENTRIES)
    take([e.line - 1 for e in sorted(toc, key=lambda e: (e.level, e.line))])
    key = [i for i in meaningful if _IMPERATIVE.search(lines[i]) or _ERROR.search(lines[i])]
    take(key + meaningful[-3:])
    leads: list[int] = []
    for entry in toc:
        after = [i for i in meaningful if i >= entry.line][:1]
        leads.extend(after)
    take(sorted(leads))
    ids = identifiers(text, limit=6)
    if ids:
        take([i for i in meaningful if any(name in lines[i] for name in ids)])
    take(list(range(len(lines))))
    return order


def _render(lines: list[str], keep: list[bool]) -> str:
    """Kept lines in order; a skipped stretch with any text becomes one gap marker, one
    of blank lines only a single blank line (paragraphs stay apart)."""
    out: list[str] = []
    i = 0
    n = len(lines)
    while i < n:
        if keep[i]:
            out.append(_clip(lines[i]))
            i += 1
            continue
        j = i
        while j < n and not keep[j]:
            j += 1
        texty = [k for k in range(i, j) if lines[k].strip()]
        if texty:
            out.append(gap_marker(texty[0] + 1, texty[-1] + 1))
        elif out and out[-1] != "":
            out.append("")
        i = j
    while out and not out[-1].strip():
        out.pop()
    return "\n".join(out)


def extractive(text: str, budget: Budget, counter: TokenCounter) -> str:
    """The extractive compressed form of ``text`` within ``budget`` (see the module doc).

    Returns ``text`` itself when it already fits. Always within the budget; may be empty
    when the budget cannot hold even one marker.
    """
    if budget.fits(text, counter):
        return text
    if detect_kind(text) == "json":
        return _json_form(text, budget, counter)
    lines = [line_content(raw) for raw in split_lines(text)]
    n = len(lines)
    # Blank lines are never chosen: they render as separators, for free.
    order = [i for i in _priorities(lines, text) if lines[i].strip()]
    prev_text = [-1] * n
    next_text = [-1] * n
    last = -1
    for i in range(n):
        prev_text[i] = last
        if lines[i].strip():
            last = i
    last = -1
    for i in range(n - 1, -1, -1):
        next_text[i] = last
        if lines[i].strip():
            last = i
    costs = [counter.count(_clip(line) + "\n") for line in lines]
    char_costs = [len(_clip(line)) + 1 for line in lines]
    marker = gap_marker(n, n) + "\n"
    marker_tokens = counter.count(marker)
    marker_chars = len(marker)
    max_tokens = budget.max_tokens if budget.max_tokens is not None else 1 << 60
    max_chars = budget.max_chars if budget.max_chars is not None else 1 << 60

    keep = [False] * n
    gaps = 1 if order else 0
    used_tokens = marker_tokens * gaps
    used_chars = marker_chars * gaps
    # Greedy by priority on per-line costs (BPE is near-additive across line breaks);
    # a run of skipped text lines costs one marker. The rendered text is checked below.
    for i in order:
        left = prev_text[i] >= 0 and not keep[prev_text[i]]
        right = next_text[i] >= 0 and not keep[next_text[i]]
        delta_gaps = 1 if (left and right) else -1 if not (left or right) else 0
        t = used_tokens + costs[i] + delta_gaps * marker_tokens
        c = used_chars + char_costs[i] + delta_gaps * marker_chars
        if t <= max_tokens and c <= max_chars:
            keep[i] = True
            used_tokens, used_chars = t, c
    rendered = _render(lines, keep)
    kept_order = [i for i in order if keep[i]]
    while not budget.fits(rendered, counter) and kept_order:
        keep[kept_order.pop()] = False  # drop the least important kept line
        rendered = _render(lines, keep)
    if not budget.fits(rendered, counter):
        return ""
    return rendered


def _json_form(text: str, budget: Budget, counter: TokenCounter) -> str:
    size = budget.max_chars or (budget.max_tokens or 1) * 3
    while size >= 16:
        shown = preview(text, max_bytes=size).text
        if budget.fits(shown, counter):
            return shown
        size = size * 3 // 4
    return ""
