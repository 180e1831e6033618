"""Tool response indexing: an oversized upstream response becomes a placeholder.

The full text goes into the store under ``{server}__{tool}:{run}``; the client gets the
size, a preview, the contents and the exact calls that read and search the rest
(``core.stubs.render_gateway_placeholder``). Errors are never compressed, and a response
is left alone when the placeholder would not be smaller.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import mcp_types as types

from offload.config import GatewaySettings
from offload.core.stubs import is_stub, render_gateway_placeholder
from offload.core.text.lines import line_count
from offload.core.text.preview import contents, preview
from offload.errors import OffloadError
from offload.gateway.config import ServerConfig, ToolRule
from offload.gateway.storecalls import retry_busy
from offload.store.store import Store

log = logging.getLogger("offload.gateway")
KIND = "tool-output"
# the most a placeholder adds to its preview: header, contents (40 entries), three calls
_PLACEHOLDER_OVERHEAD = 8192
READ_CAP_BYTES = 64 * 1024  # the most one IndexRead returns
# one long-lived writer thread, so the store keeps one connection for it
_WRITER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="offload-gateway-writer")


@dataclass(frozen=True)
class Indexed:
    """A response that was indexed: its label and sizes (for logs and benchmarks)."""

    label: str
    nbytes: int
    placeholder_bytes: int


def threshold_for(settings: GatewaySettings, server: ServerConfig | None, tool: str) -> int | None:
    """The response threshold for ``server``/``tool``, or None when indexing is opted out."""
    if server is None:
        return settings.response_threshold
    rule = server.tools.get(tool) or ToolRule()
    enabled = rule.index_responses if rule.index_responses is not None else server.index_responses
    if enabled is False:
        return None
    return rule.response_threshold or server.response_threshold or settings.response_threshold


def response_text(result: types.CallToolResult) -> str | None:
    """The text of a result made only of text blocks (joined by newlines), else None."""
    if not result.content:
        return None
    texts = []
    for block in result.content:
        if not isinstance(block, types.TextContent):
            return None
        texts.append(block.text)
    return "\n".join(texts)


def worth_indexing(result: types.CallToolResult, threshold: int) -> bool:
    """Cheap check (no encoding, no store): could ``result`` be over ``threshold`` bytes?"""
    if result.is_error or not result.content:
        return False
    chars = 0
    for block in result.content:
        if not isinstance(block, types.TextContent):
            return False
        chars += len(block.text)
    return chars * 4 > threshold  # a character is at most 4 UTF-8 bytes


def index_response(
    result: types.CallToolResult,
    *,
    store: Store,
    settings: GatewaySettings,
    label_base: str,
    threshold: int,
) -> tuple[types.CallToolResult, Indexed | None]:
    """``result`` unchanged, or a placeholder result with the full text stored.

    Only all-text results over ``threshold`` UTF-8 bytes are indexed; structured content
    is dropped along with the text it duplicates (the gateway lists no output schemas
    while it indexes, so clients do not expect it).
    """
    if not worth_indexing(result, threshold):
        return result, None
    text = response_text(result)
    if text is None:
        return result, None
    text, replaced = valid_unicode(text)
    nbytes = len(text.encode("utf-8"))
    if nbytes <= threshold or is_stub(text):
        return result, None
    try:
        return _index_text(result, text, replaced, store, settings, label_base, nbytes)
    except OffloadError as exc:
        # the tool already ran: its output goes back whole rather than being lost
        log.warning("response of %s not indexed, passed through: %s", label_base, exc)
        return result, None


def valid_unicode(text: str) -> tuple[str, int]:
    """``text`` with lone surrogates replaced by U+FFFD (pairs joined), and how many."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        fixed = text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
        return fixed, fixed.count("\ufffd") - text.count("\ufffd")
    return text, 0


def _index_text(
    result: types.CallToolResult,
    text: str,
    replaced: int,
    store: Store,
    settings: GatewaySettings,
    label_base: str,
    nbytes: int,
) -> tuple[types.CallToolResult, Indexed | None]:
    run = retry_busy(lambda: store.next_number(f"gateway-run:{label_base}"), "a run number")
    label = f"{label_base}:{run}"

    def render() -> str:
        return render_gateway_placeholder(
            nbytes,
            line_count(text),
            label,
            preview(text, settings.preview_bytes),
            contents(text),
            read_tool=settings.read_tool,
            search_tool=settings.search_tool,
            read_cap_bytes=READ_CAP_BYTES,
        )

    def persist() -> None:
        retry_busy(
            lambda: store.put(
                text, kind=KIND, topic=label_base, source=label, label=label, scope=settings.scope
            ),
            f"storing {label}",
        )

    if nbytes > settings.preview_bytes + _PLACEHOLDER_OVERHEAD:
        # the placeholder is certainly smaller: store while rendering (sqlite, zstd and
        # hashing release the GIL, so the two overlap)
        stored = _WRITER.submit(persist)
        placeholder = render()
        stored.result()
    else:
        placeholder = render()
        if len(placeholder.encode("utf-8")) >= nbytes:
            return result, None
        persist()
    if replaced:
        head, _, rest = placeholder.partition("\n")
        note = f"[{replaced} lone surrogate(s) in the response were stored as U+FFFD]"
        placeholder = f"{head}\n{note}\n{rest}" if rest else f"{head}\n{note}"
    size = len(placeholder.encode("utf-8"))
    out = types.CallToolResult(content=[types.TextContent(type="text", text=placeholder)])
    if result.meta is not None:
        out.meta = result.meta
    return out, Indexed(label, nbytes, size)
