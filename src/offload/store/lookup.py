"""Finding the entries a reference names, and saying why none answers.

:meth:`Store.resolve` composes these: it decides liveness, expiry and ambiguity; this module
only reads rows (one statement per reference form) and tombstones.
"""

from __future__ import annotations

from offload.core.fence import iso
from offload.core.refs import MIN_PREFIX, ParsedRef
from offload.errors import Gone, NotFound
from offload.store.backend import Conn, Row
from offload.store.schema import prefix_bounds
from offload.store.write import rows, tombstones


def entries_named(conn: Conn, parsed: ParsedRef) -> list[tuple[Row, tuple[str, ...]]]:
    """The entries ``parsed`` names (live or not), each with its labels: one statement."""
    if parsed.kind == "id":
        return rows.with_labels(conn.execute(rows.labelled("WHERE e.id = ?"), (parsed.entry_id,)))
    if parsed.kind == "hash":
        return rows.with_labels(
            conn.execute(
                rows.labelled(
                    "WHERE e.content_hash = unhex(?) "
                    "OR (e.block_hash = unhex(?) AND e.block_hash != e.content_hash)",
                    "WHERE e.content_hash = %s OR e.block_hash = %s",
                ),
                (parsed.value, parsed.value),
            )
        )
    if parsed.kind == "prefix":
        lo, hi = prefix_bounds(parsed.value)
        found = rows.with_labels(
            conn.execute(
                rows.labelled(
                    "WHERE (e.content_hash BETWEEN unhex(?) AND unhex(?)) "
                    "OR (e.block_hash BETWEEN unhex(?) AND unhex(?) "
                    "AND e.block_hash != e.content_hash)",
                    "WHERE (e.content_hash BETWEEN %s AND %s) OR (e.block_hash BETWEEN %s AND %s)",
                ),
                (lo, hi, lo, hi),
            )
        )
        if found or parsed.raw.lower().startswith("ctx:"):
            return found
    return rows.with_labels(
        conn.execute(
            rows.labelled("JOIN labels l ON l.entry_id = e.id WHERE l.label = ?"),
            (parsed.raw,),
        )
    )


def why_missing(conn: Conn, parsed: ParsedRef, scope: str | None = None) -> Exception:
    """The error for a reference nothing live answers: Gone with its tombstone, or NotFound.
    Asked within ``scope``, another scope's tombstone is not told (its reason, its time)."""
    tomb = tombstones.lookup(conn, parsed)
    if tomb is not None and (scope is None or tomb.scope == scope):
        return Gone(parsed.raw, tomb.reason, iso(tomb.gone), tomb.regenerate)
    # how to list the entries is the surface's to say (NotFound.with_hint): the store
    # does not know which commands or tools its caller has
    hint = ""
    if parsed.kind == "prefix" and len(parsed.value) < MIN_PREFIX:
        hint = f"give at least {MIN_PREFIX} hex characters"
    return NotFound(parsed.raw, hint)
