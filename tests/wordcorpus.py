"""The small vocabulary and in-memory index helpers the resident-index tests share."""

from __future__ import annotations

from offload.core.text import analysis
from offload.store.search.memory import postings
from offload.store.store import Store

# words of chat-like turns: speaker names, hobbies, places; random draws from them give
# corpora where terms are common, rare, or held by one entry
WORDS = [
    "lake",
    "paint",
    "garden",
    "river",
    "Caroline",
    "Melanie",
    "adoption",
    "painting",
    "camping",
    "support",
    "group",
    "pottery",
    "beach",
    "sunset",
    "museum",
    "violin",
    "school",
    "friends",
    "family",
    "dog",
    "cat",
    "horse",
    "book",
    "said",
]


def built_view(store: Store) -> postings.View:
    """Start the store's in-memory index, wait for its build (an event, not a sleep), and
    return its view brought up to date."""
    idx = store.resident
    assert idx is not None
    idx.start()
    assert idx.built.wait(60)
    view = idx.view(store.conn)
    assert view is not None, idx.report
    return view


def index_term(word: str) -> str:
    """The index term a word is stored as."""
    return analysis.index_text(word).split()[0]
