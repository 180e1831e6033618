"""Why a hit ranks where it does: what each step of the search contributed to its score.

A search asked to explain itself carries a :class:`Trace` in its
:class:`~offload.store.search.state.SearchState`; each step records its scores there
(lexical.py the BM25 of bodies and metadata, ranking.py the neighbourhood, the phrase
boost and salience x use, hybrid.py the fusion) and :func:`explanations` turns them into
one :class:`Explanation` per hit shown. Without a trace no step records anything.

The parts compose in this order (``Explanation.composed`` recomputes it):
``((lexical + neighbourhood) * phrase + 1e-6) * use``, then, when an embedding took part,
``(1 - weight) * lexical_unit + weight * semantic_unit``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from offload.core import analysis
from offload.store.models import Hit
from offload.store.search.state import ScoringPath, Trace


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why one hit ranks where it does.

    ``lexical`` is BM25 (``body`` + ``meta``) and ``lexical_rank`` its place among the
    lexical candidates (None: brought in by a neighbour or the embedding only);
    ``neighbourhood`` what the neighbourhood step added (context: the neighbourhood's
    BM25F in place of the body's own); ``phrase`` and ``use`` the factors of the phrase
    boost and of salience x use; ``similarity``/``weight``/``fused`` the embedding's part,
    when it took one. ``fields``: which of the searched terms each field holds."""

    rank: int
    entry_id: int
    ref: str
    path: str
    neighbourhood_step: str
    why: str
    direct: bool
    lexical: float
    lexical_rank: int | None
    body: float
    meta: float
    neighbourhood: float
    phrase: float
    use: float
    ranked: float  # the lexical side's final score (after a lookup's case reordering)
    similarity: float | None
    weight: float | None
    fused: float | None
    score: float
    fields: tuple[tuple[str, tuple[str, ...]], ...]

    def composed(self) -> float:
        """The lexical side's score recomputed from the parts (equal to ``ranked``
        unless a lookup's case check dealt the scores out again)."""
        return (max(0.0, (self.lexical + self.neighbourhood) * self.phrase) + 1e-6) * self.use

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready form."""
        out: dict[str, object] = {k: getattr(self, k) for k in self.__slots__}
        out["fields"] = {name: list(terms) for name, terms in self.fields}
        return out


def explanations(
    trace: Trace, hits: list[Hit], ranks: Iterable[int], terms: Iterable[str]
) -> list[Explanation]:
    """One explanation per hit of the page (``ranks``: each hit's place, 1 = first)."""
    path = trace.path or ScoringPath("", "", "")
    searched = set(terms)
    out = []
    for rank, hit in zip(ranks, hits, strict=True):
        eid = hit.entry.id
        lexical = trace.lexical.get(eid, 0.0)
        after_near = trace.neighbourhood.get(eid, lexical)
        after_phrase = trace.phrase.get(eid, after_near)
        before_use = max(0.0, after_phrase) + 1e-6
        fusion = trace.fusion
        out.append(
            Explanation(
                rank=rank,
                entry_id=eid,
                ref=hit.entry.ref,
                path=path.lexical,
                neighbourhood_step=path.neighbourhood,
                why=path.why,
                direct=eid in trace.lexical,
                lexical=lexical,
                lexical_rank=trace.lexical_rank.get(eid),
                body=trace.body.get(eid, 0.0),
                meta=trace.meta.get(eid, 0.0),
                neighbourhood=after_near - lexical,
                phrase=after_phrase / after_near if after_near else 1.0,
                use=trace.use.get(eid, before_use) / before_use,
                ranked=trace.ranked.get(eid, 0.0),
                similarity=None if fusion is None else fusion.similarity.get(eid),
                weight=None if fusion is None else fusion.weight,
                fused=None if fusion is None else hit.score,
                score=hit.score,
                fields=field_matches(hit, searched),
            )
        )
    return out


def field_matches(hit: Hit, terms: set[str]) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """Which of the searched ``terms`` each of the hit's fields holds (fields holding
    none are left out), in the index's analysis of the field's text."""
    e = hit.entry
    fields = (
        ("topic", e.topic),
        ("summary", e.summary),
        ("tags", " ".join(e.tags)),
        ("labels", " ".join(e.labels)),
        ("source", e.source),
        ("body", hit.text),
    )
    out = []
    for name, text in fields:
        held = sorted(terms & set(analysis.index_terms(text))) if text else []
        if held:
            out.append((name, tuple(held)))
    return tuple(out)
