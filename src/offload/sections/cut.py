"""A reversible hard cut: the head of a text that fits, plus a marker naming the rest.

Where agent CLIs cut instruction files at N characters and drop the tail, :func:`plan_cut`
keeps the same head (snapped back to a line end when one is near) and appends one marker
line with the reference of the whole original and the line to continue from, so the cut
part stays one tool call away. Pure: the caller stores the original (see
:meth:`offload.sections.Sections.cut`). The kept part and the marker together stay within
the limit unless the limit cannot hold the marker itself.
"""

from __future__ import annotations

from dataclasses import dataclass

from offload.core.text.lines import line_count
from offload.core.tokens import TokenCounter
from offload.sections.compress import Budget

__all__ = ["CutResult", "cut_marker", "plan_cut"]

_SNAP_RATIO = 0.5  # snap to a line end only if it keeps at least half of the room


@dataclass(frozen=True)
class CutResult:
    """What a cut produced.

    ``text`` is what goes into the prompt: the original when it fit, else ``kept``, a
    newline and the marker. ``next_line`` (1-based) is where the cut part starts, ``0``
    when nothing was cut; ``reference`` names the whole original.
    """

    text: str
    kept: str
    reference: str | None
    rest_chars: int
    rest_tokens: int
    next_line: int
    expires: float | None = None

    @property
    def was_cut(self) -> bool:
        """True when part of the text was cut off."""
        return self.reference is not None


def cut_marker(reference: str, tool: str, rest_chars: int, rest_tokens: int, line: int) -> str:
    """``[… cut: 1,234 more characters (~300 tokens) from line 41; read them:
    RetrieveContext(reference="ctx:sha256:…", start_line=41)]``."""
    return (
        f"[… cut: {rest_chars:,} more characters (~{rest_tokens:,} tokens) from line {line:,}; "
        f'read them: {tool}(reference="{reference}", start_line={line})]'
    )


def _prefix_within(text: str, budget: Budget, counter: TokenCounter) -> int:
    """The longest prefix length (in characters) that fits ``budget``."""
    hi = len(text) if budget.max_chars is None else min(len(text), budget.max_chars)
    if budget.max_tokens is None or counter.count(text[:hi]) <= budget.max_tokens:
        return hi
    lo = 0
    while lo < hi:  # token counts of prefixes grow (near-)monotonically with their length
        mid = (lo + hi + 1) // 2
        if counter.count(text[:mid]) <= budget.max_tokens:
            lo = mid
        else:
            hi = mid - 1
    return lo


def plan_cut(
    text: str, budget: Budget, reference: str, tool: str, counter: TokenCounter
) -> CutResult:
    """Cut ``text`` to ``budget`` (marker included); ``text`` unchanged when it fits."""
    if budget.fits(text, counter):
        return CutResult(text, text, None, 0, 0, 0)
    # Size the marker with the largest numbers it could show, so the real one fits too.
    worst = cut_marker(reference, tool, len(text), counter.count(text), line_count(text))
    room = budget.shrink(counter.count("\n" + worst), len(worst) + 1)
    end = 0 if room is None else _prefix_within(text, room, counter)
    newline = text.rfind("\n", 0, end)
    if newline >= 0 and newline + 1 >= end * _SNAP_RATIO:
        end = newline + 1
    kept = text[:end]
    rest = text[end:]
    next_line = kept.count("\n") + 1
    marker = cut_marker(reference, tool, len(rest), counter.count(rest), next_line)
    body = kept[:-1] if kept.endswith("\n") else kept
    shown = f"{body}\n{marker}" if body else marker
    return CutResult(shown, kept, reference, len(rest), counter.count(rest), next_line)
