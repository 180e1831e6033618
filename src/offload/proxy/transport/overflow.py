"""An upstream's context overflow (llama-server's ``exceed_context_size_error``): reading
it, and what the client is told when the proxy cannot make the request fit. The retry
itself is the chat exchange's (:mod:`offload.proxy.routes.chat`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

OVERFLOW = "exceed_context_size_error"


@dataclass(frozen=True)
class NoFit:
    """The upstream's overflow answer for a wire the proxy cannot make any smaller."""

    n_prompt: object  # the upstream's count (an int when it said)
    n_ctx: int
    wire_tokens: int  # the proxy's own count of the wire


def overflow_of(body: bytes) -> dict[str, Any] | None:
    """The error object of an ``exceed_context_size_error`` answer (None for any other)."""
    try:
        err = json.loads(body).get("error")
    except (ValueError, AttributeError, RecursionError):
        return None
    return err if isinstance(err, dict) and err.get("type") == OVERFLOW else None


def no_fit(overflow: dict[str, Any], n_ctx: int, wire_tokens: int) -> NoFit:
    """The overflow error object ``overflow`` of a wire of ``wire_tokens`` budgeted for
    ``n_ctx`` (the upstream's own n_ctx wins when it said)."""
    said = overflow.get("n_ctx")
    return NoFit(
        overflow.get("n_prompt_tokens"), said if isinstance(said, int) else n_ctx, wire_tokens
    )


def no_fit_message(no_fit: NoFit) -> str:
    """What the client is told (a 400) when its request cannot fit."""
    counted = f"{no_fit.n_prompt} prompt tokens" if isinstance(no_fit.n_prompt, int) else "too many"
    return (
        f"the request does not fit the model's context: the upstream counted {counted} for"
        f" n_ctx {no_fit.n_ctx}, and the proxy cannot page out any more of it (its wire is"
        f" {no_fit.wire_tokens} tokens by the proxy's count: the pinned head and the newest"
        " messages); shorten the newest message, or use a larger context"
    )
