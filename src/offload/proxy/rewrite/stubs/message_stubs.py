"""The proxy's stubs on the wire: message stubs for bulky messages and range stubs for
paged-out runs of messages (:mod:`offload.proxy.rewrite.stubs.expand` turns a wire back into
the client's messages). (:mod:`offload.core.stubs` renders the stub text; this module decides what a
message's stub says, stores what it replaces and counts it.)

A *stubbed* message keeps its role and every field but ``content`` (a ``tool`` message
keeps ``tool_call_id`` and ``name``; an assistant keeps its ``tool_calls``, whose bulky
arguments have stubs of their own: :mod:`offload.proxy.rewrite.call_args`); its content
becomes a stub naming ``ctx:sha256:<hex>`` of the original content, which the store holds
byte for byte (a list of parts is stored as its canonical JSON).

A *range stub* stands in for a run of whole groups paged out of the middle of the
conversation. Each page-out stores one entry (a "part"), labelled
``proxy:<session>:<first>-<last>``: its content is a JSON document holding the newly paged
messages exactly as the client sent them, together with those of the parts just before it
while the whole stays within ``MERGE_BYTES`` (so a long range reads back in a few large
parts), plus a pointer to the part before it (what the stub's reference names, restored
byte for byte), its body a readable transcript of those
messages (what ``read`` shows; :mod:`offload.proxy.rewrite.transcript`), with a topic and a
summary (the task, the tools, the files). Search indexes a part's transcript only from its
newly paged messages on: the parts it takes in hold the rest, indexed already, so each
paged message is found once, not once per later part that repeats it. The stub names the newest part, so
the whole range is retrievable part by part, newest first, and carries a contents list
(the tool calls the part holds, with their transcript lines) and the exact read and
search calls.

Everything here is deterministic: the same content and settings give the same stub bytes.
Work is cached per content hash (count, gist, store write happen once per content).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence

from offload.core.hashing import CTX_PREFIX, short_ref, text_hash
from offload.core.lru import MISSING, Lru
from offload.core.stubs import StubInfo, is_stub, render_stub, says_estimated
from offload.core.text import delta as near
from offload.core.text.chunking import count_lines
from offload.core.text.gist import gist
from offload.core.text.preview import TocEntry
from offload.core.tokens import MESSAGE_OVERHEAD, Measured, MeasuringCounter, TokenCounter
from offload.core.untrusted import inline
from offload.errors import OffloadError, ReferenceError_
from offload.proxy.rewrite import transcript
from offload.proxy.rewrite.messages import (
    Message,
    calls_text,
    content_text,
    message_tokens,
    range_role,
    source_of,
)
from offload.proxy.rewrite.stubs import pieces
from offload.proxy.rewrite.stubs.parts import (
    DELTA_CANDIDATES,
    DELTA_LOOKBACK,
    MERGE_BYTES,
    PARTS_NOTE,
    PROXY_READ,
    RANGE_CONTENTS,
    RANGE_GIST_CHARS,
    STUB_GIST_CHARS,
    Earlier,
    MessageStub,
    PartMeta,
    RangePart,
    RangeStub,
    range_read_call,
    range_search_call,
    read_call,
)
from offload.proxy.rewrite.stubs.writes import Writes
from offload.store.store import Store

# asked, only when a content is stored, when what it tells happened (None: not known)
EventTime = Callable[[], float | None] | None


class StubMaker:
    """Counts, stubs and stores message contents, once per content hash (thread-safe)."""

    def __init__(
        self,
        store: Store,
        counter: TokenCounter,
        *,
        scope: str,
        cache_size: int = 16384,
        proxy_tools: bool = True,
        deltas: bool = True,
        writes: Writes | None = None,
    ) -> None:
        self.store = store
        # where stores go once the stub is made (None: written before the call returns)
        self.writes = writes
        self.counter = counter
        self.scope = scope
        # whether stubs name the proxy's own memory tools (off: only the MCP tools and CLI
        # the client can call itself)
        self.proxy_tools = proxy_tools
        # near duplicates of an earlier body get a stub naming it and the changed lines
        self.deltas = deltas
        self._shapes = near.Shapes()
        # (plain stub, candidates' digests) -> the delta stub, None when there is none
        self._near: Lru[tuple[str, tuple[str, ...]], MessageStub | None] = Lru(cache_size)
        self._tokens: Lru[str, int] = Lru(cache_size)  # key: content itself (short) / hash
        # contents whose count is an estimate standing in for an exact one (the upstream's
        # /tokenize paused): kept as counted, never counted again while this process holds
        # them, so a stub that says so says it on every later turn (an exact count later
        # would change its bytes, and the upstream's cached prefix with them). Apart from
        # the exact counts, so that their traffic and a quiet proxy's shrinking keep these.
        self._estimates: Lru[str, int] = Lru(cache_size)
        measure = counter.measure if isinstance(counter, MeasuringCounter) else None
        self._measure: Callable[[str], Measured] | None = measure
        self._stubs: Lru[tuple[str, str, str], MessageStub] = Lru(cache_size)
        self._stored: Lru[str, bool] = Lru(cache_size)
        self._parts: Lru[str, PartMeta] = Lru(cache_size)
        self._pieces = pieces.PieceCache()
        # a content's gist by its hash: a big message's stub is rendered again when the
        # tool naming changes, and its stored summary is the same gist
        self._gists: Lru[str, str] = Lru(cache_size)
        self._lock = threading.Lock()  # the tool naming and the stubs made with it

    def shrink_caches(self, share: int) -> None:
        """Keep the newest 1/``share`` of each cache's bound (a quiet proxy: the counts
        and stubs of the live sessions' last turns stay, the rest is made again when met)."""
        caches = (self._near, self._tokens, self._stubs, self._stored, self._parts)
        for cache in (*caches, self._gists):
            cache.shrink(cache.bound // share)
        self._pieces.shrink(self._pieces.max_chars // share)
        self._shapes.shrink(self._shapes.max_bytes // share)

    def name_proxy_tools(self, on: bool) -> None:
        """Whether stubs made from now on name the proxy's own tools (the stubs cached
        with the other naming are dropped)."""
        with self._lock:
            if on != self.proxy_tools:
                self.proxy_tools = on
                self._stubs.clear()
                self._near.clear()

    # -- counting --------------------------------------------------------------------------

    def content_tokens(self, text: str) -> int:
        """Tokens of ``text``, cached per content."""
        return self.content_measure(text).tokens

    def content_measure(self, text: str) -> Measured:
        """Tokens of ``text`` and whether they are an estimate standing in for an exact
        count, cached per content (the first count of a content is the one it keeps)."""
        if not text:
            return Measured(0, False)
        # Short texts key by themselves (cheaper than hashing); long ones by their hash.
        key = text if len(text) <= 256 else text_hash(text)
        hit = self._tokens.get(key)
        if hit is not None:
            return Measured(hit, False)
        if self._measure is not None:
            estimate = self._estimates.get(key)
            if estimate is not None:
                return Measured(estimate, True)
            made = self._measure(text)
            (self._estimates if made.estimated else self._tokens).put(key, made.tokens)
            return made
        n = self.counter.count(text)
        self._tokens.put(key, n)
        return Measured(n, False)

    def tokens(self, msg: Message) -> int:
        """Wire tokens of ``msg`` as it is (as :func:`message_tokens` counts them, each
        text's count cached per content)."""
        calls = calls_text(msg)
        n = self.content_tokens(content_text(msg)) + MESSAGE_OVERHEAD
        return n + self.content_tokens(calls) if calls else n

    def estimated(self, msg: Message) -> bool:
        """Whether a count in :meth:`tokens` of ``msg`` is an estimate standing in for an
        exact one (asked only once this process has made such a count)."""
        if not self._estimates:
            return False
        return any(
            (text if len(text) <= 256 else text_hash(text)) in self._estimates
            for text in (content_text(msg), calls_text(msg))
            if text
        )

    def gist(self, text: str, digest: str) -> str:
        """The stub gist of ``text`` (whose hash is ``digest``), computed once per content."""
        hit = self._gists.get(digest)
        if hit is not None:
            return hit
        made = gist(text, STUB_GIST_CHARS)
        self._gists.put(digest, made)
        return made

    # -- per-message stubs -------------------------------------------------------------------

    def message_stub(self, msg: Message, source: str) -> MessageStub:
        """The stub of ``msg``'s content (nothing is stored yet)."""
        text = content_text(msg)
        kind = "tool output" if msg["role"] in ("tool", "function") else f"{msg['role']} message"
        if isinstance(msg.get("content"), list):
            kind = f"{kind} {PARTS_NOTE}"
        key = (text_hash(text), kind, source)
        hit = self._stubs.get(key)
        if hit is not None:
            return hit
        tokens, estimated = self.content_measure(text)
        info = StubInfo(
            ref=short_ref(key[0]),
            kind=kind,
            source=source,
            tokens=tokens,
            lines=count_lines(text),
            nbytes=len(text.encode("utf-8", "surrogatepass")),
            gist=self.gist(text, key[0]),
            estimated=estimated,
        )
        stub = render_stub(info, read_call(info.ref, self.proxy_tools))
        made = MessageStub(key[0], tokens, stub, self.counter.count(stub))
        self._stubs.put(key, made)
        return made

    def with_ends(self, made: MessageStub, text: str, budget: int) -> MessageStub:
        """``made`` followed by the first and last lines of ``text`` (about ``budget``
        tokens of them, half each) and the exact call that reads the lines between; as
        it is when nothing fits (one line longer than the budget is cut by characters)."""
        half = max(0, budget) * 2  # characters each side, at ~4 characters a token
        lines = text.split("\n")
        head = _fitting(lines, half)
        tail = _fitting(lines[len(head) :][::-1], half)[::-1]
        hidden = len(lines) - len(head) - len(tail)
        tool = PROXY_READ if self.proxy_tools else "read"
        ref = short_ref(made.digest)
        if len(lines) == 1 and len(text) > 2 * half and half:
            shown = [
                text[:half],
                f'[… {len(text) - 2 * half:,} characters not shown: {tool}(ref="{ref}")]',
                text[-half:],
            ]
        elif hidden > 0 and (head or tail):
            shown = [
                *head,
                f'[… {hidden:,} lines not shown: {tool}(ref="{ref}", offset={len(head) + 1})]',
                *tail,
            ]
        else:
            return made
        stub = made.stub + "\nits first and last lines:\n" + "\n".join(shown)
        return MessageStub(made.digest, made.tokens, stub, self.counter.count(stub))

    def worth_stubbing(
        self,
        msg: Message,
        source: str,
        threshold: int,
        *,
        gain: float = 2.0,
        earlier: Earlier | None = None,
    ) -> MessageStub | None:
        """The stub when ``msg`` is bulky (content over ``threshold`` tokens) and its stub
        is at least ``gain`` times smaller; stubs are never stubbed again. With ``earlier``
        a near duplicate of an earlier body there gets a delta stub (:meth:`delta_stub`)."""
        text = content_text(msg)
        if not text or is_stub(text):
            return None
        tokens = self.content_tokens(text)
        if tokens <= threshold:
            return None
        made = self.message_stub(msg, source)
        if earlier is not None and self.deltas and isinstance(msg.get("content"), str):
            delta = self.delta_stub(made, text, earlier)
            if delta is not None and delta.stub_tokens * gain <= tokens:
                return delta
        return made if made.stub_tokens * gain <= tokens else None

    def delta_stub(self, made: MessageStub, text: str, earlier: Earlier) -> MessageStub | None:
        """``made`` (the stub of ``text``) saying instead which earlier body ``text``
        repeats and its changed lines, when it is a near duplicate of one of the messages
        just before it (:data:`DELTA_LOOKBACK`, :data:`DELTA_CANDIDATES`); the earlier body
        is stored with the stub (:meth:`stubbed`) so its reference reads. None when there
        is no near duplicate.

        A function of the messages alone, like every stub: the same conversation gives
        the same bytes in any process."""
        new = self._shapes.get(text)
        if new is None:
            return None
        found: list[tuple[near.Shape, int]] = []
        lo, hi = near.MIN_SHARED * len(text), len(text) / near.MIN_SHARED
        for j in range(earlier.end - 1, max(0, earlier.end - DELTA_LOOKBACK) - 1, -1):
            other = earlier.messages[j].get("content")
            if not isinstance(other, str) or not lo <= len(other) <= hi or is_stub(other):
                continue
            shaped = self._shapes.get(other)
            if shaped is not None:
                found.append((shaped, j))
                if len(found) == DELTA_CANDIDATES:
                    break
        if not found:
            return None
        key = (made.stub, tuple(s.digest for s, _ in found))
        known = self._near.get(key, MISSING)
        if known is not MISSING:
            return known
        pick = near.nearest(new, [s for s, _ in found])
        delta = None if pick is None else near.delta(found[pick][0].text, text)
        out = None
        if pick is not None and delta is not None:
            base, at = found[pick]
            out = self._render_delta(made, text, base, _what(earlier.messages, at), delta)
        self._near.put(key, out)
        return out

    def _render_delta(
        self, made: MessageStub, text: str, base: near.Shape, what: str, delta: near.Delta
    ) -> MessageStub | None:
        """The delta stub: ``made``'s header, the earlier body it repeats (``what`` it
        was) and the changed lines in place of the gist and contents, and the call that
        reads the whole; None when no such stub costs at most what ``made`` costs.

        It says more than the gist in no more room: the changed lines take at most an
        eighth of the body, the removed ones are left out when the stub would otherwise
        cost more than ``made``, then fewer new lines are shown: half, a quarter, only
        the first hunk's header (five tries at most, each render bounded by its limit)."""
        rows = made.stub.split("\n")
        kept = [r for r in rows[1:] if not r.startswith(("gist: ", "contents:"))]
        said = f"same as the {what} {short_ref(base.digest)} except:"
        limit = min(near.SHOWN_CHARS, len(text) // 8)
        tries = (
            (limit, True),
            (limit, False),
            (limit // 2, False),
            (limit // 4, False),
            (0, False),
        )
        for chars, removed in tries:
            shown = near.render(delta, base.text, text, chars, removed)
            stub = "\n".join([rows[0], said, *shown, *kept])
            tokens = self.counter.count(stub)
            if tokens <= made.stub_tokens:
                return MessageStub(made.digest, made.tokens, stub, tokens, base.digest)
        return None

    def stubbed(
        self,
        msg: Message,
        made: MessageStub,
        source: str = "",
        earlier: Earlier | None = None,
        when: EventTime = None,
    ) -> Message:
        """``msg`` with its content replaced by the stub, the content stored first (with a
        topic naming its role, tool and call id; ``when``: asked, only when the content is
        stored, when what it tells happened: core/text/timeexpr.py ``conversation_time``); for a
        delta stub, the earlier body it names too (found in ``earlier``)."""
        text = content_text(msg)
        known = made.digest in self._stored
        base_known = not made.base or made.base in self._stored
        if not base_known and earlier is not None:
            self._store_base(made.base, earlier)
        if not known:
            topic, summary = _message_topic(msg, source, text, self.gist(text, made.digest))
            self.ensure_stored(
                text,
                made.digest,
                source="proxy",
                topic=topic,
                summary=summary,
                event_time=when,
                tokens=lambda: made.tokens,  # the count its stub states, not another estimate
            )
        out = dict(msg)
        out["content"] = made.stub
        return out

    def _store_base(self, digest: str, earlier: Earlier) -> None:
        """Store the earlier message whose content has ``digest`` (a delta stub's base)."""
        for j in range(earlier.end - 1, max(0, earlier.end - DELTA_LOOKBACK) - 1, -1):
            msg = earlier.messages[j]
            other = msg.get("content")
            shaped = self._shapes.get(other) if isinstance(other, str) else None
            if shaped is not None and shaped.digest == digest:
                source = source_of(earlier.messages, j)
                topic, summary = _message_topic(
                    msg, source, shaped.text, self.gist(shaped.text, digest)
                )
                self.ensure_stored(
                    shaped.text, digest, source="proxy", topic=topic, summary=summary
                )
                return

    def ensure_stored(
        self,
        text: str,
        digest: str,
        *,
        source: str,
        label: str | None = None,
        body: str | None = None,
        topic: str = "",
        summary: str = "",
        index_from_line: int = 1,
        event_time: EventTime = None,
        tokens: Callable[[], int] | None = None,
    ) -> None:
        """Persist ``text`` in this scope unless this process already knows it is stored
        (``body``: what to index and show instead, from ``index_from_line`` on; ``text``
        stays the restorable original; ``event_time``: asked when what it tells happened;
        ``tokens``: asked, only when it is stored, for the stored body's token count).
        With a writer (``writes``) the write runs there, after the call returns: the stub
        names the content by its hash, so nothing on the wire waits for it."""
        if self._stored.get(digest):
            return
        self._stored.put(digest, True)

        def write() -> None:
            try:
                # stored under another scope only (an older proxy's): store it here too,
                # so the project's own search finds it
                known = self.store.resolve(CTX_PREFIX + digest, self.scope).scope == self.scope
            except ReferenceError_:  # missing, or forgotten since: store it (again)
                known = False
            if not known or label is not None:
                self.store.put(
                    text,
                    kind="proxy",
                    source=source,
                    scope=self.scope,
                    label=label,
                    body=body,
                    topic=topic,
                    summary=summary,
                    index_from_line=index_from_line,
                    event_time=event_time() if event_time is not None else None,
                    tokens=tokens() if tokens is not None else None,
                )

        if self.writes is not None:
            self.writes.submit(digest, write)
            return
        try:
            write()
        except BaseException:
            self._stored.pop(digest)
            raise

    def unstored(self, digest: str) -> None:
        """Forget that ``digest`` is stored (its write failed): the next stub of it
        stores it again."""
        self._stored.pop(digest)

    # -- range stubs ---------------------------------------------------------------------------

    def page_out(
        self, session: str, stub: RangeStub, part: RangePart, when: EventTime = None
    ) -> RangeStub:
        """Store a part rendered by :meth:`render_range` and return its stub (``when``:
        asked when what the part tells happened)."""
        digest = stub.ref[len(CTX_PREFIX) :]
        self.ensure_stored(
            part.body,
            digest,
            source=f"proxy:{session}",
            label=stub.label,
            body=part.transcript,
            topic=part.topic,
            summary=part.summary,
            index_from_line=part.index_from_line,
            event_time=when,
            tokens=lambda: part.tokens(self.store.counter),
        )
        self._pieces.forget_before(session, part.first)
        return stub

    def render_range(
        self,
        session: str,
        messages: Sequence[Message],
        first: int,
        start: int,
        end: int,
        previous: RangeStub | None,
        paged_tokens: int,
        detail: float = 1.0,
    ) -> tuple[RangeStub, RangePart]:
        """The stub for the range ``[first, end)`` and the body of its newest part:
        messages ``[start, end)`` and those of the parts before it that it takes in
        (``previous`` covers ``[first, start)``); nothing is stored until :meth:`page_out`.
        ``detail`` (0 to 1) scales its gist and contents list down (a small window)."""
        paged0 = start
        added = self._pieces.run(session, messages, start, end)
        start, earlier_ref = self._merge_start(start, added, previous)
        made = self._pieces.run(session, messages, start, paged0) + added
        body = pieces.part_json(session, start, end - 1, [r.json for r in made], earlier_ref)
        digest = text_hash(body)
        self._remember(
            CTX_PREFIX + digest, PartMeta(start, end - 1, earlier_ref, _json_bytes(body))
        )
        label = f"proxy:{session}:{first}-{end - 1}"
        earlier = f"; the part before: {earlier_ref}" if earlier_ref is not None else ""
        title = f"# conversation {session}, messages #{start}-#{end - 1}{earlier}"
        rendered = transcript.join([r.piece for r in made], title)
        topic, summary = _range_topic(messages, first, start, end, made)
        # the gist and the contents list are of what this page-out adds
        new_from = rendered.lines[paged0 - start] if paged0 - start < len(rendered.lines) else 0
        # its size sums the paged messages' counts: an estimate if one of them is (said by
        # the range stub before it, or counted so among those this page-out adds)
        estimated = self._range_estimated(previous, messages[paged0:end])
        text = _range_text(
            StubInfo(
                ref=short_ref(digest),
                kind=f"{end - first} earlier messages",
                source=f"this conversation, #{first}-#{end - 1} ({_role_mix(messages[first:end])})",
                tokens=paged_tokens,
                lines=count_lines(rendered.text),
                nbytes=len(body.encode("utf-8", "surrogatepass")),
                gist=_added_gist(messages[paged0:end], int(RANGE_GIST_CHARS * detail)),
                toc=_added_contents(rendered, new_from, max(1, int(RANGE_CONTENTS * detail))),
                estimated=estimated,
            ),
            session,
            self.proxy_tools,
            detail < 1.0,
        )
        role = range_role(messages, first, end)
        tokens = message_tokens(self.counter, {"role": role, "content": text})
        stub = RangeStub(first, end - 1, CTX_PREFIX + digest, label, text, tokens, role)
        indexed_from = 1 if start == paged0 else max(1, new_from)
        return stub, RangePart(
            body,
            rendered.text,
            topic,
            summary,
            indexed_from,
            start,
            rendered.lines,
            earlier_ref,
            title,
            tuple(made),
        )

    def _range_estimated(self, previous: RangeStub | None, added: Sequence[Message]) -> bool:
        return (previous is not None and says_estimated(previous.text)) or any(
            self.estimated(m) for m in added
        )

    def _merge_start(
        self, start: int, added: Sequence[pieces.Rendered], previous: RangeStub | None
    ) -> tuple[int, str | None]:
        """(first message, part before) of the part for the messages from ``start`` on
        (``added``: rendered): the parts just before it are taken in while the merged JSON
        stays within ``MERGE_BYTES`` (their messages are the client's own, verified by the
        session's digest, so the merged part restores them byte for byte)."""
        if previous is None:
            return start, None
        size = _json_bytes(pieces.array_json([r.json for r in added]))
        cursor: str | None = previous.ref
        while cursor is not None:
            meta = self._part_meta(cursor)
            if meta is None or meta.last != start - 1 or size + meta.nbytes > MERGE_BYTES:
                break
            start, size, cursor = meta.first, size + meta.nbytes, meta.earlier
        return start, cursor

    def _remember(self, ref: str, meta: PartMeta) -> None:
        self._parts.put(ref, meta)

    def _part_meta(self, ref: str) -> PartMeta | None:
        """Where the stored part ``ref`` sits (None: unreadable, so nothing merges past it)."""
        known = self._parts.get(ref)
        if known is not None:
            return known
        try:
            body = self.store.body(self.store.resolve(ref, self.scope), original=True)
            doc = json.loads(body)
            earlier = doc["earlier"]
            meta = PartMeta(
                int(doc["first"]),
                int(doc["last"]),
                earlier if isinstance(earlier, str) else None,
                _json_bytes(body),
            )
        except (OffloadError, ValueError, KeyError, TypeError):
            return None
        self._remember(ref, meta)
        return meta


def _role_mix(messages: Sequence[Message]) -> str:
    """How many messages of each role, as ``2 assistant, 3 user``."""
    roles: dict[str, int] = {}
    for msg in messages:
        roles[msg["role"]] = roles.get(msg["role"], 0) + 1
    return ", ".join(f"{n} {role}" for role, n in sorted(roles.items()))


def _added_gist(added: Sequence[Message], chars: int) -> str:
    """The one-line gist of what the user and assistant said in ``added`` ("" for none)."""
    text = "\n".join(content_text(m) for m in added if m["role"] in ("user", "assistant"))
    if not text.strip() or chars <= 0:
        return ""
    return transcript.one_line(gist(text, chars), chars)


def _added_contents(
    rendered: transcript.Transcript, from_line: int, most: int
) -> tuple[TocEntry, ...]:
    """The contents list of the tool calls ``rendered`` shows from ``from_line`` on."""
    calls = [c for c in rendered.calls if c.line >= from_line]
    return tuple(TocEntry(line, title) for line, title in transcript.contents(calls, most))


def _json_bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _range_topic(
    messages: Sequence[Message],
    first: int,
    start: int,
    end: int,
    made: Sequence[pieces.Rendered],
) -> tuple[str, str]:
    """The topic and summary of the part ``[start, end)``; the task is the range's opener
    when a user wrote it."""
    opener = messages[first - 1] if first else None
    task = content_text(opener) if opener is not None and opener["role"] == "user" else ""
    return transcript.summarise(
        messages[start:end],
        task,
        start,
        transcript.tool_counts_of([r.piece for r in made]),
        transcript.files_in([r.files() for r in made]),
    )


def _range_text(info: StubInfo, session: str, proxy_tools: bool = True, brief: bool = False) -> str:
    return render_stub(
        info,
        range_read_call(info.ref, proxy_tools, brief),
        range_search_call(session, proxy_tools, brief),
    )


def _what(messages: Sequence[Message], at: int) -> str:
    """How a delta stub names the earlier message it repeats: ``earlier bash output``."""
    source = source_of(messages, at)
    role = str(messages[at].get("role"))
    if role in ("tool", "function"):
        return inline(f"earlier {source} output" if source else "earlier tool output", 80)
    return f"earlier {inline(role, 20)} message"


def _message_topic(msg: Message, source: str, text: str, text_gist: str) -> tuple[str, str]:
    """(topic, summary) of one stubbed message: its role, tool and call id, and its gist."""
    role = str(msg.get("role"))
    call_id = msg.get("tool_call_id")
    names = [
        str((c.get("function") or {}).get("name"))
        for c in msg.get("tool_calls") or ()
        if isinstance(c, dict) and isinstance(c.get("function"), dict)
    ]
    what = "tool output" if role in ("tool", "function") else f"{role} message"
    bits = [what, source, f"(id {call_id})" if isinstance(call_id, str) and call_id else ""]
    if names:
        bits.append("calls " + ", ".join(names))
    topic = transcript.one_line(" ".join(b for b in bits if b), 120)
    summary = transcript.one_line(text_gist, 300) if text.strip() else ""
    return topic, summary


def least_stub_tokens(counter: TokenCounter, proxy_tools: bool = True) -> tuple[int, int]:
    """Lower bounds on the wire tokens of any message stub and of any range stub (for
    :mod:`offload.proxy.rewrite.bound`): each rendered with the shortest fields it can have.

    The reference is left empty: how many tokens a real one costs depends on its digits
    (an estimate counts a run of digits dearer than hex letters), so no sample hash is a
    floor."""
    ref = ""
    message = render_stub(
        StubInfo(ref=ref, kind="", source="", tokens=0, lines=0, nbytes=0),
        read_call(ref, proxy_tools),
    )
    ranged = _range_text(
        StubInfo(
            ref=ref,
            kind="1 earlier messages",
            source="this conversation, #0-#0 (1 user)",
            tokens=0,
            lines=0,
            nbytes=0,
        ),
        "0" * 16,
        proxy_tools,
        brief=True,
    )
    return (
        message_tokens(counter, {"role": "user", "content": message}),
        message_tokens(counter, {"role": "user", "content": ranged}),
    )


def _fitting(lines: Sequence[str], chars: int) -> list[str]:
    """The leading ``lines`` that fit in ``chars`` characters."""
    out: list[str] = []
    used = 0
    for line in lines:
        used += len(line) + 1
        if used > chars:
            break
        out.append(line)
    return out
