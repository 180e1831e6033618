"""Text analysis for search (pure): the one function that turns text into index terms.

The index and every query go through :func:`index_text` / :func:`analyse_query`, so a word
is always looked up exactly as it was stored. A "word" is a run of letters, digits and
underscores, joined by ``.``, ``/`` or ``-`` into one identifier (``src/cfg.py``,
``ERR_CONN_REFUSED``, ``parseCfgFile``, ``foo-bar``). Each yields:

- its pieces (split at the joiners, at underscores, at camelCase humps and at letter/digit
  boundaries), case-folded, diacritics removed, and English words stemmed (Snowball, through
  PyStemmer): ``Connections`` → ``connect``;
- the identifier kept whole and unstemmed (``err_conn_refused``, ``parsecfgfile``), so an
  exact identifier ranks above a text that merely shares its pieces (its IDF is high);
- in the index (:func:`index_text`), each piece's written form where stemming changed it
  (``connections`` beside ``connect``), so a lookup's exact word ranks above the stem's
  other inflections: the query holds both, a text holding only the stem matches one of
  the two, and the form is the rarer term (a search leaves out a form no rarer than its
  stem, such as a name written one way: ``store.selective.idle_forms``; a question
  searches stems only: :func:`analyse_query`). :func:`terms`, for term-overlap measures,
  leaves written forms out.

JSON string escapes are seen through: in ``"ok\\nZebra failed"`` both ``zebra`` and
``nzebra`` are terms (a Windows path ``C:\\new`` keeps ``new``), and ``\\u00e9`` reads as
``é``. Stopwords are indexed but never required: a query drops them unless it has nothing
else. Every pattern here is linear-time (no nested quantifier can match the same text two
ways), and analysing one distinct word is cached once it has been met twice, so a body
costs one regex scan plus a dictionary lookup per word (``core.text.memo``).
"""

from __future__ import annotations

import itertools
import operator
import re
import threading
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable, KeysView
from dataclasses import dataclass
from typing import Generic, TypeVar

import Stemmer

from offload.core.text.memo import Memo

__all__ = [
    "ANALYSIS_VERSION",
    "MAX_TERM_CHARS",
    "QueryTerms",
    "analyse_query",
    "bigrams",
    "cached_analyses",
    "clear_caches",
    "content_terms",
    "counted_runs",
    "index_terms",
    "index_text",
    "is_stopword",
    "matching_spans",
    "pieces",
    "stem_terms",
    "surface_words",
    "surface_words_of_runs",
    "terms",
    "word_terms",
    "words",
    "written_forms",
]

# Bump when terms() would give different output for the same text: the index must then be
# rebuilt (a contentless index forgets a row only when given the terms it was built from).
ANALYSIS_VERSION = 3
# Longer runs are blobs (base64, hashes of hashes), not words anyone types.
MAX_TERM_CHARS = 64

# An optional JSON escape letter, then one identifier: word runs joined by . / -
_WORD = re.compile(r"(?:\\([nrtbf]))?(\w+(?:[./\-]\w+)*)")
_UNICODE_ESCAPE = re.compile(r"\\u([0-9a-fA-F]{4})")
_RUN = re.compile(r"[\w./\\-]+")
_RUN_SEPARATORS = str.maketrans(
    {c: " " for c in map(chr, range(128)) if not (c.isalnum() or c in "_./\\-")}
)
_PIECE = re.compile(r"[^\W_]+")
# camelCase humps: an acronym before a capitalised word, a capitalised or lower word, an
# acronym, digits. Each alternative consumes what it tried, so the scan stays linear.
_HUMP = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")

# Common English function words: never required, and dropped from a query that has any
# other word (they match nearly everything and say little about what is wanted).
_STOPWORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves s t d ll m o re ve y
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

_V = TypeVar("_V")
_local = threading.local()  # a Stemmer object is not safe to share between threads
# each cache's bound, in entries (a full cache is replaced by an empty one): an entry holds
# a run or word and its analysis, ~150-250 bytes, and there are eight caches, so 200,000
# each let a process that analyses many distinct words (a long-running server storing logs)
# hold ~250 MB in them; 50,000 distinct runs still cover natural text's working vocabulary.
# Each keeps a run only once it has met it twice (core.text.memo): the ids and numbered
# rows of logs, met once, are analysed and not kept
_CACHE_MAX = 50_000
_cache: Memo[str, tuple[tuple[str, ...], tuple[str, ...]]] = Memo(_CACHE_MAX)
_piece_cache: Memo[str, tuple[str, tuple[tuple[str, str], ...], int]] = Memo(_CACHE_MAX)
_run_cache: Memo[str, tuple[str, ...]] = Memo(_CACHE_MAX)
_stem_run_cache: Memo[str, tuple[str, ...]] = Memo(_CACHE_MAX)
_content_cache: Memo[str, tuple[str, ...]] = Memo(_CACHE_MAX)


def cached_analyses() -> int:
    """How many runs and words the caches hold now (each bounded by count)."""
    held = len(_cache) + len(_piece_cache) + len(_run_cache) + len(_stem_run_cache)
    caches = (_text_cache, _surface_cache, _split_cache)
    return held + len(_content_cache) + sum(len(c.data) for c in caches)


def clear_caches() -> None:
    """Forget every cached analysis (a measurement from cold caches; a long-running
    process's quiet time, when they are memory nobody reads: they refill)."""
    caches = (_cache, _piece_cache, _run_cache, _stem_run_cache, _content_cache)
    for cache in caches:
        cache.clear()
    _text_cache.clear()
    _surface_cache.clear()
    _split_cache.clear()


def is_stopword(word: str) -> bool:
    """True for a common function word (case-folded), which a query never requires."""
    return word.casefold() in _STOPWORDS


def _fold(piece: str) -> str:
    """Case-folded, compatibility-normalised, without diacritics."""
    low = piece.casefold()
    if low.isascii():
        return low
    decomposed = unicodedata.normalize("NFKD", low)
    folded = unicodedata.normalize(
        "NFC", "".join(c for c in decomposed if not unicodedata.combining(c))
    )
    # compatibility forms can decompose to a space and a mark (U+FE70 is " " + U+064B)
    return "".join(folded.split())


def _stem(piece: str) -> str:
    # English stems only for ASCII letters: other scripts keep their folded form
    if piece.isascii() and piece.isalpha():
        stemmer = getattr(_local, "stemmer", None)
        if stemmer is None:
            # without the stemmer's own cache (its entries are lists, which the cyclic
            # GC walks at every full collection): each piece is stemmed once when first
            # met and once more when _piece_cache keeps it
            stemmer = _local.stemmer = Stemmer.Stemmer("english", 0)
        return str(stemmer.stemWord(piece))
    return piece


def _humps(run: str) -> list[str]:
    if run.isascii():
        return _HUMP.findall(run) or [run]
    return [run]


def _piece(run: str) -> tuple[str, tuple[tuple[str, str], ...], int]:
    """One piece (a run of letters and digits): (its folded form, (folded, stem) of each
    of its humps that makes a term, how many humps it has). Cached: distinct words share
    most of their pieces (``UNIQUE-MARKER-17``, ``UNIQUE-MARKER-18``), so a body of
    thousands of distinct identifiers folds and stems each distinct piece once, and the
    vocabulary (:func:`surface_words`) reuses what the index terms folded."""
    cached = _piece_cache.data.get(run)  # the dict's own get: the hot path
    if cached is None:
        humps = _humps(run)
        kept = []
        for h in humps:
            folded = _fold(h)
            if folded and len(folded) <= MAX_TERM_CHARS:
                kept.append((folded, _stem(folded)))
        cached = (_fold(run), tuple(kept), len(humps))
        _piece_cache.keep(run, cached)
    return cached


def _analyse_word(word: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(stems and whole identifiers, written forms) of one word."""
    out: dict[str, None] = {}
    forms: dict[str, None] = {}
    runs = _PIECE.findall(word)
    pieces = 0
    for run in dict.fromkeys(runs):  # a repeated piece adds nothing (and costs nothing)
        whole, humps, count = _piece(run)
        pieces += count
        for folded, stem in humps:
            out.setdefault(stem, None)
            if stem != folded:
                forms.setdefault(folded, None)  # "expecting" beside "expect"
        if count > 1 and len(run) <= MAX_TERM_CHARS:
            out.setdefault(whole, None)  # parseCfgFile whole in parseCfgFile.read
    if (len(runs) > 1 or pieces > 1) and len(word) <= MAX_TERM_CHARS:
        out.setdefault(_fold(word), None)
    kept = tuple(t for t in out if t)
    return kept, tuple(f for f in forms if f not in out)


def _analysed(word: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    cached = _cache.data.get(word)
    if cached is None:
        cached = _analyse_word(word)
        _cache.keep(word, cached)
    return cached


def word_terms(word: str) -> tuple[str, ...]:
    """The index terms of one word (see the module docstring): its stems and whole
    identifiers, then the written forms its stems changed; cached per distinct word."""
    kept, forms = _analysed(word)
    return kept + forms if forms else kept


def stem_terms(word: str) -> tuple[str, ...]:
    """A word's terms without its written forms: the sequence a phrase check compares
    (a written form stands at its stem's place, so it would pair with it)."""
    return _analysed(word)[0]


def written_forms(word: str) -> tuple[str, ...]:
    """The case-folded written forms of a word's pieces that stemming changed
    (``Expecting`` → ``expecting``): indexed beside the stems, so the exact form a query
    names outranks other inflections of its stem (the form is the rarer, higher-IDF term)."""
    return _analysed(word)[1]


def _decode_unicode_escapes(text: str) -> str:
    if "\\u" not in text:
        return text

    def one(m: re.Match[str]) -> str:
        cp = int(m.group(1), 16)
        return " " if 0xD800 <= cp <= 0xDFFF else chr(cp)

    return _UNICODE_ESCAPE.sub(one, text)


def _runs(text: str) -> list[str]:
    """Maximal runs of word characters, joiners and backslashes: the units that are
    analysed (and cached) one at a time. ASCII text takes a translate-and-split fast path."""
    if text.isascii():
        return text.translate(_RUN_SEPARATORS).split()
    return _RUN.findall(text)


def _run_words(run: str) -> list[str]:
    out: list[str] = []
    for escape, word in _WORD.findall(_decode_unicode_escapes(run)):
        if escape:
            out.append(escape + word)  # C:\\new is a path as often as "\\n" is a newline
        out.append(word)
    return out


def _memo(
    cache: Memo[str, tuple[str, ...]], run: str, analyse: Callable[[str], Iterable[str]]
) -> tuple[str, ...]:
    """A run's terms from ``cache``, analysed (and kept once met twice)."""
    cached = cache.data.get(run)
    if cached is None:
        cached = tuple(t for w in _run_words(run) for t in analyse(w))
        cache.keep(run, cached)
    return cached


def _run_terms(run: str) -> tuple[str, ...]:
    if run.isdigit() and run.isascii():
        return _number_terms(run)
    return _memo(_run_cache, run, word_terms)


def _number_terms(run: str) -> tuple[str, ...]:
    """The terms of a run of ASCII digits, without the word analysis: itself (a number is
    one piece, one hump, folded and stemmed to itself), or none past MAX_TERM_CHARS.
    Numbers are most of the runs a log or a tool's output has not shown before (ids,
    timings, counts), and each new one went through the whole analysis (~5 us)."""
    return (run,) if len(run) <= MAX_TERM_CHARS else ()


def words(text: str) -> list[str]:
    """The words of ``text`` in order (JSON escapes seen through; see the module docstring)."""
    return [w for run in _runs(text) for w in _run_words(run)]


def index_terms(text: str) -> list[str]:
    """Every index term of ``text``, written forms included, in order (repeats kept: they
    are the body's length)."""
    out: list[str] = []
    extend = out.extend
    cache = _run_cache.data
    for run in _runs(text):
        cached = cache.get(run)
        extend(cached if cached is not None else _run_terms(run))
    return out


def terms(text: str) -> list[str]:
    """The stems and identifiers of ``text``, in order, without written forms: what a
    term-overlap measure compares (a written form would count an inflected word twice)."""
    out: list[str] = []
    held = _stem_run_cache.data
    for run in _runs(text):
        cached = held.get(run)
        out.extend(cached if cached is not None else _memo(_stem_run_cache, run, stem_terms))
    return out


def index_text(text: str) -> str:
    """The terms of ``text`` as one space-separated string for the index.

    Each distinct run of text is analysed once and repeated as often as it occurs, grouped
    by run rather than in reading order: BM25 needs only how often a term occurs and how
    long the text is (phrases are checked on the text itself), and counting runs in C
    keeps a big JSON body cheap. Deterministic, so the same text always gives the same
    string (a contentless index forgets a row only when given it again).
    """
    if not text:  # an entry's empty metadata fields: most of a bulk put's entries
        return ""
    counts = Counter(_runs(text))
    cache = _text_cache.holding(counts.keys())
    # each run's terms end in a space: repeating and joining them is C work, no loop here
    return "".join(map(operator.mul, map(cache.__getitem__, counts), counts.values()))[:-1]


def index_text_counts(text: str) -> tuple[str, Counter[str]]:
    """:func:`index_text` and how often each of its terms occurs: the Counter of the
    string's split, in the same order, counted without splitting it. Each distinct run's
    terms are split once (and cached) and counted as often as the run occurs, so a chunk
    of repeated lines (a log) costs its distinct runs, not its every term."""
    counts = Counter(_runs(text))
    cache = _text_cache.holding(counts.keys())
    terms = "".join(map(operator.mul, map(cache.__getitem__, counts), counts.values()))[:-1]
    # a run's split is its joined terms split: not its analysis again (which would offer
    # the run to the word caches a second time, and keep a run met once)
    return terms, _terms_counted(counts, lambda run: tuple(cache[run].split()))


def counted_runs(text: str) -> tuple[Counter[str], set[str]]:
    """How often each term of :func:`index_text`'s string occurs, in the same order, without
    building the string, and the text's distinct runs: what a PostgreSQL put sends (a
    tsvector and cached counts are made from the counts alone), spared the join that only
    an FTS5 row needs. The vocabulary of a text cut into pieces at line ends is then
    :func:`surface_words_of_runs` of the union of its pieces' runs (no run holds a line
    end), with no second pass over the text.

    Each run's terms are chained in reading order and counted once, without counting the
    runs first (a quarter of the time): a term first appears in the same place either
    way, at its run's first occurrence, so the order is :func:`_terms_counted`'s."""
    runs = _runs(text)
    distinct = set(runs)
    split = _split_cache.holding(distinct)
    return Counter(itertools.chain.from_iterable(map(split.__getitem__, runs))), distinct


def _terms_counted(
    runs: Counter[str], split_of: Callable[[str], tuple[str, ...]] | None = None
) -> Counter[str]:
    """The terms of counted runs, counted: each distinct run's terms split once (and
    cached) and repeated as often as it occurs, in order: what index_text's split gives.
    ``split_of``: how a run not cached is split (by default, analysed)."""
    split = _split_cache.holding(runs.keys(), split_of)
    repeated = map(operator.mul, map(split.__getitem__, runs), runs.values())
    return Counter(itertools.chain.from_iterable(repeated))


def _run_split(run: str) -> tuple[str, ...]:
    """A run's terms, as a split of :func:`index_text`'s string gives them."""
    return tuple(_run_text(run).split())


def _run_text(run: str) -> str:
    """A run's terms joined, with a trailing space ("" for a run without any)."""
    ts = _run_terms(run)
    return " ".join(ts) + " " if ts else ""


class _RunCache(Generic[_V]):
    """What each run of text analyses to, for the lookups done in C (``map`` over a whole
    text's runs, no Python loop per run)."""

    def __init__(self, analyse: Callable[[str], _V]) -> None:
        self._memo: Memo[str, _V] = Memo(_CACHE_MAX)
        self._analyse = analyse

    @property
    def data(self) -> dict[str, _V]:
        """The runs kept now."""
        return self._memo.data

    def holding(
        self, runs: KeysView[str] | set[str], analyse: Callable[[str], _V] | None = None
    ) -> dict[str, _V]:
        """A dict holding every one of ``runs`` (the new ones analysed now, by ``analyse``
        if given; those met before kept). A full cache is replaced, not cleared: another
        thread reading the old dict still finds all it put there."""
        keys = runs if isinstance(runs, set) else set(runs)
        return self._memo.holding(keys, self._analyse if analyse is None else analyse)

    def clear(self) -> None:
        """Forget every run."""
        self._memo.clear()


def surface_words(text: str) -> set[str]:
    """Distinct case-folded, unstemmed words and pieces: the vocabulary for partial and
    misspelt query words (looked up by substring and edit distance)."""
    return surface_words_of_runs(set(_runs(text)))


def surface_words_of_runs(runs: set[str]) -> set[str]:
    """:func:`surface_words` of a text whose distinct runs are ``runs``."""
    cache = _surface_cache.holding(runs)
    return set().union(*map(cache.__getitem__, runs))


def _surface_of(run: str) -> tuple[str, ...]:
    """A run's vocabulary words, as a tuple of strings: a cached value the cyclic GC stops
    tracking (a frozenset stays tracked, and a full collection walks every one)."""
    if run.isdigit() and run.isascii():
        return _NO_WORDS  # a number is no vocabulary word
    found: set[str] = set()
    for word in _run_words(run):
        for piece in set(_PIECE.findall(word)):
            if len(piece) > MAX_TERM_CHARS:
                continue
            whole, humps, _count = _piece(piece)
            found.add(whole)  # a hump too long or folded away is no word either
            found.update(folded for folded, _stem in humps)
    return tuple(w for w in found if 3 <= len(w) <= MAX_TERM_CHARS and not w.isdigit())


_NO_WORDS: tuple[str, ...] = ()
_text_cache = _RunCache(_run_text)  # a run's terms joined (index_text)
_surface_cache = _RunCache(_surface_of)
_split_cache = _RunCache(_run_split)  # a run's terms split (index_text_counts)


@dataclass(frozen=True)
class QueryTerms:
    """A query as index terms: what to match, and the order for phrase checks."""

    any_of: tuple[str, ...]  # distinct terms to match (any of them), in query order
    sequence: tuple[str, ...]  # the stem terms in query order, for phrase (bigram) checks
    words: tuple[str, ...]  # the raw content words, for vocabulary expansion
    # (written form, its stem) of each content word's piece that stemming changed
    forms: tuple[tuple[str, str], ...] = ()
    # a query without function words (keywords, a name): its words are meant as written
    lookup: bool = False

    @property
    def empty(self) -> bool:
        """True when nothing in the query can match."""
        return not self.any_of


def analyse_query(text: str, *, max_words: int = 32) -> QueryTerms:
    """Analyse a user query exactly like the index; drop stopwords unless nothing else.

    A lookup (a query without function words: ``expecting``, ``parse errors``) also
    searches its words' written forms, so the exact word it names ranks above the stem's
    other inflections. A question ("what did she paint?") does not: its inflections follow
    its own grammar, not the text it is after (measured on LoCoMo, docs/benchmarks/search.md).
    """
    all_words = list(words(text))
    content = [w for w in all_words if not _all_stop(w)] or all_words
    lookup = len(content) == len(all_words)
    content = content[:max_words]
    seq: list[str] = []
    every: list[str] = []
    forms: dict[tuple[str, str], None] = {}
    for w in content:
        seq.extend(stem_terms(w))
        every.extend(word_terms(w) if lookup else stem_terms(w))
        if lookup:
            forms.update(((f, _stem(f)), None) for f in written_forms(w))
    return QueryTerms(
        tuple(dict.fromkeys(every)),
        tuple(seq),
        tuple(dict.fromkeys(content)),
        tuple(forms),
        lookup,
    )


def content_terms(text: str) -> list[str]:
    """The terms of ``text``'s non-stopword words, in order, without written forms (the
    side of a phrase check that a query's :attr:`QueryTerms.sequence` is compared with)."""
    out: list[str] = []
    held = _content_cache.data  # a full cache is replaced: this one still answers
    for run in _runs(text):
        cached = held.get(run)
        if cached is None:
            cached = tuple(t for w in _run_words(run) if not _all_stop(w) for t in stem_terms(w))
            _content_cache.keep(run, cached)
        out.extend(cached)
    return out


def _all_stop(word: str) -> bool:
    return all(p.casefold() in _STOPWORDS for p in _PIECE.findall(word))


def bigrams(seq: Iterable[str]) -> set[tuple[str, str]]:
    """Adjacent pairs of a term sequence (a phrase check without positions in the index)."""
    return set(itertools.pairwise(seq))


def pieces(word: str) -> list[str]:
    """A word's folded, unstemmed pieces (and the word whole when it has several): what
    the vocabulary is searched for when the index does not know a query word."""
    runs = _PIECE.findall(word)
    out: dict[str, None] = {}
    count = 0
    for run in runs:
        humps = _humps(run)
        count += len(humps)
        out.update((_fold(h), None) for h in humps)
        if len(humps) > 1:
            out.setdefault(_fold(run), None)
    if (len(runs) > 1 or count > 1) and len(word) <= MAX_TERM_CHARS:
        out.setdefault(_fold(word), None)
    return [p for p in out if p and len(p) <= MAX_TERM_CHARS]


def matching_spans(line: str, wanted: set[str]) -> list[tuple[int, int, frozenset[str]]]:
    """(start, end, terms) of each run of ``line`` whose terms meet ``wanted``, in order."""
    out = []
    for m in _RUN.finditer(line):
        hit = wanted.intersection(_run_terms(m.group()))
        if hit:
            out.append((m.start(), m.end(), frozenset(hit)))
    return out
