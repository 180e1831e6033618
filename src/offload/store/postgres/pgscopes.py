"""Holding a PostgreSQL role to its scopes in the database itself: row-level security.

``offload store restrict ROLE --scope S`` (run as the schema's owner) installs, once and
idempotently, a grants table, a few functions and policies, then records which scopes
``ROLE`` may touch. A role with grants sees, changes and deletes only its scopes' rows, even
through raw SQL; a role without any grant is not restricted (so restricting one team does
not lock out the others), and the owner is never restricted (PostgreSQL exempts a table's
owner from its policies unless forced).

What each policy keys on:

- ``entries``, ``tombstones``, ``scope_stats``: the row's ``scope``.
- ``labels``, ``entry_vectors``, ``search_meta`` (an entry's topic, summary, labels):
  their entry being visible; ``tombstone_labels``: their tombstone being visible.
- ``blocks`` (the bodies): read or changed only when a visible entry refers to them (or
  none does: a block about to be dropped); a row being inserted (its id not taken yet)
  passes too, since PostgreSQL checks an ``INSERT … ON CONFLICT … RETURNING`` row against
  the read policy before it finds the conflict; inserted freely (content-addressed: storing
  another team's content again reveals nothing it did not send); deleted only when no
  entry of any scope refers to them, so a restricted role never drops a block another
  scope still uses.

Not filtered: the search index's per-chunk term vectors and counts (``chunks``,
``search_body``, ``terms``): they hold analysed words, no text and no entry, so a
restricted role can learn that a word occurs somewhere in the store, not where or in what.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from offload.core.untrusted import inline
from offload.errors import InvalidInput, OffloadError, RowRefused
from offload.store.backend import Conn, Sql

GRANTS = "offload_scope_grants"

# the functions the policies call: each reads the grants as the schema's owner (SECURITY
# DEFINER), so a restricted role needs no privilege on the grants table and cannot change
# it; a policy calls them in a sub-select, evaluated once per statement, not once per row
_FUNCTIONS = f"""
CREATE TABLE IF NOT EXISTS {GRANTS} (
    role name NOT NULL,
    scope text COLLATE "C" NOT NULL,
    PRIMARY KEY (role, scope)
);
REVOKE ALL ON {GRANTS} FROM PUBLIC;
CREATE OR REPLACE FUNCTION offload_restricted(who name) RETURNS boolean
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT EXISTS (SELECT 1 FROM {GRANTS} WHERE role = who) $$;
CREATE OR REPLACE FUNCTION offload_scopes_of(who name) RETURNS SETOF text
    LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT scope FROM {GRANTS} WHERE role = who $$;
CREATE OR REPLACE FUNCTION offload_block_unused(digest text) RETURNS boolean
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT NOT EXISTS (SELECT 1 FROM entries WHERE block_hash = digest)
              AND NOT EXISTS (SELECT 1 FROM entries WHERE content_hash = digest) $$;
CREATE OR REPLACE FUNCTION offload_block_id_free(block_id bigint) RETURNS boolean
    LANGUAGE sql VOLATILE SECURITY DEFINER SET search_path FROM CURRENT
    AS $$ SELECT NOT EXISTS (SELECT 1 FROM blocks WHERE id = block_id) $$;
"""

_FREE = "(SELECT NOT offload_restricted(current_user))"
_IN_SCOPE = f"({_FREE} OR scope IN (SELECT offload_scopes_of(current_user)))"
_ENTRY_SEEN = "EXISTS (SELECT 1 FROM entries e WHERE e.id = {column})"
_BLOCK_SEEN = (
    f"({_FREE} OR EXISTS (SELECT 1 FROM entries e WHERE e.block_hash = blocks.hash) "
    "OR EXISTS (SELECT 1 FROM entries e WHERE e.content_hash = blocks.hash) "
    "OR offload_block_unused(blocks.hash) OR offload_block_id_free(blocks.id))"
)

# (table, command, USING, WITH CHECK): one policy each, named offload_<table>_<command>
_POLICIES: tuple[tuple[str, str, str | None, str | None], ...] = (
    ("entries", "ALL", _IN_SCOPE, _IN_SCOPE),
    ("tombstones", "ALL", _IN_SCOPE, _IN_SCOPE),
    ("scope_stats", "ALL", _IN_SCOPE, _IN_SCOPE),
    *(
        (table, "ALL", f"({_FREE} OR {_ENTRY_SEEN.format(column=column)})", None)
        for table, column in (
            ("labels", "labels.entry_id"),
            ("entry_vectors", "entry_vectors.entry_id"),
            ("search_meta", "search_meta.rowid"),
        )
    ),
    (
        "tombstone_labels",
        "ALL",
        f"({_FREE} OR EXISTS (SELECT 1 FROM tombstones t "
        "WHERE t.id = tombstone_labels.tombstone_id))",
        None,
    ),
    ("blocks", "SELECT", _BLOCK_SEEN, None),
    ("blocks", "UPDATE", _BLOCK_SEEN, None),
    ("blocks", "INSERT", None, "true"),
    ("blocks", "DELETE", f"({_FREE} OR offload_block_unused(blocks.hash))", None),
)

TABLES: tuple[str, ...] = tuple(dict.fromkeys(t for t, *_ in _POLICIES))


def install(raw: Any) -> None:
    """The grants table, the functions and every policy (again: replaced, not doubled).
    Run as the schema's owner, on a migrated store, inside the caller's transaction."""
    raw.execute(_FUNCTIONS)
    for table, command, using, check in _POLICIES:
        name = f"offload_{table}_{command.lower()}"
        raw.execute(f"DROP POLICY IF EXISTS {name} ON {table}")
        sql = f"CREATE POLICY {name} ON {table} FOR {command}"
        sql += f" USING {using}" if using else ""
        sql += f" WITH CHECK ({check})" if check else ""
        raw.execute(sql)
    for table in TABLES:
        raw.execute(f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY")


def restrict(raw: Any, role: str, scopes: Sequence[str]) -> None:
    """Hold ``role`` to exactly ``scopes`` (its earlier grants are replaced)."""
    wanted = sorted({s for s in scopes})
    if not wanted:
        raise InvalidInput("name at least one scope (--scope NAME) to restrict a role to")
    with raw.transaction():
        _check_role(raw, role)
        install(raw)
        raw.execute(f"DELETE FROM {GRANTS} WHERE role = %s", (role,))
        for scope in wanted:
            raw.execute(f"INSERT INTO {GRANTS} (role, scope) VALUES (%s, %s)", (role, scope))
        # a role the default privileges gave rights on every table must not write its own
        # grants; quote_ident keeps the name a name
        ident = raw.execute("SELECT quote_ident(%s)", (role,)).fetchone()[0]
        raw.execute(f"REVOKE ALL ON {GRANTS} FROM {ident}")


def unrestrict(raw: Any, role: str) -> int:
    """Lift every restriction of ``role``; how many scope grants it had."""
    with raw.transaction():
        install(raw)
        cur = raw.execute(f"DELETE FROM {GRANTS} WHERE role = %s", (role,))
        return int(cur.rowcount)


def grants(raw: Any) -> dict[str, list[str]]:
    """Every restricted role and its scopes (empty: none, or never installed)."""
    row = raw.execute("SELECT to_regclass(%s)", (GRANTS,)).fetchone()
    if row is None or row[0] is None:
        return {}
    out: dict[str, list[str]] = {}
    for role, scope in raw.execute(f"SELECT role, scope FROM {GRANTS} ORDER BY role, scope"):
        out.setdefault(str(role), []).append(str(scope))
    return out


def _check_role(raw: Any, role: str) -> None:
    row = raw.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
    if row is None:
        raise InvalidInput(f"no role named {role!r} on this server; create it first")


# who this connection is and the scopes it is held to (the SECURITY DEFINER function the
# policies call: any role may, and learns only its own scopes)
_HELD = Sql.postgres_only(
    "SELECT current_user, ARRAY(SELECT s FROM offload_scopes_of(current_user) AS s ORDER BY s)"
)


def refusal(conn: Conn, exc: RowRefused, scopes: Sequence[str]) -> RowRefused:
    """``exc`` (a put's row refused by row-level security) said as one line naming the role,
    the scope refused and the scopes the role is held to; ``exc`` itself when they cannot
    be read."""
    try:
        row = conn.execute(_HELD).fetchone()
    except OffloadError:
        return exc
    if row is None:
        return exc
    role, held = str(row[0]), [str(s) for s in row[1] or ()]
    if not held:  # not held to scopes: another policy than offload's refused it
        return exc
    shown = ", ".join(inline(s, 200) for s in held)
    outside = [s for s in dict.fromkeys(scopes) if s not in held]
    if outside:
        what = ", ".join(inline(s, 200) for s in outside)
        text = f"role {role} may not write scope {what} (it is held to: {shown})"
    else:  # in its own scope: a row of another scope is in the way
        why = (
            "the label is another scope's (labels are one namespace across scopes)"
            if exc.table == "labels"
            else f"a row of another scope is in the way (table {exc.table})"
        )
        text = f"role {role} (held to: {shown}) may not write this: {why}"
    return RowRefused(
        f"store at {exc.where}: {text}; nothing was saved", where=exc.where, table=exc.table
    )
