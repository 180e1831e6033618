"""Each paged message's rendered forms, kept from one page-out to the next.

A part takes in the parts paged out before it (up to ``MERGE_BYTES`` of JSON), so each
page-out renders the merged run again: its exact JSON, its transcript and the
transcript's token count. Every one of these is the concatenation of the same thing per
message (a JSON array's items, a transcript's pieces: :func:`offload.proxy.rewrite.
transcript.join`), so a message rendered once is not rendered, serialised or counted again
while it stays in the merged part: a page-out renders what it adds, and only joins and
hashes the rest.

An entry is kept per (session, message index) with the message it was made from; it is
used only for an equal message (compared, not assumed: the client's own edit of an earlier
message makes it again). Bounded in characters, least recently used out first.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from offload.core.lru import Lru
from offload.core.tokens import TokenCounter
from offload.proxy.rewrite import transcript
from offload.proxy.rewrite.memory import TermCounts
from offload.proxy.rewrite.messages import Message


class Rendered:
    """One message's exact JSON and transcript piece (its token counts made when asked)."""

    __slots__ = ("_closed", "_files", "_open", "_terms", "json", "message", "piece", "plain")

    def __init__(self, index: int, message: Message) -> None:
        self.message = message
        self.json = json.dumps(message, ensure_ascii=False)
        self.piece = transcript.piece(index, message)
        # its header and call rows hold no line break of their own (the client's fields
        # may): its first line is then its whole header
        self.plain = self.piece.plain
        self._closed: int | None = None  # tokens of its rows and a newline
        self._open: int | None = None  # tokens of its rows alone (the last piece)
        self._terms: tuple[str, str, TermCounts] | None = None  # header, text, its terms
        # a tuple of strings, which the cyclic GC stops tracking (a list, even an empty
        # one, stays tracked: every full collection would walk one per cached message)
        self._files: tuple[str, ...] | None = None

    def files(self) -> tuple[str, ...]:
        """The files its tool calls name (:func:`offload.proxy.rewrite.transcript.files_of`)."""
        if self._files is None:
            self._files = tuple(transcript.files_of([self.message]))
        return self._files

    def indexed(self, terms_of: Callable[[str], TermCounts]) -> tuple[str, str, TermCounts]:
        """(header, text, terms) of the message as auto-recall's index takes it (the same
        strings every time: what is cached by them is found again)."""
        if self._terms is None:
            header, _, body = self.piece.rows.partition("\n")
            self._terms = (header, body, terms_of(body))
        return self._terms

    def tokens(self, counter: TokenCounter, closed: bool) -> int:
        """Tokens of its rows (with the newline that ends them unless it is the last)."""
        if closed:
            if self._closed is None:
                self._closed = rows_tokens(counter, self.piece.rows, True)
            return self._closed
        if self._open is None:
            self._open = rows_tokens(counter, self.piece.rows, False)
        return self._open

    def size(self) -> int:
        """The characters it holds: its JSON, its rows and, once indexed, their text again."""
        return len(self.json) + 2 * len(self.piece.rows)


def rows_tokens(counter: TokenCounter, rows: str, closed: bool) -> int:
    """Tokens of transcript rows, counted a piece at a time where a message header starts
    (as :func:`offload.proxy.rewrite.stubs.parts.part_tokens` counts a whole part,
    so the sums agree): each piece but the last ends with its newline, the last with one
    only when ``closed``."""
    bits = rows.split("\n" + transcript.HEADER)
    total = 0
    for n, bit in enumerate(bits):
        text = bit if n == 0 else transcript.HEADER + bit
        total += counter.count(text + "\n" if closed or n < len(bits) - 1 else text)
    return total


def part_json(
    session: str, first: int, last: int, items: Sequence[str], earlier: str | None
) -> str:
    """``json.dumps`` (``ensure_ascii=False``) of a part's document, its messages given as
    their own JSON: the same bytes, joined rather than serialised again."""
    return (
        f'{{"conversation": {json.dumps(session, ensure_ascii=False)}, "first": {first},'
        f' "last": {last}, "messages": [{", ".join(items)}],'
        f' "earlier": {json.dumps(earlier, ensure_ascii=False)}}}'
    )


def array_json(items: Sequence[str]) -> str:
    """``json.dumps`` of a list whose items' JSON is ``items``."""
    return f"[{', '.join(items)}]"


def transcript_tokens(counter: TokenCounter, title: str, made: Sequence[Rendered]) -> int:
    """Tokens of the transcript ``transcript.join`` makes of ``made`` under ``title``,
    as ``part_tokens`` counts it, from each message's cached count."""
    if not made:
        return counter.count(title)
    total = counter.count(title + "\n") if title else 0
    last = len(made) - 1
    return total + sum(r.tokens(counter, n < last) for n, r in enumerate(made))


class PieceCache:
    """:class:`Rendered` per (session, message index), bounded in characters."""

    # a merged part holds up to MERGE_BYTES of JSON and as much transcript: this keeps the
    # parts of a few dozen sessions paging out at once
    def __init__(self, max_chars: int = 32 * 1024 * 1024, sessions: int = 4096) -> None:
        self._items: Lru[tuple[str, int], Rendered] = Lru(max_chars, weigh=Rendered.size)
        # per session, the index below which its forms were dropped (forget_before)
        self._floors: Lru[str, int] = Lru(sessions)

    @property
    def max_chars(self) -> int:
        """The most characters of rendered forms kept."""
        return self._items.bound

    def of(self, session: str, index: int, message: Message) -> Rendered:
        """The rendered forms of ``message``, the session's message ``index``."""
        hit = self._items.get((session, index))
        if hit is not None and (hit.message is message or hit.message == message):
            return hit
        made = Rendered(index, message)
        self._items.put((session, index), made)
        return made

    def run(
        self, session: str, messages: Sequence[Message], start: int, end: int
    ) -> list[Rendered]:
        """The rendered forms of ``messages[start:end]`` (those kept looked up at once)."""
        found: list[Rendered | None] = []
        get = self._items.get
        for i in range(start, end):
            hit = get((session, i))
            message = messages[i]
            found.append(
                hit
                if hit is not None and (hit.message is message or hit.message == message)
                else None
            )
        return [
            hit if hit is not None else self.of(session, start + n, messages[start + n])
            for n, hit in enumerate(found)
        ]

    def forget_before(self, session: str, index: int) -> None:
        """Drop the session's forms of the messages before ``index``: a part that starts
        there was paged out, and no later part of the session takes in what lies before
        it (that part did not fit in with it, or was not the one before it). Kept, each
        would hold its message and its forms for as long as the bound allows, objects
        that every full collection of the cyclic GC walks; one asked for again (a client
        that edits its history, another chain) is made again. A part that starts before
        the last one did (a new chain, after an edit) drops nothing, and the next drops
        from it on."""
        floor = self._floors.get(session)
        if floor is not None and index <= floor:
            if index < floor:
                self._floors.put(session, index)
            return
        for i in range(floor or 0, index):
            self._items.pop((session, i))
        self._floors.put(session, index)

    def shrink(self, max_chars: int) -> None:
        """Keep only the newest forms, at most ``max_chars`` of them."""
        self._items.shrink(max_chars)
