"""Facts of the stored format that both backends' statements share.

Below every package of the store (it imports nothing), so the SQLite statements
(search/lexical.py) and PostgreSQL's translation of them (postgres/pgsql.py) read the same
values.
"""

from __future__ import annotations

# bm25 weights of search_meta's columns (topic, summary, tags, labels, source); a body is 1.
META_WEIGHTS = (3.0, 2.0, 2.0, 3.0, 1.0)


def newer_schema(where: str, recorded: set[str], known: list[str]) -> str | None:
    """Why this offload may not open a store whose schema a newer offload migrated, or None.

    An older offload would run its own migrations and then misread what the newer ones
    changed (vectors in another form, term counts in another encoding): searches that fail
    with a traceback, or rank by garbage. ``recorded``: the names in ``_migrations``;
    ``known``: the migrations this offload defines.
    """
    unknown = sorted(recorded.difference(known))
    if not unknown:
        return None
    shown = ", ".join(unknown[:3]) + (f" and {len(unknown) - 3} more" if len(unknown) > 3 else "")
    return (
        f"the store at {where} was upgraded by a newer offload (its schema records {shown}, "
        "which this version does not know): run that newer offload (upgrade this one, and "
        "restart any offload process started before the upgrade); nothing was changed"
    )


# A sha256 (blocks.hash, entries.content_hash, entries.block_hash) is kept by SQLite as its
# 32 bytes, half the 64 hex characters PostgreSQL keeps (its text, C collation), in the rows
# and in the three indexes on them. Every caller sees the hex: a statement's SQLite form
# turns a hex parameter into bytes with ``unhex(?)`` (the connection defines it where
# SQLite lacks it, store/sqlite/db.py), and a hash read from a row goes through
# :func:`hexed`. Tombstones keep their hex: they are few, and outlive the blocks.
def hexed(value: object) -> str:
    """A stored sha256 as the 64 lowercase hex characters callers see, from either backend
    (SQLite's bytes, PostgreSQL's text)."""
    return value.hex() if isinstance(value, bytes) else str(value)


def prefix_bounds(prefix: str) -> tuple[str, str]:
    """The first and last 64-hex-digit hashes starting with ``prefix`` (a hex prefix), for
    ``BETWEEN``: they read the same as hex text and, through ``unhex``, as bytes."""
    prefix = prefix.lower()[:64]
    return prefix.ljust(64, "0"), prefix.ljust(64, "f")


# An entry's block hash is stored by SQLite only where it differs from its content_hash
# (a lossy put's entry): the stored column is ``block_own``, NULL for the others, and
# ``block_hash`` a generated column reading ``coalesce(block_own, content_hash)``
# (migration m_entry_block_hash_lossy_only), so statements read ``block_hash`` as before
# and only an insert names the stored column. PostgreSQL keeps ``block_hash`` itself.
def sqlite_entry_columns(fields: tuple[str, ...]) -> tuple[str, ...]:
    """The stored columns an SQLite insert of ``fields`` (entries' column names) names."""
    return tuple("block_own" if f == "block_hash" else f for f in fields)


def sqlite_entry_values(fields: tuple[str, ...]) -> tuple[str, ...]:
    """The values of an SQLite insert of ``fields`` (given in that order, the hashes as
    hex): numbered parameters, a hash through ``unhex``, the block hash NULL where it is
    the content hash."""
    own = fields.index("content_hash") + 1 if "block_hash" in fields else 0
    values = []
    for number, f in enumerate(fields, 1):
        if f == "block_hash":
            values.append(f"nullif(unhex(?{number}), unhex(?{own}))")
        elif f.endswith("_hash"):
            values.append(f"unhex(?{number})")
        else:
            values.append(f"?{number}")
    return tuple(values)
