"""One request's rewrite: the client's messages in, a bounded, cache-friendly wire out.

The HTTP app calls :meth:`Pipeline.rewrite` once per chat request (synchronously, from a
worker thread); ``offload replay`` calls the same method turn by turn without an upstream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from offload.config import ProxySettings
from offload.core.tokens import TokenCounter
from offload.store.store import Store


@dataclass(frozen=True)
class RewriteResult:
    """What one rewrite produced, and the figures the proxy's metrics report."""

    messages: list[dict[str, Any]]  # what goes on the wire (valid OpenAI chat messages)
    session_id: str  # stable id of the conversation (from its stable head)
    client_tokens: int  # tokens of the messages as the client sent them
    wire_tokens: int  # tokens of `messages`
    stubs_made: int  # new stubs created by this request
    stubbed_messages: int  # messages on the wire that are stubs (handle-ized or range stubs)
    windowed: bool  # a windowing (page-out) trigger fired on this request
    emergency: bool  # the emergency ratio acted
    prefix_kept: bool  # previous wire of this session is an exact prefix of this wire
    break_cause: str | None  # when not kept: "windowing" | "client_edit" | "new_session" ...


class Pipeline:
    """Rewrites chat requests; thread-safe across sessions (one lock per session)."""

    def __init__(
        self,
        store: Store,
        settings: ProxySettings,
        counter: TokenCounter,
        *,
        scope: str = "proxy",
    ) -> None:
        self.store = store
        self.settings = settings
        self.counter = counter
        self.scope = scope

    def rewrite(self, messages: list[dict[str, Any]], n_ctx: int) -> RewriteResult:
        """The wire for ``messages`` under a context of ``n_ctx`` tokens.

        Raises :class:`offload.errors.InvalidInput` for malformed messages (nothing is
        stored then).
        """
        raise NotImplementedError
