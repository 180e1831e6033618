"""gateway.toolvectors: tool vectors saved in the store, computed once per text and model."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from numpy.typing import NDArray

from offload.gateway.toolvectors import NAMESPACE, USERS, StoredEncoder, VectorUser, text_key
from offload.store.life.lifecycle import machine
from offload.store.store import Store


class Counting:
    """Deterministic vectors from the text's characters; counts the texts it embeds."""

    def __init__(self, dim: int = 8) -> None:
        self.dim = dim
        self.texts: list[str] = []

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        self.texts += texts
        out = np.ones((len(texts), self.dim), dtype=np.float32)
        for i, text in enumerate(texts):
            for k, ch in enumerate(text):
                out[i, k % self.dim] += ord(ch) % 7
        unit: NDArray[np.float32] = out / np.linalg.norm(out, axis=1, keepdims=True)
        return unit


def test_a_text_is_embedded_once_and_read_back_identical_after_a_reopen(tmp_path: Path) -> None:
    inner = Counting()
    with Store(tmp_path / "offload.db") as store:
        first = StoredEncoder(inner, store, "m1").encode(["create a directory", "ping", "ping"])
    assert inner.texts == ["create a directory", "ping"]
    with Store(tmp_path / "offload.db") as store:
        again = StoredEncoder(inner, store, "m1")
        second = again.encode(["ping", "create a directory", "move a file"])
    assert inner.texts[2:] == ["move a file"] and again.computed == 1
    assert np.array_equal(second[0], first[1]) and np.array_equal(second[1], first[0])
    assert np.array_equal(second[2], Counting().encode(["move a file"])[0])


def test_vectors_of_another_model_are_not_reused(tmp_path: Path) -> None:
    with Store(tmp_path / "offload.db") as store:
        StoredEncoder(Counting(), store, "m1").encode(["ping"])
        other = Counting(dim=4)
        rows = StoredEncoder(other, store, "m2").encode(["ping"])
    assert other.texts == ["ping"] and rows.shape == (1, 4)


def test_a_saved_vector_of_the_wrong_size_is_recomputed(tmp_path: Path) -> None:
    with Store(tmp_path / "offload.db") as store:
        StoredEncoder(Counting(dim=4), store, "m1").encode(["ping"])
        inner = Counting(dim=8)
        rows = StoredEncoder(inner, store, "m1").encode(["ping", "pong"])
        assert store.get_state(f"{NAMESPACE}:m1", text_key("ping")) is not None
    assert rows.shape == (2, 8) and inner.texts == ["pong", "ping"]


@pytest.mark.slow
def test_on_postgresql_a_second_gateway_reads_the_vectors_the_first_saved(pg_database: str) -> None:
    first, second = Counting(), Counting()
    with Store(pg_database) as store:
        saved = StoredEncoder(first, store, "m1").encode(["ping", "create a directory"])
    with Store(pg_database) as store:
        again = StoredEncoder(second, store, "m1").encode(["create a directory", "ping"])
    assert second.texts == [] and np.array_equal(again, saved[::-1])


def _saved(store: Store) -> set[str]:
    return {key for key, _ in store.state_items(f"{NAMESPACE}:m1")}


def test_vectors_of_tools_no_catalog_lists_any_more_are_pruned(tmp_path: Path) -> None:
    with Store(tmp_path / "offload.db") as store:
        StoredEncoder(Counting(), store, "m1", VectorUser(store, "gw-a")).encode(["ping", "pong"])
        later = StoredEncoder(Counting(), store, "m1", VectorUser(store, "gw-a"))
        later.encode(["ping", "move a file"])  # the catalog lost pong
        assert _saved(store) == {text_key("ping"), text_key("move a file")}
        assert later.pruned == 1


def test_a_vector_another_running_gateway_uses_is_never_pruned(tmp_path: Path) -> None:
    """Two gateways on one store (two processes' connections): each prune keeps what the
    other's catalog lists, until that gateway stops."""
    path = tmp_path / "offload.db"
    with Store(path) as one, Store(path) as two:
        user_a, user_b = VectorUser(one, "gw-a"), VectorUser(two, "gw-b")
        StoredEncoder(Counting(), one, "m1", user_a).encode(["ping", "common"])
        other = Counting()
        StoredEncoder(other, two, "m1", user_b).encode(["common", "pong"])
        assert other.texts == ["pong"]  # "common" was read, not embedded again
        StoredEncoder(Counting(), one, "m1", user_a).encode(["ping"])
        assert _saved(one) == {text_key(t) for t in ("ping", "common", "pong")}
        user_b.release()  # the second gateway stops
        StoredEncoder(Counting(), one, "m1", user_a).encode(["ping"])
        assert _saved(one) == {text_key("ping")}


def test_the_record_of_a_gateway_that_died_on_this_machine_no_longer_keeps_its_vectors(
    tmp_path: Path,
) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    pid = int(dead.stdout)
    with Store(tmp_path / "offload.db") as store:
        StoredEncoder(Counting(), store, "m1", VectorUser(store, "gw-a")).encode(["ping"])
        StoredEncoder(Counting(), store, "m1", VectorUser(store, "gw-dead")).encode(["pong"])
        StoredEncoder(Counting(), store, "m1", VectorUser(store, "gw-far")).encode(["far"])
        users = f"{USERS}:m1"
        store.put_state(
            users, "gw-dead", {"keys": [text_key("pong")], "host": machine(), "pid": pid}
        )
        # another machine's gateway: its pid means nothing here, so its record stays
        store.put_state(
            users, "gw-far", {"keys": [text_key("far")], "host": "elsewhere", "pid": pid}
        )
        StoredEncoder(Counting(), store, "m1", VectorUser(store, "gw-a")).encode(["ping"])
        assert _saved(store) == {text_key("ping"), text_key("far")}
        assert {key for key, _ in store.state_items(users)} == {"gw-a", "gw-far"}


def test_an_encoder_without_a_gateway_id_records_and_prunes_nothing(tmp_path: Path) -> None:
    with Store(tmp_path / "offload.db") as store:
        StoredEncoder(Counting(), store, "m1").encode(["ping"])
        StoredEncoder(Counting(), store, "m1").encode(["pong"])
        assert _saved(store) == {text_key("ping"), text_key("pong")}
        assert not list(store.state_items(f"{USERS}:m1"))


def test_a_gateway_that_stopped_records_nothing_more(tmp_path: Path) -> None:
    """An index still being strengthened in a background thread when the gateway stops
    must not leave a record behind that outlives it."""
    with Store(tmp_path / "offload.db") as store:
        user = VectorUser(store, "gw-a")
        StoredEncoder(Counting(), store, "m1", user).encode(["ping"])
        user.release()
        late = StoredEncoder(Counting(), store, "m1", user)
        late.encode(["pong"])
        assert not list(store.state_items(f"{USERS}:m1")) and late.pruned == 0
