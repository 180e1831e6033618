"""config.SearchSettings: the hybrid-search settings validate where they are built."""

from __future__ import annotations

import pytest

from offload.config import load_settings
from offload.errors import ConfigError


def test_hybrid_search_is_on_by_default_with_the_shipped_model() -> None:
    search = load_settings(env={}).search
    assert search.semantic is True
    assert search.embedding_model == "wordllama-l2_supercat-256"
    assert 0.0 < search.semantic_weight < 0.5  # lexical stays dominant


def test_minilm_can_be_chosen_as_the_stores_model_from_the_environment() -> None:
    env = {"OFFLOAD_SEARCH__EMBEDDING_MODEL": "all-MiniLM-L6-v2-int8"}
    assert load_settings(env=env).search.embedding_model == "all-MiniLM-L6-v2-int8"


def test_semantic_search_can_be_turned_off_from_the_environment() -> None:
    assert load_settings(env={"OFFLOAD_SEARCH__SEMANTIC": "false"}).search.semantic is False


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("OFFLOAD_SEARCH__EMBEDDING_MODEL", "bert-large", "not known"),
        ("OFFLOAD_SEARCH__SEMANTIC_WEIGHT", "1.0", "within"),
        ("OFFLOAD_SEARCH__SEMANTIC_WEIGHT", "-0.1", "within"),
    ],
)
def test_a_bad_search_setting_is_a_clear_error(key: str, value: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(env={key: value})


def test_the_in_memory_index_can_be_turned_off_from_the_environment() -> None:
    assert load_settings(env={"OFFLOAD_SEARCH__RESIDENT_MB": "0"}).search.resident_mb == 0


def test_a_negative_in_memory_index_bound_is_a_clear_error() -> None:
    with pytest.raises(ConfigError, match="resident_mb"):
        load_settings(env={"OFFLOAD_SEARCH__RESIDENT_MB": "-1"})
