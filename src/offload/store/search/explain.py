"""Why a hit ranks where it does: what each step of the search contributed to its score.

A search asked to explain itself carries a :class:`~offload.store.search.state.Trace` in
its :class:`~offload.store.search.state.SearchState`; each step records its scores there
(lexical.py the BM25 of bodies and metadata, ranking.py the neighbourhood, the phrase
boost, salience x use and the time preference, hybrid.py the fusion) and :func:`explanations` turns them into
one :class:`Explanation` per hit shown. Without a trace no step records anything.

The parts compose in this order (``Explanation.composed`` recomputes it):
``((lexical + neighbourhood) * phrase + 1e-6) * use * time``, then, when an embedding took part,
``(1 - weight) * lexical_unit + weight * semantic_unit``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from offload.core.text import analysis, timeexpr
from offload.store.models import Hit
from offload.store.search.state import ScoringPath, Trace


@dataclass(frozen=True, slots=True)
class Explanation:
    """Why one hit ranks where it does.

        ``lexical`` is BM25 (``body`` + ``meta``) and ``lexical_rank`` its place among the
        lexical candidates (None: brought in by a neighbour or the embedding only);
        ``neighbourhood`` what the neighbourhood step added (context: the neighbourhood's
        BM25F in place of the body's own); ``phrase`` and ``use`` the factors of the phrase
        boost and of salience x use; ``time`` the factor of the time preference (1: the query
    names no date, or the entry lies far from it) and ``when`` the entry's time it read
    (its event time, else when it was stored; None: not read); ``similarity``/``weight``/``fused`` the embedding's part,
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
    time: float
    when: float | None
    ranked: float  # the lexical side's final score (after a lookup's case reordering)
    similarity: float | None
    weight: float | None
    lexical_unit: float | None  # ``ranked`` mapped to [0, 1] as the fusion weighs it
    semantic_unit: float | None  # ``similarity`` mapped to [0, 1] likewise
    fused: float | None
    score: float
    fields: tuple[tuple[str, tuple[str, ...]], ...]

    @property
    def case_checked(self) -> bool:
        """Whether a lookup's case check moved this hit (its lexical score is then the
        place's, dealt out again, not :meth:`composed`)."""
        composed = self.composed()
        return abs(composed - self.ranked) > 1e-9 * max(1.0, abs(composed))

    def composed(self) -> float:
        """The lexical side's score recomputed from the parts (equal to ``ranked``
        unless a lookup's case check dealt the scores out again)."""
        near = (max(0.0, (self.lexical + self.neighbourhood) * self.phrase) + 1e-6) * self.use
        return near * self.time

    def fused_again(self) -> float | None:
        """The fused score recomputed from the two sides' shares (None: no embedding)."""
        if self.weight is None:
            return None
        lexical, semantic = self.lexical_unit or 0.0, self.semantic_unit or 0.0
        return (1.0 - self.weight) * lexical + self.weight * semantic

    def as_dict(self) -> dict[str, object]:
        """A JSON-ready form."""
        out: dict[str, object] = {k: getattr(self, k) for k in self.__slots__}
        out["fields"] = {name: list(terms) for name, terms in self.fields}
        out["case_checked"] = self.case_checked
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
                time=trace.time.get(eid, 1.0),
                when=hit.entry.when if eid in trace.time else None,
                ranked=trace.ranked.get(eid, 0.0),
                similarity=None if fusion is None else fusion.similarity.get(eid),
                weight=None if fusion is None else fusion.weight,
                lexical_unit=None if fusion is None else fusion.lexical_unit.get(eid),
                semantic_unit=None if fusion is None else fusion.semantic_unit.get(eid),
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


def path_line(e: Explanation) -> str:
    """The path that scored a search's hits, and why, as one line (the same for every hit
    of one search: shown once above them)."""
    return f"path: {e.path}, then {e.neighbourhood_step}: {e.why}"


def explanation_lines(e: Explanation, clean: Callable[[str], str]) -> list[str]:
    """``e``'s parts as a few indented lines of text (its path: :func:`path_line`);
    ``clean`` makes each matched term safe for where the lines go (a terminal, a model),
    the terms being read from stored fields."""
    if e.lexical_rank is None:
        found = "matched nothing itself: brought in by a neighbour or the embedding"
    else:
        found = f"lexical rank {e.lexical_rank}"
    out = [
        f"  lexical {e.lexical:.4g} = body {e.body:.4g} + metadata {e.meta:.4g} ({found})",
        f"  neighbourhood {e.neighbourhood:+.4g}, phrase x{e.phrase:.4g}, "
        f"salience and use x{e.use:.4g}"
        + ("" if e.when is None else f", time x{e.time:.4g} ({timeexpr.iso_day(e.when)})")
        + f" -> {e.ranked:.4g}",
    ]
    if e.direct and e.case_checked:
        out.append(
            f"  case check: {e.composed():.4g} before; a lookup's hits holding its words as "
            "written go above those holding them in another case"
        )
    if e.fused is not None:
        sim = "none" if e.similarity is None else f"{e.similarity:.4g}"
        out.append(
            f"  fused {e.fused:.4g} = lexical {e.lexical_unit or 0.0:.3g} x {1 - (e.weight or 0.0):.3g}"
            f" + semantic {e.semantic_unit or 0.0:.3g} x {e.weight or 0.0:.3g} "
            f"(similarity {sim})"
        )
    if e.fields:
        held = "; ".join(f"{name} [{', '.join(map(clean, terms))}]" for name, terms in e.fields)
        out.append(f"  terms matched: {held}")
    return out
