"""``Sections``: budgets applied to named context sections, originals kept in the store.

A section that fits passes unchanged. One over budget is replaced by a compressed form
(extractive, or the local model's when ``[local_model] base_url`` is set) headed by a line
that advertises the stable reference ``ctx:sha256:<sha256 of the original>``; the original
is stored with an expiry (``[sections] ttl_days``) and a hint on how to regenerate it.

Sync and async: :meth:`Sections.build` is synchronous and extractive only unless a local
model is configured, in which case it runs :meth:`Sections.abuild` through ``anyio.run``
(so call ``await abuild(...)`` from inside an event loop). Model outputs are remembered in
the store per (original, model, budget), so the same input gives the same bytes on every
turn and in every process even though a model is not bit-for-bit reproducible.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from offload.config import Settings
from offload.core.hashing import ctx_ref, text_hash
from offload.core.text.gist import gist
from offload.core.text.markdown import ends_inside_fence
from offload.core.tokens import TokenCounter, default_counter
from offload.errors import InvalidInput, ReferenceError_, UpstreamError
from offload.llm.embedding import load_embedder
from offload.sections.compress import Budget, advertise, extractive
from offload.sections.cut import CutResult, plan_cut
from offload.sections.retrieve import Retriever
from offload.store.models import Entry, PutResult
from offload.store.store import Store

__all__ = ["BuiltSection", "Section", "Sections", "join"]

Method = Literal["unchanged", "extractive", "model"]
_MODEL_STATE = "sections.model"
_SUMMARY_CHARS = 200


@dataclass(frozen=True)
class Section:
    """One named section of a context prompt and its budget.

    ``max_tokens`` and/or ``max_chars`` bound it (neither: it always passes unchanged).
    ``regenerate`` is shown when the stored original has expired; by default it says to
    re-run the section builder for this name. ``source`` is recorded with the original
    (a file path, a command).
    """

    name: str
    text: str
    max_tokens: int | None = None
    max_chars: int | None = None
    regenerate: str = ""
    source: str = ""

    def budget(self) -> Budget | None:
        """The section's budget, or None when it has no limit."""
        if self.max_tokens is None and self.max_chars is None:
            return None
        return Budget(self.max_tokens, self.max_chars)


@dataclass(frozen=True)
class BuiltSection:
    """A section as it goes into the prompt.

    ``text`` is the original when it fit, else the advertise line, a blank line and the
    compressed form. ``reference`` (``ctx:sha256:<64 hex>``) names the stored original and
    is set only when compressed. ``note`` says why a model compression was not used.
    """

    name: str
    text: str
    method: Method
    original_tokens: int
    tokens: int
    reference: str | None = None
    expires: float | None = None
    note: str = ""

    @property
    def compressed(self) -> bool:
        """True when the prompt holds a compressed form, not the original."""
        return self.method != "unchanged"


def join(built: Iterable[BuiltSection], heading: str = "## {name}") -> str:
    """The sections as one prompt: each under ``heading`` (``""``: no heading), blank-line separated."""
    parts: list[str] = []
    for section in built:
        head = heading.format(name=section.name) if heading else ""
        parts.append(f"{head}\n\n{section.text}" if head else section.text)
    return "\n\n".join(parts) + ("\n" if parts else "")


class Sections:
    """Builds budgeted sections and keeps every original retrievable.

    ``settings`` default to :class:`offload.config.Settings` defaults (nothing reads the
    environment here; build settings at your edge with ``offload.config.load_settings``).
    Pass ``store`` to share an open store; otherwise the one ``settings`` name is opened
    on first use and closed by :meth:`close`.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        store: Store | None = None,
        counter: TokenCounter | None = None,
        scope: str = "",
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings or Settings()
        self._store = store
        self._owns_store = store is None
        self.counter = counter or (store.counter if store is not None else default_counter())
        self.scope = scope
        self.clock = clock
        if self.settings.sections.ttl_days <= 0:
            raise InvalidInput("[sections] ttl_days must be positive")

    @property
    def store(self) -> Store:
        """The store holding originals (opened on first use)."""
        if self._store is None:
            embedder = load_embedder(self.settings.search)
            self._store = Store.open(
                self.settings, counter=self.counter, clock=self.clock, embedder=embedder
            )
        return self._store

    @property
    def tool_name(self) -> str:
        """The retrieve tool's name (``[sections] retrieve_tool``)."""
        return self.settings.sections.retrieve_tool

    @property
    def model_configured(self) -> bool:
        """True when over-budget sections go to the local model first."""
        return bool(self.settings.local_model.base_url)

    def close(self) -> None:
        """Close the store if this object opened it."""
        if self._owns_store and self._store is not None:
            self._store.close()
            self._store = None

    def __enter__(self) -> Sections:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- building -------------------------------------------------------------------------

    def build(self, sections: Sequence[Section] | Mapping[str, Section]) -> list[BuiltSection]:
        """Apply every section's budget (see the module doc for sync vs async)."""
        items = _as_list(sections)
        if self.model_configured:
            import anyio

            async def go() -> list[BuiltSection]:
                return await self.abuild(items)

            return anyio.run(go)
        return [self._build_one(s, None) for s in items]

    def section(
        self,
        name: str,
        text: str,
        *,
        max_tokens: int | None = None,
        max_chars: int | None = None,
        regenerate: str = "",
        source: str = "",
    ) -> BuiltSection:
        """Build one section (a shortcut for ``build([Section(...)])[0]``)."""
        return self.build([Section(name, text, max_tokens, max_chars, regenerate, source)])[0]

    async def abuild(
        self, sections: Sequence[Section] | Mapping[str, Section]
    ) -> list[BuiltSection]:
        """Like :meth:`build`, using the local model when one is configured."""
        items = _as_list(sections)
        if not self.model_configured:
            return [self._build_one(s, None) for s in items]
        from offload.llm.local_model import LocalModel

        out: list[BuiltSection] = []
        model_settings = self.settings.local_model
        for s in items:
            budget = s.budget()
            if budget is None or budget.fits(s.text, self.counter):
                out.append(self._build_one(s, None))
                continue
            body_budget = self._body_budget(s, budget)
            key = f"{text_hash(s.text)}:{model_settings.model}:{_budget_key(body_budget)}"
            # Remembered per (original, model, budget): the model's text, or the reason it
            # is not usable, so later turns neither flip forms nor call the model again.
            saved = self.store.get_state(_MODEL_STATE, key)
            model_text = saved.get("text") if isinstance(saved, dict) else None
            note = str(saved.get("fallback", "")) if isinstance(saved, dict) else ""
            if saved is None:
                target = body_budget.max_tokens or max(16, (body_budget.max_chars or 64) // 4)
                tuned = dataclasses.replace(model_settings, compress_target_tokens=target)
                try:
                    async with LocalModel(tuned, counter=self.counter) as model:
                        result = await model.compress(s.text)
                except UpstreamError as exc:
                    # A prompt must still be built when the model is down: fall back, and
                    # try the model again next time (not remembered).
                    note = f"local model failed ({exc}); used the extractive form"
                    result = None
                if result is not None:
                    if result.kept_raw:
                        note = f"local model: {result.reason}; used the extractive form"
                    elif not body_budget.fits(result.text.strip(), self.counter):
                        note = "local model output was over budget; used the extractive form"
                    elif ends_inside_fence(result.text) and not ends_inside_fence(s.text):
                        # it would swallow the sections after it
                        note = "local model output left a code fence open; used the extractive form"
                    else:
                        model_text = result.text.strip()
                    self.store.put_state(
                        _MODEL_STATE,
                        key,
                        {"text": model_text} if model_text is not None else {"fallback": note},
                    )
            out.append(
                self._build_one(s, model_text if isinstance(model_text, str) else None, note)
            )
        return out

    def _body_budget(self, s: Section, budget: Budget) -> Budget:
        digest = text_hash(s.text)
        n = self.counter.count(s.text)
        # The advertise line with the original count as a stand-in (as many digits or more).
        line = advertise(s.name, n, n, ctx_ref(digest), self.tool_name) + "\n\n"
        body = budget.shrink(self.counter.count(line), len(line))
        if body is None:
            raise InvalidInput(
                f"section {s.name!r}: the budget cannot hold even the line advertising its "
                f"reference ({self.counter.count(line)} tokens, {len(line)} characters); "
                "raise it"
            )
        return body

    def _build_one(self, s: Section, model_text: str | None, note: str = "") -> BuiltSection:
        if not isinstance(s.name, str) or not s.name.strip():
            raise InvalidInput("a section needs a non-empty name")
        if not isinstance(s.text, str):
            raise InvalidInput(f"section {s.name!r}: text must be a string")
        budget = s.budget()
        n = self.counter.count(s.text)
        if budget is None or budget.fits(s.text, self.counter):
            return BuiltSection(s.name, s.text, "unchanged", n, n)
        body_budget = self._body_budget(s, budget)
        reference = ctx_ref(text_hash(s.text))
        method: Method = "model" if model_text is not None else "extractive"
        for _ in range(4):
            body = (
                model_text
                if model_text is not None
                else extractive(s.text, body_budget, self.counter)
            )
            line = advertise(s.name, n, self.counter.count(body), reference, self.tool_name)
            text = f"{line}\n\n{body}" if body else line
            if budget.fits(text, self.counter):
                break
            # The real line came out longer than its stand-in (rare): give the body less.
            shrunk = body_budget.shrink(1, 1)
            if shrunk is None:
                break
            body_budget, model_text, method = shrunk, None, "extractive"
        entry = self.keep(s.text, name=s.name, regenerate=s.regenerate, source=s.source)
        return BuiltSection(
            s.name,
            text,
            method,
            n,
            self.counter.count(text),
            reference,
            entry.expires,
            note,
        )

    def cut(
        self,
        text: str,
        *,
        max_chars: int | None = None,
        max_tokens: int | None = None,
        name: str = "cut text",
        regenerate: str = "",
        source: str = "",
    ) -> CutResult:
        """The head of ``text`` within the limit plus a marker referencing the whole original.

        ``text`` passes unchanged when it fits; otherwise the original is stored (with the
        section TTL) under ``ctx:sha256:<sha256 of text>``. See :mod:`offload.sections.cut`.
        """
        if not isinstance(text, str):
            raise InvalidInput("cut needs a string")
        budget = Budget(max_tokens, max_chars)
        reference = ctx_ref(text_hash(text))
        result = plan_cut(text, budget, reference, self.tool_name, self.counter)
        if not result.was_cut:
            return result
        entry = self.keep(text, name=name, regenerate=regenerate, source=source)
        return dataclasses.replace(result, expires=entry.expires)

    def retriever(self) -> Retriever:
        """The retrieve tool's handler over this object's store (named ``tool_name``)."""
        return Retriever(self.store, name=self.tool_name, scope=self.scope)

    # -- storing --------------------------------------------------------------------------

    def keep(self, text: str, *, name: str, regenerate: str = "", source: str = "") -> Entry:
        """Store ``text`` with the section TTL; its reference is ``ctx:sha256:<sha256>``.

        Storing the same text again returns the same entry. An entry already past its expiry
        is archived first, so the reference being advertised again is live again.
        """
        now = self.clock()
        expires = now + self.settings.sections.ttl_days * 86400.0
        hint = regenerate or f're-run the section builder for "{name}"'

        def put() -> PutResult:
            return self.store.put(
                text,
                kind="section",
                topic=name,
                summary=gist(text, max_chars=_SUMMARY_CHARS),
                source=source or f"section:{name}",
                scope=self.scope,
                expires=expires,
                regenerate=hint,
            )

        result = put()
        entry = result.entry
        if not result.created and entry.expires is not None and entry.expires <= now:
            # archives it; Gone, or another scope's live twin (OtherScope), is expected
            with contextlib.suppress(ReferenceError_):
                self.store.resolve(entry.full_ref, scope=self.scope)
            entry = put().entry
        return entry


def _as_list(sections: Sequence[Section] | Mapping[str, Section]) -> list[Section]:
    items = list(sections.values()) if isinstance(sections, Mapping) else list(sections)
    names = [s.name for s in items]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise InvalidInput(f"section names must be unique; repeated: {', '.join(dupes)}")
    return items


def _budget_key(budget: Budget) -> str:
    return f"t{budget.max_tokens or 0}c{budget.max_chars or 0}"
