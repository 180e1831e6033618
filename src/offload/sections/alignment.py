"""Cache alignment: which sections of a prompt keep the provider's prompt cache warm.

A provider (or llama.cpp) reuses the longest prefix a prompt shares with the previous
one. Given the sections of successive turns, :func:`align` reports per section of the
last turn its tokens, whether it changed since the turn before, and whether it ends inside
the stable prefix (every section up to and including it identical and in the same place).
It suggests an order (sections that have not changed first, the least volatile earliest)
and a compact point: the boundary after the last stable section in that order, where a
cache breakpoint belongs and before which nothing should be compressed or compacted
(changing anything there invalidates the cache for all that follows).

:func:`align_prompts` takes whole prompt strings and splits them at markdown headings;
:func:`format_report` renders a report as markdown, like a ``/context`` command.

:func:`cache_key` names a stable prompt: the same sections (names and texts, in order) give
the same key in every process, and a section after the stable ones changes nothing. Pass
it as OpenAI's ``prompt_cache_key`` (at most 64 characters; this is 48) so requests that
share the prefix are routed to the same cache; a report's :attr:`AlignmentReport.cache_key`
is the key of its stable sections in the suggested order. Pure.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from offload.core.hashing import text_hash
from offload.core.text.markdown import split_sections
from offload.core.tokens import TokenCounter, default_counter
from offload.errors import InvalidInput

__all__ = [
    "AlignmentReport",
    "SectionStat",
    "align",
    "align_history",
    "align_prompts",
    "cache_key",
    "format_report",
    "split_prompt",
]

Status = Literal["new", "changed", "unchanged"]
SectionsInput = Mapping[str, str] | Sequence[tuple[str, str]]
KEY_PREFIX = "offload-"
_KEY_HEX = 40


class Named(Protocol):
    """A section as built (``offload.sections.BuiltSection``): a name and its prompt text."""

    @property
    def name(self) -> str: ...

    @property
    def text(self) -> str: ...


def cache_key(
    sections: Iterable[Named] | Iterable[tuple[str, str]], through: str | None = None
) -> str:
    """A stable key for a prompt's sections: ``offload-`` and 40 hex digits of the sha256
    of each section's name and text (length-prefixed, so no two section lists collide by
    concatenation), in order, up to and including the section named ``through`` (all of
    them when None). The same sections give the same key anywhere; what follows
    ``through`` does not change it."""
    digest = hashlib.sha256()
    found = through is None
    for item in sections:
        name, text = item if isinstance(item, tuple) else (item.name, item.text)
        for part in (name, text):
            data = part.encode("utf-8", "surrogatepass")
            digest.update(len(data).to_bytes(8, "big") + data)
        if name == through:
            found = True
            break
    if not found:
        raise InvalidInput(f"cache_key: no section named {through!r}")
    return KEY_PREFIX + digest.hexdigest()[:_KEY_HEX]


@dataclass(frozen=True)
class SectionStat:
    """One section of the last turn.

    ``start``/``end`` are token offsets in the prompt (sections laid end to end);
    ``cached`` says it ends inside the stable prefix; ``changes`` counts the observed turn
    transitions in which it changed or appeared (of ``AlignmentReport.turns - 1``).
    """

    name: str
    tokens: int
    start: int
    end: int
    status: Status
    cached: bool
    changes: int


@dataclass(frozen=True)
class AlignmentReport:
    """What :func:`align` found and suggests."""

    sections: tuple[SectionStat, ...]
    removed: tuple[str, ...]
    turns: int
    total_tokens: int
    cached_tokens: int
    suggested_order: tuple[str, ...]
    suggested_cached_tokens: int
    compact_after: str | None  # the last stable section in the suggested order
    compact_at: int  # token offset of the compact point in the suggested order
    #: :func:`cache_key` of the stable sections in the suggested order (None: none stable)
    cache_key: str | None = None

    @property
    def cached_share(self) -> float:
        """The stable prefix as a share of the prompt (0 for an empty prompt)."""
        return self.cached_tokens / self.total_tokens if self.total_tokens else 0.0


def _pairs(turn: SectionsInput) -> list[tuple[str, str]]:
    pairs = list(turn.items()) if isinstance(turn, Mapping) else [tuple(p) for p in turn]
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        dupes = sorted({n for n in names if names.count(n) > 1})
        raise InvalidInput(f"section names must be unique in a turn; repeated: {dupes}")
    for name, text in pairs:
        if not isinstance(name, str) or not isinstance(text, str):
            raise InvalidInput("a section is a (name, text) pair of strings")
    return [(str(n), str(t)) for n, t in pairs]


def align(turns: Sequence[SectionsInput], counter: TokenCounter | None = None) -> AlignmentReport:
    """Analyse the last of ``turns`` (each: section name -> text, in prompt order).

    With one turn nothing is known about change: every section is ``new`` and nothing is
    cached. Give ``[previous, current]`` to compare a section set with its last version.
    """
    if not turns:
        raise InvalidInput("align needs at least one turn")
    history = [[(name, text_hash(text)) for name, text in _pairs(t)] for t in turns[:-1]]
    return align_history(history, turns[-1], counter)


def align_history(
    history: Sequence[Sequence[tuple[str, str]]],
    current: SectionsInput,
    counter: TokenCounter | None = None,
) -> AlignmentReport:
    """:func:`align` with the earlier turns given as (name, sha256 hex of the text) pairs
    (as :func:`offload.core.hashing.text_hash` computes them), so no old text is kept."""
    counter = counter or default_counter()
    pairs = _pairs(current)
    now = [(name, text_hash(text)) for name, text in pairs]
    hashed = [[(str(n), str(h)) for n, h in turn] for turn in history] + [now]
    before = dict(hashed[-2]) if len(hashed) > 1 else {}

    changes: dict[str, int] = {name: 0 for name, _ in now}
    for prev, cur in itertools.pairwise(hashed):
        prev_map = dict(prev)
        for name, digest in cur:
            if name in changes and prev_map.get(name) != digest:
                changes[name] += 1

    # The stable prefix: sections identical and in the same place as last turn.
    stable = 0
    if len(hashed) > 1:
        for a, b in zip(hashed[-2], now, strict=False):
            if a != b:
                break
            stable += 1

    stats: list[SectionStat] = []
    offset = 0
    for index, ((name, text), (_, digest)) in enumerate(zip(pairs, now, strict=True)):
        tokens = counter.count(text)
        status: Status = (
            "new" if name not in before else "unchanged" if before[name] == digest else "changed"
        )
        stats.append(
            SectionStat(
                name, tokens, offset, offset + tokens, status, index < stable, changes[name]
            )
        )
        offset += tokens
    removed = tuple(name for name, _ in hashed[-2] if name not in changes) if before else ()

    position = {s.name: i for i, s in enumerate(stats)}
    ordered = sorted(stats, key=lambda s: (s.status != "unchanged", s.changes, position[s.name]))
    suggested_cached = 0
    compact_after: str | None = None
    for s in ordered:
        if s.status != "unchanged":
            break
        suggested_cached += s.tokens
        compact_after = s.name
    texts = dict(pairs)
    stable_pairs = [(s.name, texts[s.name]) for s in ordered]
    key = cache_key(stable_pairs, compact_after) if compact_after is not None else None
    return AlignmentReport(
        sections=tuple(stats),
        removed=removed,
        turns=len(hashed),
        total_tokens=offset,
        cached_tokens=sum(s.tokens for s in stats if s.cached),
        suggested_order=tuple(s.name for s in ordered),
        suggested_cached_tokens=suggested_cached,
        compact_after=compact_after,
        compact_at=suggested_cached,
        cache_key=key,
    )


def split_prompt(prompt: str, level: int = 2) -> list[tuple[str, str]]:
    """A prompt's sections at its markdown headings (repeated titles get `` (2)``, …)."""
    seen: dict[str, int] = {}
    out: list[tuple[str, str]] = []
    for section in split_sections(prompt, level=level):
        seen[section.title] = seen.get(section.title, 0) + 1
        n = seen[section.title]
        out.append((section.title if n == 1 else f"{section.title} ({n})", section.text))
    return out


def align_prompts(
    prompts: Sequence[str], level: int = 2, counter: TokenCounter | None = None
) -> AlignmentReport:
    """:func:`align` over whole prompts, split at headings of level ``level`` or higher."""
    return align([split_prompt(p, level) for p in prompts], counter)


def _cell(name: str) -> str:
    return name.replace("|", "\\|").replace("\n", " ")


def _pct(part: int, whole: int) -> str:
    return f"{100.0 * part / whole:.1f}%" if whole else "0.0%"


def format_report(report: AlignmentReport) -> str:
    """The report as markdown: a summary, a table of sections, the suggestions."""
    total = report.total_tokens
    n = len(report.sections)
    rows = [
        f"## Context: {n} section{'s' if n != 1 else ''}, {total:,} tokens (turn {report.turns})",
        "",
    ]
    if report.turns < 2:
        rows.append("First turn seen: no previous version to compare with, nothing cached yet.")
    else:
        rows.append(
            f"Cached prefix: {report.cached_tokens:,} tokens ({_pct(report.cached_tokens, total)})"
            " — the sections marked yes are identical and in place since the last turn."
        )
    rows += [
        "",
        "| # | section | tokens | share | since last turn | in cached prefix |",
        "|--:|---|--:|--:|---|---|",
    ]
    transitions = report.turns - 1
    for i, s in enumerate(report.sections, 1):
        status: str = s.status
        if transitions > 1 and s.status != "new":
            status += f" (changed in {s.changes} of {transitions} turns)"
        rows.append(
            f"| {i} | {_cell(s.name)} | {s.tokens:,} | {_pct(s.tokens, total)} | {status} | "
            f"{'yes' if s.cached else 'no'} |"
        )
    rows.append("")
    if report.removed:
        rows.append("Removed since the last turn: " + ", ".join(report.removed))
        rows.append("")
    if report.turns >= 2:
        current = tuple(s.name for s in report.sections)
        gain = report.suggested_cached_tokens - report.cached_tokens
        if report.suggested_order != current and gain > 0:
            rows.append(
                "Suggested order (stable sections first): "
                + " → ".join(report.suggested_order)
                + f" — cached prefix {report.suggested_cached_tokens:,} tokens "
                f"({_pct(report.suggested_cached_tokens, total)}), +{gain:,}."
            )
        else:
            rows.append("Order: already stable sections first.")
        if report.compact_after is not None:
            rows.append(
                f'Compact point: after "{report.compact_after}" ({report.compact_at:,} tokens). '
                "Put the cache breakpoint there; compress or compact only what follows it, "
                "since changing anything before it re-bills everything after. "
                f"Cache key of the sections before it: {report.cache_key}."
            )
        else:
            rows.append("Compact point: none — every section changed since the last turn.")
    return "\n".join(rows).rstrip() + "\n"
