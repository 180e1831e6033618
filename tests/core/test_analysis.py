"""Text analysis for search: one function for the index and the query."""

from __future__ import annotations

import time

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from offload.core import analysis
from offload.core.analysis import analyse_query, content_terms, surface_words, terms


def test_words_are_case_folded_and_stemmed() -> None:
    assert terms("Connections RUNNING researched") == ["connect", "run", "research"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("parseCfgFile", ["pars", "cfg", "file", "parsecfgfile"]),
        ("ERR_CONN_REFUSED", ["err", "conn", "refus", "err_conn_refused"]),
        ("src/cfg.py", ["src", "cfg", "py", "src/cfg.py"]),
        ("os.path.join", ["os", "path", "join", "os.path.join"]),
        ("state-of-the-art", ["state", "of", "the", "art", "state-of-the-art"]),
        ("getHTTPResponse", ["get", "http", "respons", "gethttpresponse"]),
        ("sha256", ["sha", "256", "sha256"]),
    ],
)
def test_identifiers_are_split_and_kept_whole(text: str, expected: list[str]) -> None:
    assert terms(text) == expected


def test_a_word_after_a_json_escape_is_its_own_term() -> None:
    found = terms('{"m":"ok\\nZebrawordx failed"}')
    assert "zebrawordx" in found and "fail" in found
    # a Windows path keeps its words too
    assert "new" in terms("C:\\new\\table")


def test_unicode_escapes_read_as_their_characters() -> None:
    assert terms("caf\\u00e9") == terms("café") == terms("cafe")


def test_unicode_is_folded_and_diacritics_removed() -> None:
    assert terms("Straße NAÏVE") == terms("strasse naive")
    assert terms("日本語のテキスト") == ["日本語のテキスト"]
    assert terms("Ärger") == terms("ärger")


def test_a_query_is_analysed_like_the_index() -> None:
    q = analyse_query("When did Caroline go to the LGBTQ support group?")
    assert q.any_of == ("carolin", "go", "lgbtq", "support", "group")
    body = terms("Caroline said, I went to a LGBTQ support group yesterday")
    assert set(q.any_of) - set(body) == {"go"}


def test_stopwords_are_dropped_unless_they_are_all_there_is() -> None:
    assert analyse_query("what is the deploy plan").any_of == ("deploy", "plan")
    assert analyse_query("to be or not to be").any_of == ("to", "be", "or", "not")
    assert analyse_query("").empty and analyse_query("  ?! ").empty


def test_content_terms_skip_stopwords_for_phrase_checks() -> None:
    assert content_terms("the support group of the year") == ["support", "group", "year"]
    assert analysis.bigrams(["a", "b", "c"]) == {("a", "b"), ("b", "c")}


def test_the_vocabulary_holds_unstemmed_pieces() -> None:
    words = surface_words("parseCfgFile ERR_CONN_REFUSED running")
    assert {"parsecfgfile", "parse", "cfg", "file", "err", "conn", "refused", "running"} <= words


def test_blobs_longer_than_a_word_are_not_terms() -> None:
    blob = "x" * (analysis.MAX_TERM_CHARS + 1)
    assert terms(blob) == []
    assert surface_words(blob) == set()


@given(st.text(max_size=200))
@example("\ufe70")  # NFKD gives a space and a combining mark
def test_analysis_is_total_and_yields_no_spaces(text: str) -> None:
    for t in terms(text):
        assert t and not any(c.isspace() for c in t)
    analyse_query(text)
    surface_words(text)


def _seconds(text: str) -> float:
    """The least CPU time (not wall time: other processes do not count) of five runs."""
    best = float("inf")
    for _ in range(5):
        analysis._cache.clear()
        analysis._run_cache.clear()
        analysis._surface_cache.clear()
        t0 = time.process_time()
        terms(text)
        surface_words(text)
        analyse_query(text[:2000])
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.parametrize(
    "unit", ["a-", "aB", "A", "\\n", "a.", "\\u00e9", "é-", "ab1", "a_", "\\", "a\\nb "]
)
def test_analysis_time_grows_linearly_on_adversarial_input(unit: str) -> None:
    small = _seconds(unit * 2_000)
    big = _seconds(unit * 16_000)
    # 8x the input: linear is ~8x; a quadratic pattern would be ~64x
    assert big < 0.005 or big < 24 * small, (unit, small, big)
