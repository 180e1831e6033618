"""What a proxy stub is made of: the limits and markers the stubs share, the exact read and
search calls a stub names, and the values a stub and a paged-out part are (:class:`RangePart`,
:class:`PartMeta`, :class:`Earlier`, :class:`MessageStub`, :class:`RangeStub`). Pure: the
stub maker (:mod:`offload.proxy.rewrite.stubs.message_stubs`) renders, stores and counts.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from offload.core.tokens import TokenCounter
from offload.proxy.rewrite import transcript
from offload.proxy.rewrite.memory import TermCounts
from offload.proxy.rewrite.messages import (
    Message,
)
from offload.proxy.rewrite.stubs import pieces

STUB_GIST_CHARS = 120
RANGE_GIST_CHARS = 160
#: The roles a range stub may take (see :func:`offload.proxy.rewrite.messages.range_role`).
RANGE_ROLES = ("user", "assistant")
#: Said in the stub of a message whose content was a list of parts (stored as JSON).
PARTS_NOTE = "(content parts as JSON)"
#: How a recall block starts (:mod:`offload.proxy.rewrite.recall`).
RECALL_MARKER = "[offload: recalled "
#: How a loop note starts (:mod:`offload.proxy.rewrite.loops`).
LOOP_MARKER = "[offload: loop guard]"
#: Tool calls named in a range stub's contents list.
RANGE_CONTENTS = 4
#: A page-out takes in the parts before it while the merged part's JSON stays within this
#: many bytes: a long range reads back in a few large parts (each one ``offload cat``), not
#: one part per page-out, while no single page-out rewrites more than this.
MERGE_BYTES = 256 * 1024
#: A bulky message's stub names an earlier body it repeats with a few lines changed (a
#: file read again after an edit, a command run again): looked for among this many
#: messages before it, the nearest this many of a comparable size compared
#: (:mod:`offload.core.text.delta`), so the test costs the same at any length of session.
DELTA_LOOKBACK = 64
DELTA_CANDIDATES = 8


#: The proxy's own memory tools (:mod:`offload.proxy.retrieval.retrieval`, which checks these names),
#: named first in stubs so a model behind the proxy alone can expand them.
PROXY_READ = "offload_read"
PROXY_SEARCH = "offload_search"


def names_proxy_tools(mode: str, tool_support: bool | None) -> bool:
    """Whether the upstream model is offered the proxy's own memory tools, so stubs and
    recall blocks may name them: ``proxy.retrieval`` "on", or "auto" unless the upstream
    says its chat template renders no tools (:mod:`offload.proxy.retrieval.retrieval_loop`)."""
    return mode == "on" or (mode == "auto" and tool_support is not False)


def read_call(ref: str, proxy_tools: bool = True) -> str:
    """The exact calls that bring ``ref`` back (the proxy's tool when it offers its tools,
    else the MCP server's ``read``; the CLI either way; ``retrieve`` takes the same
    ``ref``). Kept short: every stub carries it."""
    tool = PROXY_READ if proxy_tools else "read"
    return f'{tool}(ref="{ref}") or `offload cat {ref}`'


def range_read_call(ref: str, proxy_tools: bool = True, brief: bool = False) -> str:
    """The exact calls that read a paged-out part as a transcript, and restore it.
    ``brief`` (a small window, where the range stub is rendered again every few turns):
    one tool, the one the model is offered, and the CLI."""
    if brief:
        tool = f'{PROXY_READ}(ref="{ref}")' if proxy_tools else f'read(ref="{ref}", offset=1)'
        return f'{tool} or `offload cat {ref}` (the exact messages: retrieve(ref="{ref}"))'
    ours = f', {PROXY_READ}(ref="{ref}")' if proxy_tools else ""
    return (
        f'read(ref="{ref}", offset=1){ours} or `offload cat {ref}` (a'
        f' transcript; the exact messages: retrieve(ref="{ref}"), JSON whose "earlier" names'
        " the part before)"
    )


def range_search_call(session: str, proxy_tools: bool = True, brief: bool = False) -> str:
    """The exact calls that search everything this conversation paged out (``brief``: one
    tool and the CLI)."""
    if brief and proxy_tools:
        return f'{PROXY_SEARCH}(query="…") or `offload search "…"`'
    ours = f', {PROXY_SEARCH}(query="…")' if proxy_tools else ""
    return f'search(queries=["…"], source="proxy:{session}"){ours} or `offload search "…"`'


@dataclass(frozen=True)
class RangePart:
    """What one page-out stores: the exact messages as JSON and the transcript."""

    body: str  # the JSON document (the entry's content: what the stub's ref names)
    transcript: str  # what is read, and indexed from ``index_from_line`` on
    topic: str
    summary: str
    # the transcript's first line that no earlier part holds: the parts it takes in are
    # indexed already, so a search finds each message once (in the part that paged it)
    index_from_line: int = 1
    first: int = 0  # the index of its first message
    lines: tuple[int, ...] = ()  # the transcript's header line of each of its messages
    earlier: str | None = None  # the part before it
    # the transcript's title and its messages' pieces (empty: count the transcript whole)
    title: str = ""
    made: tuple[pieces.Rendered, ...] = ()

    def messages(
        self, terms_of: Callable[[str], TermCounts]
    ) -> list[tuple[str, str, TermCounts]] | None:
        """Each message's (header, text, terms) in the transcript, when its lines are its
        rows (None: split the transcript to find them)."""
        if not self.made or "\n" in self.title or not all(r.plain for r in self.made):
            return None
        return [r.indexed(terms_of) for r in self.made]

    def tokens(self, counter: TokenCounter) -> int:
        """Tokens of the transcript (:func:`part_tokens`), from its messages' counts."""
        if not self.made:
            return part_tokens(counter, self.transcript)
        return pieces.transcript_tokens(counter, self.title, self.made)


@dataclass(frozen=True)
class PartMeta:
    """Where a stored part sits in its chain."""

    first: int  # its first message's index
    last: int
    earlier: str | None  # the part before it
    nbytes: int  # its JSON's size


@dataclass(frozen=True)
class Earlier:
    """The messages before the one being stubbed (``messages[:end]``), where the body it
    may repeat with changes is looked for."""

    messages: Sequence[Message]
    end: int


@dataclass(frozen=True)
class MessageStub:
    """What the pipeline knows about one content: its identity, size and stub."""

    digest: str  # sha256 hex of the content text
    tokens: int  # tokens of the content text alone
    stub: str  # the stub text that replaces it
    stub_tokens: int
    # a delta stub: the digest of the earlier body it names (stored when the stub is used)
    base: str = ""


@dataclass(frozen=True)
class RangeStub:
    """A range stub on the wire and the part it names."""

    first: int  # first paged message index (the end of the head)
    last: int  # last paged message index (inclusive)
    ref: str  # full ctx:sha256 reference of the newest part
    label: str
    text: str
    tokens: int  # wire tokens of the stub message
    role: str = "user"

    def message(self) -> Message:
        """The wire message."""
        return {"role": self.role, "content": self.text}

    def to_json(self) -> dict[str, Any]:
        """For the persisted session state."""
        return {
            "first": self.first,
            "last": self.last,
            "ref": self.ref,
            "label": self.label,
            "text": self.text,
            "tokens": self.tokens,
            "role": self.role,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RangeStub:
        """Inverse of :meth:`to_json`."""
        return cls(
            first=int(data["first"]),
            last=int(data["last"]),
            ref=str(data["ref"]),
            label=str(data["label"]),
            text=str(data["text"]),
            tokens=int(data["tokens"]),
            role=str(data.get("role", "user")),  # states saved before roles varied
        )


def part_tokens(counter: TokenCounter, text: str) -> int:
    """The tokens of a part's transcript, counted a message at a time: each piece ends
    with a newline and the next starts with a message header, where a BPE encoding's
    pre-split always cuts, so the sum is the whole text's count. A merged part repeats
    the messages of the parts it takes in, whose pieces the counter has cached, so a
    page-out counts what it adds, not the whole merged part again."""
    pieces = text.split("\n" + transcript.HEADER)
    total = counter.count(pieces[0] + "\n") if len(pieces) > 1 else counter.count(pieces[0])
    for n, piece in enumerate(pieces[1:], 2):
        tail = "\n" if n < len(pieces) else ""
        total += counter.count(transcript.HEADER + piece + tail)
    return total
