"""Additive counters as they were saved before store/tallies.py: JSON values of the state table.

Frozen: the migrations (store/sqlite/db.py m_additive_tallies, store/postgres/pgschema.py
pg_additive_tallies) and imports of older archives read these shapes, whatever the surfaces
write today. Imports nothing of the store, so a migration may use it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

Row = tuple[str, str, str, int]  # namespace, key, name, value

LEGACY_NAMESPACES = ("gateway-usage", "proxy.metrics")


def legacy(namespace: str, key: str, text: str) -> tuple[list[Row], str | None] | None:
    """The counters a state value of the old shape held and what stays of the value (its
    JSON text, None when nothing does: the row goes); None for any other value.

    ``gateway-usage``/``calls`` was ``{upstream: calls}``; ``proxy.metrics`` values
    (``totals``, ``session:<id>``) held ``counters`` and ``breaks`` (by cause, counted as
    ``break:<cause>``) beside a session's other fields.
    """
    if namespace not in LEGACY_NAMESPACES:
        return None
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict):
        return None
    counts: dict[str, Any]
    rest: dict[str, Any] | None
    if namespace == "gateway-usage":
        counts, rest = value, None
    else:
        counts = dict(value.get("counters") or {})
        counts.update({f"break:{k}": v for k, v in (value.get("breaks") or {}).items()})
        rest = {k: v for k, v in value.items() if k not in ("counters", "breaks")}
        if key == "totals" or not rest:
            rest = None
    rows = [
        (namespace, key, str(name), int(n))
        for name, n in counts.items()
        if isinstance(n, int) and not isinstance(n, bool) and n
    ]
    kept = None if rest is None else json.dumps(rest, sort_keys=True, ensure_ascii=False)
    return rows, kept


def move_legacy(
    execute: Callable[[str, tuple[Any, ...]], object],
    found: Iterable[tuple[str, str, str]],
    mark: str,
) -> None:
    """Move the old-shape state values ``found`` (namespace, key, JSON text) into tallies,
    keeping in state what else they held: the migrations of both backends, whose
    parameter ``mark`` differs (``?`` on SQLite, ``%s`` on PostgreSQL)."""
    for namespace, key, text in found:
        moved = legacy(namespace, key, text)
        if moved is None:
            continue
        rows, kept = moved
        for row in rows:
            execute(f"INSERT INTO tallies VALUES ({mark}, {mark}, {mark}, {mark})", row)
        where = f"WHERE namespace = {mark} AND key = {mark}"
        if kept is None:
            execute(f"DELETE FROM state {where}", (namespace, key))
        else:
            execute(f"UPDATE state SET value = {mark} {where}", (kept, namespace, key))
