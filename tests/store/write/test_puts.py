"""What a put takes: its descriptive fields are bounded, and refused past the bound with the
store unchanged."""

from __future__ import annotations

import pytest

from offload.errors import InvalidInput
from offload.store.store import Store
from offload.store.write.puts import MAX_SUMMARY_CHARS, MAX_TAG_CHARS, MAX_TAGS, MAX_TOPIC_CHARS


def test_a_topic_past_its_bound_is_refused_and_nothing_is_stored(store: Store) -> None:
    with pytest.raises(InvalidInput, match="topic must be at most"):
        store.put("body", topic="x" * (MAX_TOPIC_CHARS + 1))
    assert store.count() == 0


def test_a_summary_past_its_bound_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInput, match="summary must be at most"):
        store.put("body", summary="x" * (MAX_SUMMARY_CHARS + 1))
    assert store.count() == 0


def test_more_tags_than_the_bound_are_refused(store: Store) -> None:
    with pytest.raises(InvalidInput, match=f"at most {MAX_TAGS} tags"):
        store.put("body", tags=[f"t{i}" for i in range(MAX_TAGS + 1)])
    assert store.count() == 0


def test_a_tag_past_its_length_bound_is_refused(store: Store) -> None:
    with pytest.raises(InvalidInput, match="a tag must be at most"):
        store.put("body", tags=["x" * (MAX_TAG_CHARS + 1)])
    assert store.count() == 0


def test_fields_at_their_bounds_are_stored_whole(store: Store) -> None:
    tags = [f"t{i}" for i in range(MAX_TAGS)]
    got = store.put("body", topic="t" * MAX_TOPIC_CHARS, summary="s" * MAX_SUMMARY_CHARS, tags=tags)
    entry = store.resolve(got.entry.full_ref)
    assert (len(entry.topic), len(entry.summary), len(entry.tags)) == (
        MAX_TOPIC_CHARS,
        MAX_SUMMARY_CHARS,
        MAX_TAGS,
    )


def test_repeated_tags_count_once_towards_the_bound(store: Store) -> None:
    got = store.put("body", tags=["a,b"] * (MAX_TAGS * 2))
    assert store.resolve(got.entry.full_ref).tags == ("a", "b")


def test_an_update_past_the_bounds_is_refused_and_the_entry_kept(store: Store) -> None:
    got = store.put("body", topic="kept")
    with pytest.raises(InvalidInput, match="topic must be at most"):
        store.update(got.entry.full_ref, topic="x" * (MAX_TOPIC_CHARS + 1))
    with pytest.raises(InvalidInput, match="at most"):
        store.update(got.entry.full_ref, tags=[f"t{i}" for i in range(MAX_TAGS + 1)])
    assert store.resolve(got.entry.full_ref).topic == "kept"
