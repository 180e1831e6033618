"""An entry's life after ``put``: checkout and checkin, pins, reaping, expiry, forgetting.

Checkin needs the nonce of the latest checkout. Every removal leaves a tombstone (so
references answer why) and drops the entry's blocks once nothing else uses them. Functions
take the store (as a :class:`~offload.store.backend.StoreHandle`), whose methods delegate
here: the public API stays on the store.
"""

from __future__ import annotations

import functools
import math
import os
import secrets
import socket
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from offload.core.fence import new_nonce
from offload.errors import FenceError, InvalidInput
from offload.store.backend import Sql
from offload.store.models import Checkout, Entry, Status
from offload.store.sqlite import db
from offload.store.write import removal, rows

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle as Store


def checkout(store: Store, ref: str, *, scope: str | None, churn_window_s: float) -> Checkout:
    """Mark hot, issue a fresh nonce, return the body; warns on quick re-checkout (churn)."""
    entry = store.resolve(ref, scope)
    body = store.body(entry)
    nonce = new_nonce()
    now = store.clock()
    with db.write_tx(store.conn) as conn:
        row = conn.execute(
            Sql("SELECT checked_in, status FROM entries WHERE id = ?"), (entry.id,)
        ).fetchone()
        conn.execute(
            Sql(
                "UPDATE entries SET status = 'hot', nonce = ?, owner_pid = ?, owner_host = ?, "
                "checked_out = ?, accessed = ?, access_count = access_count + 1 WHERE id = ?"
            ),
            (nonce, os.getpid(), machine(), now, now, entry.id),
        )
        fresh = rows.entry_by_id(conn, entry.id)
    churn = ""
    if row is not None and row["status"] == "hot":
        churn = "it was already checked out; the earlier nonce no longer checks it in"
    elif row is not None and row["checked_in"] and now - row["checked_in"] < churn_window_s:
        churn = (
            f"checked out again {now - row['checked_in']:.0f}s after checkin: "
            "consider keeping it, or read a range instead"
        )
    return Checkout(fresh, body, nonce, churn)


def checkin(store: Store, ref: str, nonce: str, *, scope: str | None) -> Entry:
    """Mark cold; requires the nonce of the current checkout. Pins are untouched."""
    entry = store.resolve(ref, scope)
    done = _checkin(store, entry, nonce)
    if done is None:
        # forgotten or expired since it was resolved: the reference says why (Gone), or
        # names content stored again since, which nobody checked out
        again = store.resolve(ref, scope)
        raise InvalidInput(f"{again.ref} is not checked out; nothing to check in")
    return done


def _checkin(store: Store, entry: Entry, nonce: str) -> Entry | None:
    with db.write_tx(store.conn) as conn:
        row = conn.execute(
            Sql("SELECT status, nonce FROM entries WHERE id = ?"), (entry.id,)
        ).fetchone()
        if row is None:
            return None
        if row["status"] != "hot" or not row["nonce"]:
            raise InvalidInput(f"{entry.ref} is not checked out; nothing to check in")
        # constant-time: a wrong guess tells nothing about how close it came
        if not isinstance(nonce, str) or not secrets.compare_digest(
            row["nonce"].encode(), nonce.strip().encode()
        ):
            raise FenceError(
                f"nonce does not match the checkout of {entry.ref}; "
                "use the nonce from the latest checkout's fence tag"
            )
        conn.execute(
            Sql(
                "UPDATE entries SET status = 'cold', nonce = NULL, owner_pid = NULL, "
                "owner_host = NULL, checked_in = ? WHERE id = ?"
            ),
            (store.clock(), entry.id),
        )
        return rows.entry_by_id(conn, entry.id)


def reset_stale_hot(store: Store) -> int:
    """Mark cold every entry left hot by a process that no longer runs; how many."""
    dead = stale_hot(store)
    if dead:
        with db.write_tx(store.conn) as conn:
            conn.executemany(
                Sql(
                    "UPDATE entries SET status = 'cold', nonce = NULL, owner_pid = NULL, "
                    "owner_host = NULL WHERE id = ? AND status = 'hot'"
                ),
                [(i,) for i in dead],
            )
    return len(dead)


def stale_hot(store: Store) -> list[int]:
    """Entries left hot by a process of this machine that no longer runs. A checkout made
    on another machine sharing the store is that machine's to judge (its pid means nothing
    here)."""
    here = machine()
    rows = store.conn.execute(
        Sql("SELECT id, owner_pid, owner_host FROM entries WHERE status = 'hot'")
    ).fetchall()
    return [
        int(r["id"])
        for r in rows
        if (r["owner_host"] or here) == here and not pid_alive(r["owner_pid"])
    ]


@functools.cache
def machine() -> str:
    """This machine's name, recorded with each checkout (whose process holds it)."""
    return socket.gethostname()


def pid_alive(pid: int | None) -> bool:
    """Whether a process with this id runs (one we may not signal still counts)."""
    if not pid:
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def set_pin(store: Store, ref: str, on: bool, scope: str | None) -> Entry:
    """Pin (salience 1.0 too) or unpin (salience stays) the entry ``ref`` names."""
    entry = store.resolve(ref, scope)
    with db.write_tx(store.conn) as conn:
        if on:
            conn.execute(
                Sql("UPDATE entries SET pinned = 1, salience = 1.0 WHERE id = ?"), (entry.id,)
            )
        else:
            conn.execute(Sql("UPDATE entries SET pinned = 0 WHERE id = ?"), (entry.id,))
        return rows.entry_by_id(conn, entry.id)


def check_reap_filters(older_than_s: float | None, max_salience: float | None) -> None:
    """Refuse a reap without a filter, or with one out of range (nothing is forgotten)."""
    if older_than_s is None and max_salience is None:
        raise InvalidInput(
            "reap needs a filter: older_than_s and/or max_salience (a reap without one "
            "would forget every unpinned entry)"
        )
    if older_than_s is not None and not (math.isfinite(older_than_s) and older_than_s >= 0):
        raise InvalidInput(
            f"reap: older_than_s must be a number of seconds >= 0, got {older_than_s}"
        )
    if max_salience is not None and not (0.0 <= max_salience <= 1.0):
        raise InvalidInput(f"reap: max_salience must be within [0, 1], got {max_salience}")


def reap(
    store: Store,
    *,
    older_than_s: float | None,
    max_salience: float | None,
    status: Status | None,
    scope: str | None,
    dry_run: bool,
) -> list[Entry]:
    """Forget unpinned entries idle longer than ``older_than_s`` and at most ``max_salience``.

    Expired entries are archived first (as "expired", not "reaped"). Returns the victims
    (without their labels), also on a ``dry_run`` that removes nothing.
    """
    now = store.clock()
    expire_due(store)
    sql, params = reap_query(
        now, older_than_s=older_than_s, max_salience=max_salience, status=status, scope=scope
    )
    victims = [Entry.from_row(r) for r in store.conn.execute(sql, params).fetchall()]
    if not dry_run:
        reason = "reaped" + _reap_reason(older_than_s, max_salience, status)
        with db.write_tx(store.conn) as conn:
            for e in victims:
                removal.delete(store, conn, e.id, reason)
    return victims


def reap_query(
    now: float,
    *,
    older_than_s: float | None,
    max_salience: float | None,
    status: str | None,
    scope: str | None,
) -> tuple[Sql, list[Any]]:
    """The SQL and parameters selecting reap's victims (entry rows with size and lines)."""
    conds = ["e.pinned = 0"]
    params: list[Any] = []
    if older_than_s is not None:
        conds.append("e.accessed < ?")
        params.append(now - older_than_s)
    if max_salience is not None:
        conds.append("e.salience <= ?")
        params.append(max_salience)
    if status is not None:
        conds.append("e.status = ?")
        params.append(status)
    if scope is not None:
        conds.append("e.scope = ?")
        params.append(scope)
    sql = Sql(
        "SELECT e.*, b.size AS size, b.lines AS lines FROM entries e "
        f"JOIN blocks b ON b.hash = e.block_hash WHERE {' AND '.join(conds)} ORDER BY e.id"
    )
    return sql, params


def _reap_reason(older: float | None, sal: float | None, status: str | None) -> str:
    parts = []
    if older is not None:
        parts.append(f"idle > {older:g}s")
    if sal is not None:
        parts.append(f"salience <= {sal:g}")
    if status is not None:
        parts.append(f"status {status}")
    return f" ({', '.join(parts)})" if parts else ""


def forget(store: Store, ref: str, *, reason: str, scope: str | None) -> Entry:
    """Remove the entry ``ref`` names, leaving a tombstone with ``reason``; the entry as it was."""
    entry = store.resolve(ref, scope)
    with db.write_tx(store.conn) as conn:
        removal.delete(store, conn, entry.id, reason)
    return entry


def forget_where(store: Store, *, source: str, scope: str, keep: Iterable[int], reason: str) -> int:
    """Forget every entry of ``source`` in ``scope`` except the ids in ``keep``; how many."""
    keep_ids = set(keep)
    with db.write_tx(store.conn) as conn:
        ids = [
            int(r[0])
            for r in conn.execute(
                Sql("SELECT id FROM entries WHERE source = ? AND scope = ?"), (source, scope)
            )
            if int(r[0]) not in keep_ids
        ]
        for i in ids:
            removal.delete(store, conn, i, reason)
    return len(ids)


def expire_due(store: Store) -> int:
    """Archive every entry whose expiry has passed (tombstoned as "expired"); how many."""
    now = store.clock()
    ids = [
        int(r[0])
        for r in store.conn.execute(
            Sql("SELECT id FROM entries WHERE expires IS NOT NULL AND expires <= ?"), (now,)
        )
    ]
    for i in ids:
        expire(store, i)
    return len(ids)


def expire(store: Store, entry_id: int) -> None:
    """Archive one expired entry, in its own transaction."""
    with db.write_tx(store.conn) as conn:
        # re-read inside the transaction: another process may have archived it meanwhile
        row = conn.execute(Sql("SELECT expires FROM entries WHERE id = ?"), (entry_id,)).fetchone()
        if row is not None and row["expires"] is not None:
            removal.delete(store, conn, entry_id, "expired")
