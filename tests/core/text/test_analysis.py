"""Text analysis for search: one function for the index and the query."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
import time
from collections import Counter

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from offload.core.text import analysis
from offload.core.text.analysis import analyse_query, content_terms, surface_words, terms


def test_words_are_case_folded_and_stemmed() -> None:
    assert terms("Connections RUNNING researched") == ["connect", "run", "research"]


def test_the_index_holds_a_written_form_that_stemming_changed_beside_its_stem() -> None:
    assert analysis.index_terms("Connections RUNNING researched") == [
        *("connect", "connections"),
        *("run", "running"),
        *("research", "researched"),
    ]
    assert analysis.index_text("Connections connections") == " ".join(["connect connections"] * 2)
    # a word its stem leaves alone has one term; a hump's form joins its identifier's terms
    assert analysis.index_terms("paint") == ["paint"]
    assert analysis.written_forms("parseCfgFile") == ("parse",)
    assert analysis.index_terms("parseCfgFile")[-1] == "parse"
    assert analysis.written_forms("paint") == ()


def test_a_lookup_matches_written_forms_but_compares_phrases_by_stem() -> None:
    q = analyse_query("expecting Connections")
    assert q.any_of == ("expect", "expecting", "connect", "connections")
    assert q.sequence == ("expect", "connect")
    assert q.forms == (("expecting", "expect"), ("connections", "connect"))
    assert q.lookup and q.words == ("expecting", "Connections")  # as written, case kept


def test_a_question_searches_stems_only() -> None:
    # its inflections follow its own grammar ("did she paint"), not the text it is after
    q = analyse_query("what were the Connections expecting?")
    assert q.any_of == q.sequence == ("connect", "expect")
    assert q.forms == ()
    assert not q.lookup


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
    assert q.any_of == q.sequence == ("carolin", "go", "lgbtq", "support", "group")
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
    for t in [*terms(text), *analysis.index_terms(text)]:
        assert t and not any(c.isspace() for c in t)
    analyse_query(text)
    surface_words(text)


ADVERSARIAL_UNITS = ["a-", "aB", "A", "\\n", "a.", "\\u00e9", "é-", "ab1", "a_", "\\", "a\\nb "]
SMALL_REPEATS, BIG_REPEATS = 2_000, 16_000  # 8x the input: linear is ~8x, quadratic ~64x
FAST_S = 0.005  # CPU seconds: a big input analysed this fast cannot hide quadratic work
MAX_RATIO = 24.0
ROUNDS = 5


def _cpu_seconds(text: str) -> float:
    """CPU time of this thread (not wall time, not other threads) to analyse ``text`` from
    cold caches."""
    analysis.clear_caches()
    t0 = time.thread_time()
    terms(text)
    analysis.index_text(text)
    surface_words(text)
    analyse_query(text[:2000])
    return time.thread_time() - t0


def _measure(units: list[str]) -> dict[str, tuple[float, float]]:
    """``unit -> (least small, least big)`` CPU seconds over interleaved rounds, with the
    collector off (a collection walks the whole heap, whatever the input's size)."""
    gc.disable()
    best = {u: [float("inf"), float("inf")] for u in units}
    for _ in range(ROUNDS):
        for unit in units:  # small and big side by side, so both see the same machine
            best[unit][0] = min(best[unit][0], _cpu_seconds(unit * SMALL_REPEATS))
            best[unit][1] = min(best[unit][1], _cpu_seconds(unit * BIG_REPEATS))
    return {u: (small, big) for u, (small, big) in best.items()}


@pytest.fixture(scope="module")
def analysis_seconds() -> dict[str, tuple[float, float]]:
    """The timings of every adversarial unit, measured once in a fresh child process: no
    other thread, no big heap, and no cache warmed by other tests."""
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(ADVERSARIAL_UNITS)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    found: dict[str, list[float]] = json.loads(done.stdout)
    return {u: (small, big) for u, (small, big) in found.items()}


def test_distinct_words_sharing_pieces_fold_and_stem_each_piece_twice_at_most(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # counts operations, not seconds: 400 distinct identifiers made of 20 pieces
    analysis.clear_caches()
    calls = {"fold": 0, "stem": 0}
    fold, stem = analysis._fold, analysis._stem

    def counted_fold(piece: str) -> str:
        calls["fold"] += 1
        return fold(piece)

    def counted_stem(piece: str) -> str:
        calls["stem"] += 1
        return stem(piece)

    monkeypatch.setattr(analysis, "_fold", counted_fold)
    monkeypatch.setattr(analysis, "_stem", counted_stem)
    pieces = [f"piece{chr(97 + i)}" for i in range(20)]
    text = " ".join(f"{a}-{b}" for a in pieces for b in pieces)
    index = analysis.index_text(text)
    # a piece is analysed when first met (not kept) and again when met twice (then kept)
    assert calls["stem"] == 2 * len(pieces)
    # a piece folded as its hump and whole, twice, and each two-piece word whole once
    assert calls["fold"] == 2 * 2 * len(pieces) + len(pieces) ** 2
    before = calls["fold"]
    assert surface_words(text) == set(pieces)
    assert calls["fold"] == before  # the vocabulary reuses the folded pieces
    assert "piecea-pieceb" in index.split() and "piecea" in index.split()


@pytest.mark.parametrize("unit", ADVERSARIAL_UNITS)
def test_analysis_time_grows_linearly_on_adversarial_input(
    unit: str, analysis_seconds: dict[str, tuple[float, float]]
) -> None:
    small, big = analysis_seconds[unit]
    assert big < FAST_S or big < MAX_RATIO * small, (unit, small, big)


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    print(json.dumps(_measure(json.loads(sys.argv[2]))))


# Texts of every kind the index meets: prose, code identifiers, logs, JSON-escaped bodies,
# Windows paths, scripts without spaces, combining marks, compatibility forms, blobs.
VARIED_TEXTS = [
    "Connections RUNNING researched; the cache's timeout was 30 s",
    "def parseCfgFile(self): return self.ERR_CONN_REFUSED or src/cfg.py foo-bar HTTPServer2",
    '{"m":"ok\\nZebrawordx failed","p":"C:\\\\new\\\\dir","u":"\\u00e9t\\u00e9 \\ud83d"}',
    "naïve café Ωmega ΣΊΣΥΦΟΣ straße ﬁle ＡＢＣ 東京タワーは高い 123 ǅemal ½ \u0300\u0301 \ufe70",
    "2026-11-02T10:01:00Z ERROR socket: retry 4242 ms ERR_SOCKET\n" * 40,
    "a" * 70 + " " + "b" * 64 + " ..//--.. _ __init__ x.y.z 0.39019625450241735",
    "",
    " \n\t ",
]


def _reference_index_text(text: str) -> str:
    """index_text as first written (a loop over the distinct runs): the contract the fast
    one must keep byte for byte (a contentless FTS5 row is forgotten only with it)."""
    parts: list[str] = []
    for run, n in Counter(analysis._runs(text)).items():
        ts = analysis.index_terms(run)
        if ts:
            one = " ".join(ts)
            parts.append(one if n == 1 else " ".join([one] * n))
    return " ".join(parts)


def _reference_surface_words(text: str) -> set[str]:
    found: set[str] = set()
    for word in analysis.words(text):
        for piece in set(analysis._PIECE.findall(word)):
            if len(piece) > analysis.MAX_TERM_CHARS:
                continue
            found.add(analysis._fold(piece))
            found.update(analysis._fold(h) for h in analysis._humps(piece))
    return {w for w in found if 3 <= len(w) <= analysis.MAX_TERM_CHARS and not w.isdigit()}


@pytest.mark.parametrize("text", VARIED_TEXTS)
def test_the_index_string_and_vocabulary_are_those_of_the_reference_analysis(text: str) -> None:
    for _ in range(2):  # from cold caches, then from warm ones
        assert analysis.index_text(text) == _reference_index_text(text)
        assert analysis.surface_words(text) == _reference_surface_words(text)
    analysis.clear_caches()


@given(st.text(alphabet='aZé東9_./-\\ \n"nu{}\u0301', max_size=300))
def test_any_text_analyses_to_the_reference_index_string(text: str) -> None:
    assert analysis.index_text(text) == _reference_index_text(text)
    assert analysis.surface_words(text) == _reference_surface_words(text)


def test_a_cache_filling_up_within_one_text_still_gives_every_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(analysis, "_CACHE_MAX", 3)
    analysis.clear_caches()
    text = " ".join(f"word{i} other{i % 5}" for i in range(50))
    assert analysis.index_text(text) == _reference_index_text(text)
    assert analysis.surface_words(text) == _reference_surface_words(text)
    analysis.clear_caches()


def _reference_counts(text: str) -> tuple[str, list[tuple[str, int]]]:
    """index_text and the split's counts in first-seen order (what a chunk's cached counts
    and its tsvector are built from)."""
    terms = _reference_index_text(text)
    return terms, list(Counter(terms.split()).items())


def _counts(text: str) -> tuple[str, list[tuple[str, int]]]:
    terms, counts = analysis.index_text_counts(text)
    return terms, list(counts.items())


@pytest.mark.parametrize("text", VARIED_TEXTS)
def test_the_index_string_counted_by_run_equals_counting_its_split(text: str) -> None:
    for _ in range(2):  # from cold caches, then from warm ones
        assert _counts(text) == _reference_counts(text)
        assert list(analysis.counted_runs(text)[0].items()) == _reference_counts(text)[1]
    analysis.clear_caches()


@given(st.text(alphabet='aZé東9_./-\\ \n"nu{}\u0301\x1c\u2028', max_size=300))
def test_any_text_counted_by_run_gives_the_counts_of_its_split(text: str) -> None:
    assert _counts(text) == _reference_counts(text)
    assert list(analysis.counted_runs(text)[0].items()) == _reference_counts(text)[1]


def test_counting_by_run_survives_a_cache_filling_up_within_one_text(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(analysis, "_CACHE_MAX", 3)
    analysis.clear_caches()
    text = "\n".join(f"word{i} other{i % 5} again" for i in range(50)) * 3
    assert _counts(text) == _reference_counts(text)
    assert list(analysis.counted_runs(text)[0].items()) == _reference_counts(text)[1]
    analysis.clear_caches()


@given(st.text(alphabet="0123456789", min_size=1, max_size=80))
def test_a_number_analyses_to_what_the_word_analysis_gives_it(number: str) -> None:
    # numbers skip the word analysis (the run's own term, none past the length bound)
    assert analysis.index_terms(number) == list(analysis.word_terms(number))
    assert analysis.surface_words(number) == _reference_surface_words(number) == set()
    text = f"took {number} ms"
    assert list(analysis.counted_runs(text)[0].items()) == _reference_counts(text)[1]


def test_runs_met_once_are_analysed_but_not_kept_and_runs_met_again_are() -> None:
    # a log's numbered rows, each row's id new: nothing of them stays in the caches
    analysis.clear_caches()
    rows = "\n".join(f"row r{n}-x{n}: status=ok" for n in range(200))
    first = analysis.index_text(rows)
    held_once = analysis.cached_analyses()
    assert analysis.index_text(rows) == first  # the same terms, analysed again
    held_twice = analysis.cached_analyses()
    assert held_once < held_twice
    assert held_twice - held_once >= 200  # now each row's id is kept


def test_the_vocabulary_each_run_analyses_to_is_kept_where_the_cyclic_gc_stops_walking_it() -> None:
    # a full collection walks every tracked object: a cache of one value per distinct run
    # of text must hold values the GC untracks (tuples of strings), not sets
    text = "parseConfigFile reads settings.toml; the reader retries 3 times"
    surface_words(text)  # met once: analysed; met twice: kept
    words = surface_words(text)
    gc.collect()
    held = [analysis._surface_cache.data[run] for run in analysis._runs(text)]
    assert set().union(*held) == words
    assert not any(gc.is_tracked(value) for value in held)


def test_the_stemmer_keeps_no_cache_of_its_own_beside_the_cache_of_stemmed_pieces() -> None:
    assert terms("connections connected") == ["connect", "connect"]
    assert analysis._local.stemmer.maxCacheSize == 0
