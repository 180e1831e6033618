"""llm.embedding: the shipped static embedding model, loaded from its package's files."""

from __future__ import annotations

import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from offload.config import EMBEDDING_MODELS, MINILM_MODEL, SearchSettings
from offload.llm import embedding
from offload.llm.embedding import EmbeddingUnavailable, StaticEmbedder, load_embedder
from offload.llm.packages import Notices, package_dir
from realparts import require


@pytest.fixture(scope="module")
def model() -> StaticEmbedder:
    loaded = load_embedder(SearchSettings())
    assert loaded is not None, "wordllama is a main dependency: it must be installed"
    assert isinstance(loaded, StaticEmbedder)  # the default model
    return loaded


def test_the_shipped_model_encodes_a_batch_into_unit_rows(model: StaticEmbedder) -> None:
    vectors = model.encode(["the build failed on main", "a picnic by the lake"])
    assert model.model_id == "wordllama-l2_supercat-256"
    assert vectors.shape == (2, model.dim) == (2, 256)
    assert vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_related_texts_are_closer_than_unrelated_ones(model: StaticEmbedder) -> None:
    q, near, far = model.encode(
        [
            "when did she adopt a puppy?",
            "We brought home a little dog from the shelter last week",
            "The quarterly tax filing is due on the fifteenth",
        ]
    )
    assert float(q @ near) > float(q @ far)


def test_encoding_is_deterministic_and_independent_of_the_batch(model: StaticEmbedder) -> None:
    alone = model.encode(["deploy the release"])[0]
    batched = model.encode(["something else first", "deploy the release"])[1]
    assert np.array_equal(alone, batched)


def test_a_batch_encodes_to_the_ids_the_tokenizers_full_encoding_gives(
    model: StaticEmbedder,
) -> None:
    # encode reads the ids alone (encode_batch_fast, no offsets): the vectors must be the
    # ones of the full encoding's ids
    texts = [
        "Caroline said, the adoption agency called back ünïcödé Straße",
        "parseHTTPResponse in v1.2.3 \t tab and 😀",
        "",
        "a" * 300,
    ]
    from safetensors.numpy import load_file
    from tokenizers import Tokenizer

    weights, tokenizer = embedding.MODELS[model.model_id]
    home = package_dir(embedding.PACKAGE)
    assert home is not None
    table = load_file(str(home / weights))["embedding.weight"].astype(np.float32)
    tok = Tokenizer.from_file(str(home / tokenizer))
    tok.no_padding()
    tok.no_truncation()
    full = np.zeros((len(texts), table.shape[1]), dtype=np.float32)
    for i, enc in enumerate(tok.encode_batch(texts, add_special_tokens=False)):
        if enc.ids:
            full[i] = table[np.asarray(enc.ids)].mean(axis=0)
    norms = np.linalg.norm(full, axis=1, keepdims=True)
    np.divide(full, norms, out=full, where=norms > 0)
    assert np.array_equal(model.encode(texts), full)


def test_a_text_without_tokens_is_a_zero_row_and_an_empty_batch_is_empty(
    model: StaticEmbedder,
) -> None:
    assert not model.encode([""]).any()
    assert model.encode([]).shape == (0, 256)


def test_a_huge_text_costs_only_its_first_part(model: StaticEmbedder) -> None:
    head = "error: connection refused\n" * 1000
    vec_head, vec_long = model.encode([head[: embedding.MAX_CHARS], head + "zzz " * 100_000])
    assert np.array_equal(vec_head, vec_long)


def test_threads_share_one_load(tmp_path: Path) -> None:
    loaded = load_embedder(SearchSettings())
    assert loaded is not None
    out: list[np.ndarray] = []
    threads = [
        threading.Thread(target=lambda: out.append(loaded.encode(["x y"]))) for _ in range(4)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert len(out) == 4 and all(np.array_equal(o, out[0]) for o in out)


def test_a_model_opened_again_in_the_process_reuses_the_table_read_and_cannot_be_written(
    model: StaticEmbedder,
) -> None:
    again = load_embedder(SearchSettings())
    assert isinstance(again, StaticEmbedder) and again is not model
    first = model.encode(["the build failed"])
    assert np.array_equal(again.encode(["the build failed"]), first)
    table = again._load()[0]
    assert table is model._load()[0]
    with pytest.raises(ValueError):
        table[0, 0] = 1.0


def test_a_model_file_changed_on_disk_is_read_again(tmp_path: Path, model: StaticEmbedder) -> None:
    weights, tokenizer = tmp_path / "w.safetensors", tmp_path / "t.json"
    weights.write_bytes(model._weights.read_bytes())
    tokenizer.write_bytes(model._tokenizer_path.read_bytes())
    one = StaticEmbedder("copy", weights, tokenizer)._load()[0]
    assert StaticEmbedder("copy", weights, tokenizer)._load()[0] is one
    weights.write_bytes(b"not a model")
    with pytest.raises(EmbeddingUnavailable, match="cannot load copy"):
        StaticEmbedder("copy", weights, tokenizer).encode(["hello"])


def test_nothing_is_read_until_the_first_encode(tmp_path: Path) -> None:
    lazy = StaticEmbedder("m", tmp_path / "missing.safetensors", tmp_path / "missing.json")
    with pytest.raises(EmbeddingUnavailable, match="cannot load m"):
        lazy.encode(["hello"])


def test_semantic_off_in_the_settings_gives_no_model() -> None:
    assert load_embedder(SearchSettings(semantic=False)) is None


def test_a_missing_package_gives_no_model_and_one_notice(caplog: pytest.LogCaptureFixture) -> None:
    # a memory of its own: the process's one remembers what earlier tests were told
    missing, memory = ("offload_test_no_such_package",), Notices()
    with caplog.at_level(logging.WARNING, logger="offload.embedding"):
        assert load_embedder(SearchSettings(), required=missing, notices=memory) is None
        assert load_embedder(SearchSettings(), required=missing, notices=memory) is None
    notices = [r.getMessage() for r in caplog.records]
    assert len(notices) == 1
    assert "offload_test_no_such_package" in notices[0] and "lexical" in notices[0]


def test_the_process_says_a_missing_package_once_whoever_asks(
    caplog: pytest.LogCaptureFixture,
) -> None:
    missing = ("offload_test_package_absent_once",)  # named by this test alone
    with caplog.at_level(logging.WARNING, logger="offload.embedding"):
        for _ in range(3):
            assert load_embedder(SearchSettings(), required=missing) is None
    assert sum("offload_test_package_absent_once" in r.getMessage() for r in caplog.records) == 1


def test_every_model_the_settings_accept_can_be_loaded() -> None:
    # the static models from their table here, MiniLM through llm/minilm.py
    assert set(EMBEDDING_MODELS) == set(embedding.MODELS) | {MINILM_MODEL}


def test_choosing_minilm_without_offload_tools_gives_lexical_search_and_one_notice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    settings, memory = SearchSettings(embedding_model=MINILM_MODEL), Notices()
    missing = ("offload_test_no_onnxruntime",)
    with caplog.at_level(logging.WARNING, logger="offload.embedding"):
        assert load_embedder(settings, required=missing, notices=memory) is None
        assert load_embedder(settings, required=missing, notices=memory) is None
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1
    assert "offload_test_no_onnxruntime" in lines[0] and "lexical" in lines[0]
    assert "offload[tools]" in lines[0] and "\n" not in lines[0]


def test_choosing_minilm_loads_it_as_the_stores_model() -> None:
    loaded = load_embedder(SearchSettings(embedding_model=MINILM_MODEL), notices=Notices())
    require(loaded is not None, "offload[tools] is not installed (pip install 'offload[tools]')")
    assert loaded is not None
    assert loaded.model_id == MINILM_MODEL and not loaded.nested
