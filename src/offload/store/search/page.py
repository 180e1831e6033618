"""Step 4 of a search: the page shown, with rows, chunk text and snippets (the
best-matching lines, numbered); only the page's chunks are decompressed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from offload.core.text import analysis
from offload.store.backend import Sql
from offload.store.models import Entry, Hit
from offload.store.search.shown import ShownChunks
from offload.store.search.state import Candidate

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store

_SNIPPET_LINES = 3


def hits(
    store: Store,
    page: list[Candidate],
    terms: set[str],
    width: int,
    shown: ShownChunks | None = None,
) -> list[Hit]:
    """Rows, text and snippets for the candidates shown (only these are decompressed;
    ``shown``: the chunks the search read already)."""
    if not page:
        return []
    conn = store.conn
    rows = {
        int(r["id"]): r
        for r in conn.execute(
            Sql(
                "SELECT e.*, b.size AS size, b.lines AS lines FROM entries e "
                "JOIN blocks b ON b.hash = e.block_hash WHERE e.id IN (SELECT value FROM json_each(?))",
                (
                    "SELECT e.*, b.size AS size, b.lines AS lines FROM entries e JOIN blocks b ON "
                    "b.hash = e.block_hash WHERE e.id IN (SELECT value FROM offload_ids(%s))"
                ),
            ),
            (json.dumps([c.entry_id for c in page]),),
        )
    }
    shown = shown or ShownChunks(store)
    with_text = [c for c in page if c.chunk_id is not None or c.direct is False]
    shown.read((c.entry_id, c.chunk_id) for c in with_text)
    out = []
    for c in page:
        r = rows.get(c.entry_id)
        if r is None:
            continue  # forgotten since the ranking
        entry = Entry.from_row(r)
        has_text = c.chunk_id is not None or c.direct is False
        chunk = shown.row(c.entry_id, c.chunk_id) if has_text else None
        text = shown.text(c.entry_id, c.chunk_id) if chunk is not None else None
        if chunk is None or text is None:
            about = " · ".join(x for x in (entry.topic, entry.summary) if x)
            out.append(Hit(entry, None, 1, entry.lines, 1, c.score, about[:width], ""))
            continue
        best = best_lines(text, terms, int(chunk["start_line"]), width)
        line, snip = best[0]
        out.append(
            Hit(
                entry,
                int(chunk["id"]),
                int(chunk["start_line"]),
                int(chunk["end_line"]),
                line,
                c.score,
                snip,
                text,
                tuple(sorted(best)),
                in_original=chunk["block"] != entry.block_hash,
            )
        )
    return out


def best_lines(
    text: str, terms: set[str], first_line: int, width: int, most: int = _SNIPPET_LINES
) -> list[tuple[int, str]]:
    """Up to ``most`` (line number, excerpt) pairs of the lines holding the most distinct
    query terms, best first; the first line with any text when none holds any (a hit
    ranked through its neighbours, or by meaning), so a snippet is never blank. A line
    holding fewer than half the best line's terms is left out (it would be noise beside
    it)."""
    lines = text.splitlines() or [""]
    scored: list[tuple[int, int, int]] = []  # (-terms matched, index, match offset)
    for i, line in enumerate(lines):
        spans = analysis.matching_spans(line, terms)
        if spans:
            matched = len({t for _s, _e, ts in spans for t in ts})
            scored.append((-matched, i, spans[0][0]))
    if not scored:
        i = next((k for k, line in enumerate(lines) if line.strip()), 0)
        return [(first_line + i, _excerpt(lines[i], 0, width))]
    scored.sort()
    top = -scored[0][0]
    kept = [s for s in scored[:most] if -2 * s[0] >= top]
    return [(first_line + i, _excerpt(lines[i], pos, width)) for _n, i, pos in kept]


def _excerpt(line: str, pos: int, width: int) -> str:
    if len(line) > width:
        start = max(0, pos - width // 3)
        line = ("…" if start else "") + line[start : start + width] + "…"
    return line.strip()
