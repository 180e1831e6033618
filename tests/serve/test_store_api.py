"""The dashboard's store browser over a real SQLite store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from offload.config import load_settings
from offload.errors import InvalidInput
from offload.serve import store_api
from offload.store.store import Store


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    with Store.open(load_settings(env={"OFFLOAD_HOME": str(tmp_path / "home")})) as s:
        yield s


def test_a_listing_pages_entries_pinned_first_and_counts_every_kind(store: Store) -> None:
    for i in range(store_api.LIST_LIMIT + 5):
        store.put(f"log line {i}\n", kind="log")
    store.put("the runbook\n", kind="note", topic="runbook", pinned=True, scope="elsewhere")
    first = store_api.listing(store, {}, scope=None)
    assert first["total"] == store_api.LIST_LIMIT + 6  # every scope, as search shows them
    assert len(first["entries"]) == store_api.LIST_LIMIT
    assert first["entries"][0]["topic"] == "runbook" and first["entries"][0]["pinned"]
    assert first["kinds"] == {"log": store_api.LIST_LIMIT + 5, "note": 1}
    assert (first["all"], first["all_pinned"]) == (store_api.LIST_LIMIT + 6, 1)
    second = store_api.listing(store, {"page": "2"}, scope=None)
    assert len(second["entries"]) == 6 and second["page"] == 2
    refs = {e["ref"] for e in first["entries"]} | {e["ref"] for e in second["entries"]}
    assert len(refs) == store_api.LIST_LIMIT + 6  # the pages do not overlap


def test_a_listing_narrows_to_one_kind_or_to_pinned_entries(store: Store) -> None:
    store.put("a decision\n", kind="decision")
    store.put("a log\n", kind="log")
    store.put("a pinned log\n", kind="log", pinned=True)
    logs = store_api.listing(store, {"kind": "log"}, scope=None)
    assert {e["kind"] for e in logs["entries"]} == {"log"} and logs["total"] == 2
    pinned = store_api.listing(store, {"pinned": "1"}, scope=None)
    assert [e["pinned"] for e in pinned["entries"]] == [True] and pinned["pinned"]
    assert store_api.listing(store, {"kind": "nothing"}, scope=None)["entries"] == []


@pytest.mark.parametrize(
    "params",
    [
        {"page": "0"},
        {"page": "x"},
        {"page": "100001"},
        {"page": "\u00b2"},  # isdigit(), and int() cannot read it
        {"page": "9" * 5000},  # past the digits int() converts
        {"pinned": "yes"},
        {"kind": "k" * 101},
    ],
)
def test_a_listing_refuses_a_malformed_parameter_in_one_line(
    store: Store, params: dict[str, str]
) -> None:
    with pytest.raises(InvalidInput) as err:
        store_api.listing(store, params, scope=None)
    assert "\n" not in str(err.value)
