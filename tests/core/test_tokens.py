"""Token counting: exact offline BPE, the fast estimate, calibration, the default choice."""

from __future__ import annotations

import json
import statistics
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.core.tokens import (
    EXTRA_TOKENS,
    MAX_TOKEN_BYTES,
    BpeCounter,
    CalibratedCounter,
    EstimateCounter,
    TokenCounter,
    default_counter,
    estimate_tokens,
    plausible_count,
)
from realparts import TRACES

# Varied real-looking texts with their cl100k counts checked against tiktoken.
SAMPLES = [
    "Hello, world!",
    "def add(a: int, b: int) -> int:\n    return a + b\n",
    '{"name": "get_issue", "inputSchema": {"type": "object", "required": ["owner"]}}',
    "The reservation could not be changed because the flight has already departed.",
    'Traceback (most recent call last):\n  File "x.py", line 1\nValueError: bad\n',
]


@pytest.fixture(scope="module")
def bpe() -> BpeCounter:
    return BpeCounter()


def test_bpe_counts_match_known_cl100k_token_counts(bpe: BpeCounter) -> None:
    assert bpe.count("hello world") == 2
    assert bpe.count("") == 0
    assert bpe.count("Hello, world!") == 4


def test_bpe_counts_special_token_text_as_plain_text(bpe: BpeCounter) -> None:
    # Encoding would raise on this text without disallowed_special=().
    assert bpe.count("<|endoftext|>") > 1


def test_bpe_counts_text_with_a_lone_surrogate(bpe: BpeCounter) -> None:
    assert bpe.count("a\ud800b") >= 2


def test_bpe_loads_its_encoding_only_on_first_use() -> None:
    counter = BpeCounter()
    assert counter._encoding is None
    assert counter.count("hi there") == 2
    assert counter._encoding is not None


def test_bpe_caches_counts_and_evicts_the_least_recently_used() -> None:
    counter = BpeCounter(cache_size=2)
    counter.count("one")
    counter.count("two")
    counter.count("one")  # refresh "one": "two" is now the oldest
    counter.count("three")
    assert counter.cache_len() == 2
    keys = counter._cache.keys()
    assert all(isinstance(k[0], bytes) and len(k[0]) == 32 for k in keys)
    assert [k[1] for k in keys] == [3, 5]  # "one", "three" by byte length


def test_bpe_cache_answers_repeat_texts_without_encoding_again() -> None:
    counter = BpeCounter()
    first = counter.count("some cached text")

    class Exploding:
        def encode(self, *args: object, **kwargs: object) -> list[int]:
            raise AssertionError("should not re-encode a cached text")

    counter._encoding = Exploding()
    assert counter.count("some cached text") == first


def test_a_zero_size_cache_still_counts() -> None:
    counter = BpeCounter(cache_size=0)
    assert counter.count("hello world") == 2
    assert counter.cache_len() == 0


def test_an_unknown_encoding_raises_when_loaded() -> None:
    counter = BpeCounter("no_such_encoding_offload_test")
    with pytest.raises(ValueError):
        counter.load()


def test_every_counter_satisfies_the_protocol() -> None:
    for counter in (BpeCounter(), EstimateCounter(), CalibratedCounter()):
        assert isinstance(counter, TokenCounter)


def test_the_estimate_of_empty_text_is_zero_and_of_any_text_at_least_one() -> None:
    assert estimate_tokens("") == 0
    assert estimate_tokens("a") == 1
    assert estimate_tokens(" ") == 1


def test_the_estimate_never_exceeds_the_utf8_length() -> None:
    for text in ["\n" * 500, "!!!!", "  \n  \n", "é" * 10, "\ud800"]:
        assert estimate_tokens(text) <= len(text.encode("utf-8", "surrogatepass"))


def test_the_estimate_is_within_fifteen_percent_on_ordinary_samples(bpe: BpeCounter) -> None:
    text = "\n".join(SAMPLES * 5)
    true = bpe.count(text)
    assert abs(estimate_tokens(text) - true) / true < 0.15


def test_the_estimate_stays_close_to_bpe_on_real_trace_messages(bpe: BpeCounter) -> None:
    files = sorted(TRACES.glob("*.jsonl"))
    assert len(files) == 2  # the vendored swe-agent and tau-bench traces
    texts: list[str] = []
    for path in files:
        for line in path.read_text(encoding="utf-8").splitlines()[:15]:
            for message in json.loads(line)["messages"]:
                content = message.get("content")
                if isinstance(content, str) and len(content) > 200:
                    texts.append(content)
    errors = [abs(estimate_tokens(t) - bpe.count(t)) / bpe.count(t) for t in texts]
    assert len(errors) > 50
    assert statistics.mean(errors) < 0.10
    assert statistics.median(errors) < 0.08


def test_the_estimate_beats_bytes_over_four_on_json(bpe: BpeCounter) -> None:
    text = json.dumps({"tools": [{"name": f"tool_{i}", "n": i * 1234} for i in range(200)]})
    true = bpe.count(text)
    naive = len(text.encode()) / 4
    assert abs(estimate_tokens(text) - true) < abs(naive - true)


def test_calibration_starts_neutral_and_learns_the_observed_ratio() -> None:
    counter = CalibratedCounter(lambda text: 100)
    assert counter.count("x") == 100
    counter.observe(100, 130)
    assert counter.ratio == pytest.approx(1.3)
    assert counter.count("x") == 130


def test_calibration_moves_as_an_exponential_moving_average() -> None:
    counter = CalibratedCounter(lambda text: 100, alpha=0.5)
    counter.observe(100, 100)
    counter.observe(100, 150)
    assert counter.ratio == pytest.approx(1.25)
    assert counter.observations == 2


def test_calibration_is_clamped_to_its_sane_range() -> None:
    counter = CalibratedCounter(lambda text: 100, min_ratio=0.5, max_ratio=2.0)
    counter.observe(10, 10_000)
    assert counter.ratio == 2.0
    counter.observe(10_000, 1)
    assert 0.5 <= counter.ratio < 2.0
    for _ in range(100):
        counter.observe(10_000, 1)
    assert counter.ratio == pytest.approx(0.5)
    assert counter.ratio >= 0.5


def test_calibration_ignores_unusable_observations() -> None:
    counter = CalibratedCounter(lambda text: 100)
    counter.observe(0, 50)
    counter.observe(50, 0)
    counter.observe(-1, 5)
    assert counter.ratio == 1.0
    assert counter.observations == 0


def test_calibration_keeps_empty_text_at_zero_and_wraps_the_estimate_by_default() -> None:
    counter = CalibratedCounter()
    counter.observe(10, 20)
    assert counter.count("") == 0
    assert counter.raw("hello world again") == estimate_tokens("hello world again")
    assert counter.count("hello world again") == 2 * estimate_tokens("hello world again")


@pytest.mark.parametrize(
    "kwargs",
    [{"alpha": 0.0}, {"alpha": 1.5}, {"min_ratio": 0.0}, {"min_ratio": 3.0, "max_ratio": 2.0}],
)
def test_calibration_refuses_nonsense_parameters(kwargs: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        CalibratedCounter(**kwargs)


def test_the_default_counter_is_exact_bpe_when_the_encoding_loads() -> None:
    counter = default_counter()
    assert isinstance(counter, BpeCounter)
    assert counter.count("hello world") == 2


def test_the_default_counter_falls_back_to_the_estimate_without_the_encoding() -> None:
    counter = default_counter("no_such_encoding_offload_test")
    assert isinstance(counter, EstimateCounter)
    assert counter.count("hello world") == estimate_tokens("hello world")


def test_a_bounded_counter_is_exact_for_small_texts_and_estimates_big_ones() -> None:
    from offload.core.tokens import BoundedCounter, estimate_tokens

    class Exact:
        def count(self, text: str) -> int:
            return -1  # a marker: the exact path was taken

    counter = BoundedCounter(Exact(), exact_chars=10)
    assert counter.count("short") == -1
    big = "word " * 100
    assert counter.count(big) == estimate_tokens(big)


def test_a_long_text_counted_a_piece_at_a_time_counts_the_same_as_whole(
    bpe: BpeCounter, monkeypatch: pytest.MonkeyPatch
) -> None:
    import offload.core.tokens as tokens

    # every sample, many times over with varied joins: code, JSON, traces, prose, Unicode
    joins = [" ", "\n", "  ", "\n\n", " é ", "\t", "12 ", ""]
    text = "".join(SAMPLES[i % len(SAMPLES)] + joins[i % len(joins)] for i in range(400))
    whole = len(bpe._get_encoding().encode(text, disallowed_special=()))
    monkeypatch.setattr(tokens, "_PIECE_CHARS", 97)  # many pieces, cut in odd places
    encoded: list[int] = []
    real = bpe._get_encoding()

    class Recording:
        def encode(self, piece: str, **kwargs: object) -> list[int]:
            encoded.append(len(piece))
            return list(real.encode(piece, disallowed_special=()))

    counter = BpeCounter(cache_size=0)
    counter._encoding = Recording()
    assert counter.count(text) == whole
    assert len(encoded) > 50 and max(encoded) < 97 + 4096


SHARED_BPE = BpeCounter()


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400) | st.text(alphabet=" \n=\t-", max_size=4000))
def test_a_real_tokenizers_count_of_any_text_is_plausible(text: str) -> None:
    assert plausible_count(text, SHARED_BPE.count(text))


@pytest.mark.parametrize("size", [1, 255, 256, 257, 10_000])
def test_a_runs_count_is_plausible_up_to_the_longest_token_and_one_per_byte(size: int) -> None:
    text = " " * size
    assert plausible_count(text, SHARED_BPE.count(text))
    assert plausible_count(text, -(-size // MAX_TOKEN_BYTES))
    assert not plausible_count(text, -(-size // MAX_TOKEN_BYTES) - 1)
    assert plausible_count(text, size + EXTRA_TOKENS)
    assert not plausible_count(text, size + EXTRA_TOKENS + 1)


@pytest.mark.parametrize(
    ("text", "tokens"),
    [("one two", 0), ("x", -1), ("", -1), ("é" * 10, 37), ("word " * 2000, 3), ("", 17)],
)
def test_a_count_no_tokenizer_could_give_is_not_plausible(text: str, tokens: int) -> None:
    assert not plausible_count(text, tokens)
