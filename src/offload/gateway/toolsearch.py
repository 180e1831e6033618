"""Ranking tool definitions for a natural task description (pure, in memory).

One engine with the store's search: every field is analysed by :mod:`offload.core.text.analysis`
(case-folded, Snowball-stemmed, identifiers split at camelCase, snake_case, kebab-case and
dots and also kept whole), so ``create_pull_request``, ``API-create-a-comment`` and
``browser_take_screenshot`` match the words of a request. Ranking is BM25F: each field's
term frequencies are length-normalised within the field and weighted (the tool's name
above its title, the server it belongs to, its description, its parameters' names and
their descriptions) before the saturation.

With an embedding model (the store's, ``offload.llm.embedding``), each tool's embedding is
fused with BM25F as the store fuses entries (``core.fusion.fuse``: both sides on [0, 1] per
query, lexical dominant while the query's words are the catalog's, the embedding weighing
more the more of them no tool uses: :func:`semantic_share`), so a task worded unlike any
tool ("make a folder") still finds ``create_directory``; measured in docs/benchmarks/gateway.md "Tool search".

A request's argument values (``src/app.py``, ``ProjectX``, ``3f2a9c1``, a quoted
``'fix typo'``) name what a tool acts on, not what it does: their pieces count at
:data:`VALUE_WEIGHT` (:func:`value_terms`), so "stage src/app.py" is not drawn to a tool
about apps; such an identifier kept whole keeps its full weight, so a tool named in the
query (``move_file``) still ranks first.

A whole multi-step task passed as one query ("find the latest release, summarise it, and
open an issue") is also split into clauses; the whole query's ranking and each clause's
are merged round-robin (the whole query's first), so each step's best tools reach the
top. Deterministic: same catalog and query, same order.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import mcp_types as types

from offload.core.fusion import calibrated_weight, fuse
from offload.core.text.analysis import analyse_query, terms, word_terms, words
from offload.gateway.catalog import DeferredItem

if TYPE_CHECKING:
    import numpy as np
    from numpy.typing import NDArray

__all__ = [
    "FIELDS",
    "SEMANTIC_WEIGHT",
    "STRONG_WEIGHT",
    "VALUE_WEIGHT",
    "Encoder",
    "ToolDoc",
    "ToolIndex",
    "clauses",
    "doc_for",
    "doc_for_item",
    "embedding_text",
    "embedding_views",
    "semantic_share",
    "value_terms",
]

_K1 = 1.2
#: field -> (weight, length normalisation b)
FIELDS: Mapping[str, tuple[float, float]] = {
    "name": (3.0, 0.3),
    "title": (2.0, 0.3),
    "server": (1.5, 0.0),
    "description": (1.0, 0.75),
    "params": (0.7, 0.5),
    "param_text": (0.3, 0.75),
}
# where a task description changes step: punctuation, or a joining word between clauses
# (on text whose whitespace is single spaces: every alternative has a fixed length)
_CLAUSE_BREAK = re.compile(
    r"([,;:!?.] | (?:and then|and|then|after that|afterwards|finally|also) )", re.IGNORECASE
)
_MAX_QUERY_CHARS = 4000
_MIN_CLAUSE_TERMS = 2  # a shorter piece ("Bob" of "Alice and Bob") stays with its neighbour
_MAX_CLAUSES = 6
#: the embedding's share of a fused tool score (lexical keeps the rest) when a model is given
#: and every query term is in the catalog; more when some are not (:func:`semantic_share`)
SEMANTIC_WEIGHT = 0.3
_EMBED_DESCRIPTION_CHARS = 600
#: with a second, contextual model (``ToolIndex.with_strong``): the most the semantic side
#: weighs, scaled per query by how peaked it is against the lexical side
#: (``core.fusion.calibrated_weight``). Chosen two-fold on the tasks (each half chose 0.6;
#: 0.6-0.8 give the same top-3 on both), docs/benchmarks/gateway.md "Tool search".
STRONG_WEIGHT = 0.6
_QUERY_CACHE = 256
#: a term's share of its BM25F score when only argument values of the request hold it
VALUE_WEIGHT = 0.5
# a quoted span: the quote opens after a space (or at the start) and closes before one or
# punctuation, so "what's" or "haven't" quote nothing; bounded, so linear-time
_QUOTED = re.compile(
    r"(?:^|(?<=\s))['\"\u2018\u201c]([^'\"\u2019\u201d\n]{1,200})['\"\u2019\u201d]"
    r"(?=$|[\s,.;:!?)])"
)
# an identifier-like word: a path, a file or dotted name, snake_case, a camelCase hump,
# digits (a hyphen alone does not make one: "re-run", "web-frontend" are words)
_VALUE_WORD = re.compile(r"[./_0-9]|[a-z][A-Z]")
_SENTENCE_END = re.compile(r"[.!?](?= |$)")
# where a run of letters and digits has several pieces (camelCase humps, letters/digits)
_MULTI_PIECE = re.compile(r"[a-z][A-Z]|[A-Z][A-Z][a-z]|[A-Za-z][0-9]|[0-9][A-Za-z]")


class Encoder(Protocol):
    """An embedding model (``offload.llm.embedding``): unit-length rows, one per text."""

    def encode(self, texts: Sequence[str]) -> NDArray[np.float32]:
        """One unit-length float32 row per text."""
        ...


def base_encoder(store_model: Encoder | None, strong: Encoder | None) -> Encoder | None:
    """The model of the tool index's first build: the store's, unless the contextual model
    that strengthens it is the same one (``search.embedding_model`` names MiniLM): that
    embeds the catalog once, off the start and through the saved vectors, not twice."""
    if store_model is None or strong is None:
        return store_model
    same = getattr(store_model, "model_id", None) == getattr(strong, "model_id", "")
    return None if same else store_model


@dataclass(frozen=True)
class ToolDoc:
    """What is searchable about one tool."""

    key: str  # the gateway name, ``server__tool``
    name: str
    title: str = ""
    description: str = ""
    params: tuple[str, ...] = ()
    param_text: str = ""  # the parameters' descriptions

    @property
    def server(self) -> str:
        """The upstream the tool belongs to (the key's prefix)."""
        server, sep, _tool = self.key.partition("__")
        return server if sep else ""

    def fields(self) -> dict[str, str]:
        """Each field's text."""
        return {
            "name": self.name,
            "title": self.title,
            "server": self.server,
            "description": self.description,
            "params": " ".join(self.params),
            "param_text": self.param_text,
        }


@dataclass
class ToolIndex:
    """BM25F over tool documents. Build with :meth:`build`."""

    docs: list[ToolDoc] = field(default_factory=list)
    tfs: list[dict[str, Counter[str]]] = field(default_factory=list)  # per doc, per field
    lengths: list[dict[str, int]] = field(default_factory=list)
    avg: dict[str, float] = field(default_factory=dict)
    df: Counter[str] = field(default_factory=Counter)
    # term -> (doc position, its field-weighted, length-normalised frequency), by position:
    # a query scores only the tools that hold one of its terms
    postings: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    encoder: Encoder | None = None
    vectors: Any = None  # NDArray[np.float32]: one unit row per doc, when an encoder is given
    semantic_weight: float = SEMANTIC_WEIGHT
    # a second, contextual model: one unit row per view of each doc (docs x views x dim)
    strong: Encoder | None = None
    strong_vectors: Any = None
    strong_weight: float = STRONG_WEIGHT
    _strong_queries: dict[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def build(
        cls,
        docs: Iterable[ToolDoc],
        encoder: Encoder | None = None,
        semantic_weight: float = SEMANTIC_WEIGHT,
    ) -> ToolIndex:
        """Index ``docs`` (order is kept for ties); with ``encoder``, each tool's embedding
        too, fused with BM25F at ``semantic_weight`` (``core.fusion``)."""
        index = cls(semantic_weight=semantic_weight)
        totals: Counter[str] = Counter()
        for doc in docs:
            per_field = {f: Counter(terms(text)) for f, text in doc.fields().items() if text}
            if initials := _initialisms(doc.name):
                per_field.setdefault("name", Counter()).update(initials)
            lengths = {f: sum(c.values()) for f, c in per_field.items()}
            index.docs.append(doc)
            index.tfs.append(per_field)
            index.lengths.append(lengths)
            index.df.update({t for c in per_field.values() for t in c})
            totals.update(lengths)
        n = max(1, len(index.docs))
        index.avg = {f: max(1.0, totals[f] / n) for f in FIELDS}
        index._post()
        if encoder is not None and index.docs:
            index.encoder = encoder
            index.vectors = encoder.encode([embedding_text(d) for d in index.docs])
        return index

    def _idf(self, term: str) -> float:
        n, df = len(self.docs), self.df[term]
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def _post(self) -> None:
        """Each term's postings: BM25F's pseudo-frequency of the term in each tool (every
        field's frequency, length-normalised and weighted, summed), computed once."""
        self.postings = {}
        for i, (tfs, lengths) in enumerate(zip(self.tfs, self.lengths, strict=True)):
            weighted: dict[str, float] = {}
            for f, counts in tfs.items():
                weight, b = FIELDS[f]
                norm = 1 - b + b * lengths[f] / self.avg[f]
                for term, tf in counts.items():
                    weighted[term] = weighted.get(term, 0.0) + weight * tf / norm
            for term, w in weighted.items():
                self.postings.setdefault(term, []).append((i, w))

    def _scores(
        self, query: Sequence[str], values: frozenset[str] = frozenset()
    ) -> dict[int, float]:
        """BM25F of every tool holding a term of ``query`` (the others score 0); a term of
        ``values`` counts at :data:`VALUE_WEIGHT`."""
        scores: dict[int, float] = {}
        for term in query:
            idf = self._idf(term) * (VALUE_WEIGHT if term in values else 1.0)
            for i, weighted in self.postings.get(term, ()):
                scores[i] = scores.get(i, 0.0) + idf * weighted / (_K1 + weighted)
        return scores

    def word_matched(self, query: str, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` hold a word of ``query`` (ranked by words, not by meaning
        alone)."""
        wanted = set(keys)
        found: set[str] = set()
        for term in analyse_query(query).any_of:
            for i, _weighted in self.postings.get(term, ()):
                if self.docs[i].key in wanted:
                    found.add(self.docs[i].key)
        return found

    def rank(self, query: str, keys: Sequence[str] | None = None) -> list[tuple[int, float]]:
        """Every matching document (its position and score), best first, for one query:
        BM25F, fused with the embedding's similarity when the index has one."""
        wanted = analyse_query(query).any_of
        if not wanted or not self.docs:
            return []
        allowed = set(keys) if keys is not None else None
        present = [t for t in wanted if self.df[t]]
        scored = [
            (i, score)
            for i, score in self._scores(present, value_terms(query)).items()
            if score > 0 and (allowed is None or self.docs[i].key in allowed)
        ]
        scored.sort(key=lambda s: (-s[1], s[0]))
        if self.strong is not None and self.strong_vectors is not None:
            return self._fused_strong(query, scored, allowed)
        if self.encoder is None or self.vectors is None:
            return scored
        share = semantic_share(self.semantic_weight, len(present), len(wanted))
        return self._fused(query, scored, allowed, share)

    def with_strong(
        self, strong: Encoder, weight: float = STRONG_WEIGHT, views: Encoder | None = None
    ) -> ToolIndex:
        """This index plus a contextual model's vectors of every tool's views
        (:func:`embedding_views`; slow: build it off the request path and swap it in).
        Ranking then fuses BM25F with the mean of both models' similarities (each a
        tool's best view, on [0, 1] above the median), at a calibrated share. ``views``:
        what embeds the tools' views, when not ``strong`` itself (the same model through
        a cache: ``gateway.toolvectors``); queries always go to ``strong``."""
        import numpy as np

        per_tool = [embedding_views(d) for d in self.docs]
        width = max((len(v) for v in per_tool), default=0)
        flat = [v[min(k, len(v) - 1)] for v in per_tool for k in range(width)]
        rows = (views or strong).encode(flat) if flat else np.zeros((0, 1), dtype=np.float32)
        upgraded = dataclasses.replace(self, strong=strong, strong_weight=weight)
        upgraded.strong_vectors = rows.reshape(len(self.docs), width, -1) if flat else None
        upgraded._strong_queries = {}
        return upgraded

    def _strong_query(self, texts: Sequence[str]) -> list[Any]:
        """Each text's vector, the ones not yet embedded in one batch (a search ranks the
        whole query and each clause: one model call for all of them). Searches run in
        worker threads: the cache is only read by ``get`` and replaced whole."""
        cache = self._strong_queries
        fresh = [t for t in dict.fromkeys(texts) if cache.get(t) is None]
        if fresh:
            assert self.strong is not None
            rows = dict(zip(fresh, self.strong.encode(fresh), strict=True))
            if len(cache) + len(rows) > _QUERY_CACHE:
                self._strong_queries = cache = {}
            cache.update(rows)
            return [cache.get(t, rows.get(t)) for t in texts]
        return [cache.get(t) for t in texts]

    def _fused_strong(
        self, query: str, lexical: list[tuple[int, float]], allowed: set[str] | None
    ) -> list[tuple[int, float]]:
        """The lexical ranking fused with the mean of each model's similarity on [0, 1]
        (a tool's best view; floor: the allowed tools' median), at the share
        :func:`core.fusion.calibrated_weight` gives ``strong_weight`` for this query."""
        import numpy as np

        (q_strong,) = self._strong_query([query])
        keep = [i for i, d in enumerate(self.docs) if allowed is None or d.key in allowed]
        if not keep:
            return lexical
        sides = [np.einsum("ivj,j->iv", self.strong_vectors, q_strong)]
        if self.encoder is not None and self.vectors is not None:
            q = self.encoder.encode([query])[0]
            if q.any():
                sides.append(np.einsum("ij,j->i", self.vectors, q)[:, None])
        total = np.zeros(len(keep))
        for sims in sides:
            best = sims.max(axis=1)[keep]
            floor, top = float(np.median(best)), float(best.max())
            if top > floor:
                total += np.clip((best - floor) / (top - floor), 0.0, 1.0)
        semantic = {i: float(v) / len(sides) for i, v in zip(keep, total, strict=True)}
        weight = calibrated_weight(
            self.strong_weight, [s for _, s in lexical], semantic.values(), 0.0
        )
        fused = fuse(lexical, semantic, weight=weight, floor=0.0)
        return [(i, s) for i, s in fused if s > 0]

    def _fused(
        self,
        query: str,
        lexical: list[tuple[int, float]],
        allowed: set[str] | None,
        share: float,
    ) -> list[tuple[int, float]]:
        """The lexical ranking fused with every allowed tool's similarity to the query
        (floor: the median similarity, so a typical tool adds nothing), the embedding at
        ``share``."""
        import numpy as np

        assert self.encoder is not None
        q = self.encoder.encode([query])[0]
        if not q.any():
            return lexical
        sims = np.einsum("ij,j->i", self.vectors, q).tolist()
        semantic = {
            i: float(sims[i])
            for i, doc in enumerate(self.docs)
            if allowed is None or doc.key in allowed
        }
        if not semantic:
            return lexical
        floor = float(np.median(list(semantic.values())))
        fused = fuse(lexical, semantic, weight=share, floor=floor)
        return [(i, s) for i, s in fused if s > 0]

    def search(
        self, query: str, limit: int = 5, keys: Sequence[str] | None = None
    ) -> list[tuple[ToolDoc, float]]:
        """The best ``limit`` tools for ``query`` (only those in ``keys`` when given).

        A query of several clauses merges the whole query's ranking with each clause's,
        round-robin; a tool's score is its best in any of them.
        """
        parts = clauses(query)
        if self.strong is not None and self.strong_vectors is not None:
            self._strong_query([query, *parts])
        rankings = [self.rank(query, keys)]
        if len(parts) > 1:
            rankings += [self.rank(part, keys) for part in parts]
        merged: dict[int, float] = {}
        for depth in range(max((len(r) for r in rankings), default=0)):
            for ranking in rankings:
                if depth < len(ranking):
                    i, score = ranking[depth]
                    if i not in merged:
                        merged[i] = score
                if len(merged) >= limit:
                    return [(self.docs[i], s) for i, s in merged.items()]
        return [(self.docs[i], s) for i, s in merged.items()]


def semantic_share(weight: float, known: int, terms: int) -> float:
    """The embedding's share of one query's fused score with the store's model: ``weight``,
    plus the rest in proportion to the query's terms that no tool's text holds (``terms -
    known`` of ``terms``). Those words can only be matched by meaning, so a request worded
    unlike the catalog ("non-fiction books about climate change" against one-sentence
    plugin descriptions) leans on the embedding, and one in the catalog's own words keeps
    BM25F dominant. Measured in docs/benchmarks/gateway.md ("On MetaTool")."""
    if terms <= 0:
        return weight
    unknown = min(1.0, max(0.0, (terms - known) / terms))
    return weight + (1.0 - weight) * unknown


def value_terms(query: str) -> frozenset[str]:
    """The query terms that only its argument values hold: the pieces of each
    identifier-like word (``src/app.py`` gives ``src``, ``app``, ``py``; ``ProjectX`` gives
    ``project``, ``x``) and the words of a quoted span (``'fix typo'``).

    A compound identifier kept whole (``src/app.py``, ``projectx``) is not among them, nor
    a term that a plain word of the query also gives ("commit abc123 to the app": ``app``).
    """
    flat = query[:_MAX_QUERY_CHARS]
    quoted = [w for m in _QUOTED.finditer(flat) for w in words(m.group(1))]
    rest = words(_QUOTED.sub(" ", flat))
    value_words = quoted + [w for w in rest if _VALUE_WORD.search(w)]
    plain = {t for w in rest if not _VALUE_WORD.search(w) for t in word_terms(w)}
    out: set[str] = set()
    for w in value_words:
        runs = re.findall(r"[^\W_]+", w)
        wholes = {run.casefold() for run in runs if _MULTI_PIECE.search(run)}
        if len(runs) > 1 or wholes:
            wholes.add(w.casefold())  # a compound identifier, kept whole by the analysis
        out.update(t for t in word_terms(w) if t not in wholes)
    return frozenset(out - plain)


def embedding_text(doc: ToolDoc) -> str:
    """What a tool's embedding describes: its name as words, its title, its description's
    opening (a long one's tail is mostly parameter detail)."""
    name = " ".join(re.split(r"[^A-Za-z0-9]+", _spaced(doc.name)))
    parts = (name, doc.title, doc.description[:_EMBED_DESCRIPTION_CHARS])
    return "\n".join(p.strip() for p in parts if p.strip())


def embedding_views(doc: ToolDoc) -> tuple[str, ...]:
    """The texts a contextual model embeds for one tool, its similarity the best of them:
    the whole :func:`embedding_text`, the name as words with the title, and the
    description's first sentence (what the tool does, without the parameter detail that
    dilutes a mean over a long text)."""
    name = " ".join(re.split(r"[^A-Za-z0-9]+", _spaced(doc.name))).strip()
    head = "\n".join(p for p in (name, doc.title.strip()) if p)
    first = _first_sentence(doc.description)
    return tuple(v for v in (embedding_text(doc), head, first) if v) or (doc.key,)


def _first_sentence(text: str) -> str:
    flat = " ".join(text[:_EMBED_DESCRIPTION_CHARS].split())
    end = _SENTENCE_END.search(flat)
    return flat[: end.start() + 1] if end else flat


def _initialisms(name: str) -> list[str]:
    """Initialisms of adjacent word pairs of a tool name: ``create_pull_request`` gives
    ``cp`` and ``pr``, so "PRs" finds it (a request abbreviates what the name spells)."""
    pieces = [w for w in re.split(r"[^a-z]+", _spaced(name).lower()) if len(w) > 1]
    return [a[0] + b[0] for a, b in itertools.pairwise(pieces)]


def _spaced(name: str) -> str:
    return re.sub(r"(?<=[a-z])(?=[A-Z])", " ", name)


def clauses(query: str) -> list[str]:
    """The steps of a task description: its clauses, each with enough words to rank on.

    A piece with fewer than two content words stays joined to its neighbour, as written
    ("Alice and Bob" stays one clause); one clause means the query is not split.
    """
    flat = " ".join(query[:_MAX_QUERY_CHARS].split())
    pieces = _CLAUSE_BREAK.split(flat)  # text, separator, text, ...: the group keeps them
    out: list[str] = []
    joiner = ""
    for k, piece in enumerate(pieces):
        if k % 2:
            joiner = piece
            continue
        if not piece.strip():
            continue
        if out and (_short(piece) or _short(out[-1])):
            out[-1] = f"{out[-1]}{joiner}{piece}"
        else:
            out.append(piece)
    steps = [c.strip() for c in out]
    if len(steps) <= _MAX_CLAUSES:
        return steps
    # more steps than rankings: neighbouring steps share one, so the task's last steps
    # are searched too (its first few alone would drop them)
    n = len(steps)
    bounds = [k * n // _MAX_CLAUSES for k in range(_MAX_CLAUSES + 1)]
    return [" ".join(steps[a:b]) for a, b in itertools.pairwise(bounds)]


def _short(text: str) -> bool:
    return len(analyse_query(text).words) < _MIN_CLAUSE_TERMS


def _param_text(props: Mapping[str, Any]) -> str:
    rows: list[str] = []
    for spec in props.values():
        if isinstance(spec, dict):
            rows.append(str(spec.get("description") or ""))
            enum = spec.get("enum")
            if isinstance(enum, list):
                rows.append(" ".join(str(v) for v in enum))
    return "\n".join(r for r in rows if r)


def doc_for(key: str, tool: Mapping[str, Any]) -> ToolDoc:
    """A :class:`ToolDoc` from a tool definition in wire shape (``inputSchema`` …)."""
    schema = tool.get("inputSchema") or tool.get("input_schema") or {}
    props = schema.get("properties") if isinstance(schema, dict) else None
    props = props if isinstance(props, dict) else {}
    annotations = tool.get("annotations") or {}
    title = tool.get("title") or (annotations.get("title") if isinstance(annotations, dict) else "")
    return ToolDoc(
        key=key,
        name=str(tool.get("name", "")),
        title=str(title or ""),
        description=str(tool.get("description") or ""),
        params=tuple(props),
        param_text=_param_text(props),
    )


def doc_for_item(label: str, d: DeferredItem) -> ToolDoc:
    """A :class:`ToolDoc` for a deferred resource, template or prompt (keyed by its label):
    its name and title, its description with its URI (template) and MIME type, a
    prompt's arguments as parameters."""
    item = d.item
    where = ""
    if isinstance(item, types.Resource):
        where = str(item.uri)
    elif isinstance(item, types.ResourceTemplate):
        where = item.uri_template
    mime = "" if isinstance(item, types.Prompt) else item.mime_type or ""
    args = (item.arguments or []) if isinstance(item, types.Prompt) else []
    return ToolDoc(
        key=label,
        name=item.name,
        title=item.title or "",
        description="\n".join(x for x in (item.description or "", where, mime) if x),
        params=tuple(a.name for a in args),
        param_text="\n".join(a.description or "" for a in args),
    )
