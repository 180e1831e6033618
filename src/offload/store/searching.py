"""The store's search calls (search, explain, a page of hits, hits in other scopes) as
methods: a mixin of :class:`offload.store.store.Store`, each a call of
:mod:`offload.store.search.pipeline` on the store it is mixed into, counted as a search
by the store's idle clock (the in-memory copies are let go only while none runs)."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, cast

from offload.store.models import NO_FILTERS, Filters, Hit
from offload.store.search.explain import Explanation
from offload.store.search.memory.idle import SearchIdle
from offload.store.search.pipeline import HitPage, PageAsked, hit_page, search_hits

if TYPE_CHECKING:
    from offload.store.handle import StoreHandle


class SearchCalls:
    """Search over the store that mixes this in."""

    search_idle: SearchIdle  # when searches last ran (set by the store)

    def search(
        self,
        query: str,
        filters: Filters = NO_FILTERS,
        *,
        limit: int = 5,
        offset: int = 0,
        snippet_chars: int = 300,
        scope: str | None = None,
        as_of: float | None = None,
    ) -> list[Hit]:
        """Ranked hits for a question or keywords, with line ranges and snippets.

        Any input is safe (FTS syntax is just text); ``scope`` is a shorthand for
        ``Filters(scope=...)`` (it wins over the filters' own scope). A date the query
        names (``in May 2023``, ``last week``, ``two weeks before 11 August``) is a soft
        preference: entries whose event time is near it rank higher; relative dates count
        from ``as_of`` (epoch seconds), or from the newest event time searched.
        """
        return self.search_page(
            query,
            filters,
            limit=limit,
            offset=offset,
            snippet_chars=snippet_chars,
            scope=scope,
            as_of=as_of,
        ).hits

    def explain(
        self,
        query: str,
        filters: Filters = NO_FILTERS,
        *,
        limit: int = 5,
        offset: int = 0,
        snippet_chars: int = 300,
        scope: str | None = None,
        as_of: float | None = None,
    ) -> list[tuple[Hit, Explanation]]:
        """:meth:`search`'s hits, each with why it ranks where it does: which path scored
        it and what each part contributed (store/search/explain.py). The hits and their
        order are :meth:`search`'s."""
        found = self.search_page(
            query,
            filters,
            limit=limit,
            offset=offset,
            snippet_chars=snippet_chars,
            scope=scope,
            as_of=as_of,
            explain=True,
        )
        return list(zip(found.hits, found.why, strict=True))

    def search_page(
        self,
        query: str,
        filters: Filters = NO_FILTERS,
        *,
        limit: int = 5,
        offset: int = 0,
        snippet_chars: int = 300,
        scope: str | None = None,
        as_of: float | None = None,
        explain: bool = False,
    ) -> HitPage:
        """:meth:`search`'s hits as a page that says how many hits the search holds
        (``total``; ``every``: all of them, else at least that many) and how many follow
        it (``after``); with ``explain``, :meth:`explain`'s reasons (``why``)."""
        page = PageAsked(limit, offset, snippet_chars, as_of)
        with self.search_idle.searching():
            return hit_page(
                cast("StoreHandle", self), query, scoped(filters, scope), page, explain=explain
            )

    def hits_elsewhere(self, query: str, filters: Filters, *, limit: int = 100) -> int:
        """How many entries of scopes other than ``filters.scope`` match ``query`` (the
        same filters otherwise), counted over at most ``limit`` hits of every scope."""
        if filters.scope is None:
            return 0
        every = dataclasses.replace(filters, scope=None)
        with self.search_idle.searching():
            hits = search_hits(cast("StoreHandle", self), query, every, PageAsked(limit, 0, 40))
        return len({h.entry.id for h in hits if h.entry.scope != filters.scope})


def scoped(filters: Filters, scope: str | None) -> Filters:
    """``filters`` with ``scope`` in place of their own (a search's shorthand), if given."""
    return filters if scope is None else dataclasses.replace(filters, scope=scope)
