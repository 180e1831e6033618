"""The store's lifecycle calls (checkout, checkin, pin, reap, forget, expiry) as methods:
a mixin of :class:`offload.store.store.Store`, each a call of
:mod:`offload.store.life.lifecycle` on the store it is mixed into."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from offload.store.life import lifecycle

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle
    from offload.store.models import Checkout, Entry, Status


class LifecycleCalls:
    """Checkout, pins, reap and forget over the store that mixes this in."""

    def checkout(
        self: StoreHandle, ref: str, *, scope: str | None = None, churn_window_s: float = 120.0
    ) -> Checkout:
        """Mark hot, issue a fresh nonce, return the body; warns on quick re-checkout (churn)."""
        return lifecycle.checkout(self, ref, scope=scope, churn_window_s=churn_window_s)

    def checkin(self: StoreHandle, ref: str, nonce: str, *, scope: str | None = None) -> Entry:
        """Mark cold; requires the nonce of the current checkout. Pins are untouched."""
        return lifecycle.checkin(self, ref, nonce, scope=scope)

    def reset_stale_hot(self: StoreHandle) -> int:
        """Mark cold every entry left hot by a process that no longer runs."""
        return lifecycle.reset_stale_hot(self)

    def pin(self: StoreHandle, ref: str, scope: str | None = None) -> Entry:
        """Salience 1.0 and a pinned flag that survives checkout, checkin, restart and reap."""
        return lifecycle.set_pin(self, ref, True, scope)

    def unpin(self: StoreHandle, ref: str, scope: str | None = None) -> Entry:
        """Clear the pinned flag (salience stays where it is)."""
        return lifecycle.set_pin(self, ref, False, scope)

    def reap(
        self: StoreHandle,
        *,
        older_than_s: float | None = None,
        max_salience: float | None = None,
        status: Status | None = "cold",
        scope: str | None = None,
        dry_run: bool = False,
    ) -> list[Entry]:
        """Forget unpinned entries idle longer than ``older_than_s`` and at most ``max_salience``.

        One of the two is required: a reap without a filter would forget every unpinned
        entry at once. A negative, non-finite or out-of-range filter is refused."""
        lifecycle.check_reap_filters(older_than_s, max_salience)
        return lifecycle.reap(
            self,
            older_than_s=older_than_s,
            max_salience=max_salience,
            status=status,
            scope=scope,
            dry_run=dry_run,
        )

    def forget(
        self: StoreHandle, ref: str, *, reason: str = "forgotten", scope: str | None = None
    ) -> Entry:
        """Remove an entry (and its block once unreferenced), leaving a tombstone."""
        return lifecycle.forget(self, ref, reason=reason, scope=scope)

    def forget_where(
        self: StoreHandle,
        *,
        source: str,
        scope: str,
        keep: Iterable[int] = (),
        reason: str = "replaced",
    ) -> int:
        """Forget every entry of ``source`` in ``scope`` except ``keep`` (re-sectioning)."""
        return lifecycle.forget_where(self, source=source, scope=scope, keep=keep, reason=reason)

    def expire_due(self: StoreHandle) -> int:
        """Archive every entry whose expiry has passed (tombstoned with the reason)."""
        return lifecycle.expire_due(self)
