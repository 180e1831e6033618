"""The dashboard's store browser: ``/api/search``, ``/api/entry`` and ``/api/entries``,
through the store's API.

Both look in the served scope (the MCP server's, ``mcp.scope`` or the project ``serve``
started in), as the CLI and the MCP tools do by default; ``all_scopes=1`` asks for every
scope. Read only: opening an entry does not touch it (its salience and last use stay as they
were). The answers carry stored text as JSON strings; the page shows them with
``textContent`` (or escaped, when rendered on the server), never as markup.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from offload.core.text.numbers import whole_number
from offload.errors import InvalidInput, OffloadError, OtherScope, ReferenceError_
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
LIST_LIMIT = 20  # entries a page of the browser shows
MAX_PAGE = 10_000
KIND_CHARS = 100


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


def message_of(exc: OffloadError) -> str:
    """A store browser error's message, saying how these routes reach every scope."""
    if isinstance(exc, OtherScope):
        return str(exc.with_hint("add all_scopes=1 to reach it"))
    return str(exc)


def status_of(exc: OffloadError) -> int:
    """The HTTP status for a store browser error."""
    if isinstance(exc, ReferenceError_):
        return 404
    if isinstance(exc, InvalidInput):
        return 400
    return 503  # a busy or unhappy store


def listing(store: Store, params: Mapping[str, str], *, scope: str | None) -> dict[str, Any]:
    """A page of entries to browse without a query, as ``offload ls`` orders them (pinned
    first, then salience, then most recently used), in ``scope`` (None: every scope, as
    search takes it): ``kind`` narrows to one
    kind, ``pinned=1`` to pinned entries, ``page`` (from 1) pages by :data:`LIST_LIMIT`.
    ``kinds`` counts every kind, for the page's kind links. Raises InvalidInput for a
    malformed parameter."""
    kind = params.get("kind", "").strip()
    if len(kind) > KIND_CHARS:
        raise InvalidInput(f"a kind is at most {KIND_CHARS} characters")
    pinned = params.get("pinned", "").strip()
    if pinned not in ("", "0", "1"):
        raise InvalidInput("pinned is 1 (pinned entries only) or left out")
    page = whole_number(params.get("page", "").strip() or "1")
    if page is None or not 1 <= page <= MAX_PAGE:
        raise InvalidInput(f"page is a whole number from 1 to {MAX_PAGE}")
    filters = Filters(
        scope=scope, kinds=(kind,) if kind else (), pinned=True if pinned == "1" else None
    )
    rows = store.entries(filters, limit=LIST_LIMIT, offset=(page - 1) * LIST_LIMIT)
    peek = store.peek(scope)
    return {
        "scope": scope,
        "all_scopes": scope is None,
        "kind": kind,
        "pinned": pinned == "1",
        "page": page,
        "page_size": LIST_LIMIT,
        "total": store.count(filters),
        "entries": [_entry(e) for e in rows],
        "kinds": {k: v["entries"] for k, v in peek["kinds"].items()},
        "all": peek["entries"],
        "all_pinned": peek["pinned"],
    }
