"""The dashboard's store browser: ``/api/search`` and ``/api/entry``, through the store's API.

Both look in the served scope (the MCP server's, ``mcp.scope`` or the project ``serve``
started in), as the CLI and the MCP tools do by default; ``all_scopes=1`` asks for every
scope. Read only: opening an entry does not touch it (its salience and last use stay as they
were). The answers carry stored text as JSON strings; the page shows them with
``textContent`` (or escaped, when rendered on the server), never as markup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from offload.errors import InvalidInput, OffloadError, ReferenceError_
from offload.store.models import Filters

if TYPE_CHECKING:
    from offload.store.models import Entry
    from offload.store.store import Store

SEARCH_LIMIT = 20
QUERY_CHARS = 500
REF_CHARS = 300
ENTRY_CHARS = 200_000  # an entry's text beyond this is cut (the CLI reads whole entries)
SNIPPET_CHARS = 300
ALL_SCOPES = "all_scopes=1"  # the query parameter that asks for every scope


def _entry(entry: Entry) -> dict[str, Any]:
    return {
        "id": entry.id,
        "ref": entry.ref,
        "kind": entry.kind,
        "topic": entry.topic,
        "source": entry.source,
        "scope": entry.scope,
        "tokens": entry.tokens,
        "lines": entry.lines,
        "size": entry.size,
        "labels": list(entry.labels),
        "created": entry.created,
        "status": str(entry.status),
        "pinned": entry.pinned,
    }


def search(
    store: Store, query: str, *, scope: str | None, limit: int = SEARCH_LIMIT
) -> dict[str, Any]:
    """The store's ranked hits for ``query`` in ``scope`` (None: every scope), with how many
    entries of other scopes match. Raises InvalidInput for an empty or oversized query."""
    query = query.strip()
    if not query:
        raise InvalidInput("give a search query (?q=...)")
    if len(query) > QUERY_CHARS:
        raise InvalidInput(f"a query is at most {QUERY_CHARS} characters")
    filters = Filters(scope=scope)
    limit = max(1, min(limit, SEARCH_LIMIT))
    hits = store.search(query, filters, limit=limit, snippet_chars=SNIPPET_CHARS)
    return {
        "query": query,
        "scope": scope,
        "all_scopes": scope is None,
        "other_scopes": {"hits": store.hits_elsewhere(query, filters), "shown_by": ALL_SCOPES},
        "hits": [
            {
                **_entry(h.entry),
                "match_line": h.match_line,
                "start_line": h.start_line,
                "end_line": h.end_line,
                "snippet": h.snippet,
                "in_original": h.in_original,  # lines of the original, not the lossy body
            }
            for h in hits
        ],
    }


def entry(store: Store, ref: str, *, scope: str | None) -> dict[str, Any]:
    """One entry of ``scope`` (None: any scope) and its text (the first
    :data:`ENTRY_CHARS` characters). Raises a ReferenceError_ when ``ref`` names no live
    entry of the scope (OtherScope: it lives in another), InvalidInput when malformed."""
    ref = ref.strip()
    if not ref or len(ref) > REF_CHARS:
        raise InvalidInput("give an entry reference (?ref=ctx:sha256:..., an id or a label)")
    found = store.resolve(ref, scope)
    text = store.body(found)
    return {
        "entry": _entry(found),
        "text": text[:ENTRY_CHARS],
        "truncated": len(text) > ENTRY_CHARS,
    }


def status_of(exc: OffloadError) -> int:
    """The HTTP status for a store browser error."""
    if isinstance(exc, ReferenceError_):
        return 404
    if isinstance(exc, InvalidInput):
        return 400
    return 503  # a busy or unhappy store
