"""Tools that look: peek, matrix, search, recall, read, checkout, checkin, retrieve,
checkout_remote, stats. Thin adapters: arguments in, store/core calls, short text out."""

from __future__ import annotations

import dataclasses

from offload.core.fence import fence, new_nonce
from offload.core.text.lines import continuation, read_lines, read_lines_within
from offload.core.text.wording import counted
from offload.errors import InvalidInput, ModelNotConfigured
from offload.mcp import format as fmt
from offload.mcp.args import Args
from offload.mcp.context import McpContext
from offload.store.models import Entry, Filters, Hit

MAX_QUERIES = 10
MATRIX_PAGE = 50
_MAX_OFFSET = 10_000_000
_MAX_LINE_CHARS = 2000
# A hit's suggested read: a few lines of context before the matching line, sized so one
# call shows the match at a small cost whatever the lines hold (base64 runs ~1.5 chars/token)
_HIT_CONTEXT = 5
HIT_READ_TOKENS = 2000


def fenced(ctx: McpContext, entry: Entry, body: str, nonce: str | None = None) -> str:
    """``body`` inside a trust fence (a fresh nonce unless one is given), counted in stats."""
    ctx.stats.bodies += 1
    ctx.stats.body_bytes += len(body.encode("utf-8", "surrogatepass"))
    return fence(
        body,
        nonce=nonce or new_nonce(),
        ref=entry.full_ref,
        topic=entry.topic,
        stored=entry.created,
    )


def read_scope(ctx: McpContext, a: Args) -> str | None:
    """The scope a read tool looks in: the server's own, or every scope when the caller
    says ``all_scopes=true`` (the tools that change entries have no such argument)."""
    return None if a.flag("all_scopes") else ctx.scope


async def peek(ctx: McpContext, a: Args) -> str:
    """Counts only."""
    return fmt.peek_text(ctx.store.peek(ctx.scope), ctx.scope, ctx.store.elsewhere(ctx.scope))


async def matrix(ctx: McpContext, a: Args) -> str:
    """The index by salience, paged."""
    offset = a.integer("offset", 0, 0, _MAX_OFFSET)
    limit = a.integer("limit", MATRIX_PAGE, 1, 200)
    filters = Filters(scope=ctx.scope)
    entries = ctx.store.entries(filters, limit=limit, offset=offset)
    total = ctx.store.count(filters)
    trailer = fmt.page_trailer("matrix", offset, len(entries), total)
    # what other scopes hold, only when they hold something (every line costs tokens)
    others = ctx.store.elsewhere(ctx.scope)
    scope = fmt.scope_note(ctx.scope, others, "entries") if others["entries"] else ""
    return "\n".join(x for x in (fmt.entry_lines(entries), trailer, scope) if x)


def _filters(ctx: McpContext, a: Args) -> Filters:
    kind = a.text("kind").strip()
    status = a.choice("status", ("", "cold", "hot"), "")
    return Filters(
        scope=None if a.flag("all_scopes") else ctx.scope,
        kinds=(kind,) if kind else (),
        status="cold" if status == "cold" else "hot" if status == "hot" else None,
        min_salience=a.number("min_salience", 0.0, 1.0),
        source_prefix=a.text("source") or None,
    )


async def search(ctx: McpContext, a: Args) -> str:
    """Ranked full-text search for several queries, or a filtered listing without any."""
    cfg = ctx.settings.search
    queries = a.strings("queries")
    if len(queries) > MAX_QUERIES:
        raise InvalidInput(f"search: at most {MAX_QUERIES} queries per call; split the rest")
    limit = a.integer("limit", cfg.default_limit, 1, cfg.max_limit)
    filters = _filters(ctx, a)
    if not queries:
        entries = ctx.store.entries(filters, limit=limit)
        total = ctx.store.count(filters)
        if not entries:
            others = ctx.store.count(dataclasses.replace(filters, scope=None)) - total
            note = fmt.scope_note(filters.scope, {"entries": others, "scopes": 0}, "entries")
            return f"no entries match these filters; try fewer filters or all_scopes=true\n{note}"
        return fmt.entry_lines(entries) + f"\n[{len(entries)} of {total}; queries=[…] ranks]"
    shown: dict[tuple[int, int | None], int] = {}
    blocks: list[str] = []
    first: Hit | None = None
    explain = a.flag("explain")
    for n, q in enumerate(queries, 1):
        page = ctx.store.search_page(
            q, filters, limit=limit, snippet_chars=cfg.snippet_chars, explain=explain
        )
        hits = page.hits
        first = first or (hits[0] if hits else None)
        rest = fmt.More(page.after, page.every, limit, cfg.max_limit)
        blocks.append(fmt.hit_lines(q, hits, shown, n, page.why if explain else None, rest))
    if first is None:
        blocks.append("no hits; try other words, fewer filters or all_scopes=true")
        others = sum(ctx.store.hits_elsewhere(q, filters) for q in queries)
        blocks.append(fmt.scope_note(filters.scope, {"entries": others, "scopes": 0}, "hits"))
    else:
        # from a few lines before the match, across the chunk's start too: where the index
        # cut the body into chunks says nothing of what context the match needs
        at = max(1, first.match_line - _HIT_CONTEXT)
        more: dict[str, object] = {"original": True} if first.in_original else {}
        if first.entry.scope != ctx.scope:
            more["all_scopes"] = True
        jump = fmt.call("read", ref=first.entry.ref, offset=at, max_tokens=HIT_READ_TOKENS, **more)
        blocks.append(f"[open a hit: {jump}; summary: recall(ref=…)]")
    return "\n".join(blocks)


async def recall(ctx: McpContext, a: Args) -> str:
    """Summary and metadata; no state change."""
    return fmt.recall_text(ctx.store.resolve(a.ref(), read_scope(ctx, a)))


def _offset(a: Args) -> int | str:
    value = a.raw.get("offset")
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise InvalidInput('read: offset must be a line number like 61 or "12-3"')
    return value


async def read(ctx: McpContext, a: Args) -> str:
    """A numbered, fenced window of a body and the exact call to continue; no state change."""
    cfg = ctx.settings.mcp
    ref = a.ref()
    limit = a.integer("limit", cfg.read_limit_lines, 1, 10_000)
    entry = ctx.store.resolve(ref, read_scope(ctx, a))
    original = a.flag("original") and entry.compressed
    max_tokens = a.integer("max_tokens", 0, 0, 10_000_000)  # 0: bounded by lines and bytes
    body = ctx.store.body(entry, original=original)
    if max_tokens:
        window = read_lines_within(
            body,
            _offset(a),
            max_tokens=max_tokens,
            count=ctx.store.counter.count,
            limit=limit,
            cap_bytes=cfg.read_cap_bytes,
            max_line_chars=_MAX_LINE_CHARS,
        )
    else:
        window = read_lines(
            body,
            _offset(a),
            limit=limit,
            cap_bytes=cfg.read_cap_bytes,
            max_line_chars=_MAX_LINE_CHARS,
        )
    if window.total_lines == 0:
        return f"{entry.ref} has an empty body"
    head = f"{entry.ref} L{window.first_line}-{window.last_line} of {window.total_lines}"
    head += " (the original)" if original else fmt.body_note(entry)
    out = [head, fenced(ctx, entry, window.text)]
    more: dict[str, object] = {"original": True} if original else {}
    if a.flag("all_scopes"):
        more["all_scopes"] = True
    if max_tokens:
        more["max_tokens"] = max_tokens
    nxt = continuation(window, fmt.call("read", ref=ref, offset=window.next_offset, **more))
    if nxt:
        out.append(nxt)
    return "\n".join(out)


async def checkout(ctx: McpContext, a: Args) -> str:
    """The full body fenced with the checkout nonce; the entry turns hot."""
    co = ctx.store.checkout(
        a.ref(), scope=ctx.scope, churn_window_s=ctx.settings.mcp.churn_window_s
    )
    e = co.entry
    lines = [
        f"{e.ref} checked out (hot; {e.lines} lines, ~{e.tokens} tokens); when done: "
        + fmt.call("checkin", ref=e.ref, nonce=co.nonce)
        + fmt.body_note(e)
    ]
    if co.churn:
        lines.append(f"warning: {co.churn}")
    lines.append(fenced(ctx, e, co.body, co.nonce))
    return "\n".join(lines)


async def checkin(ctx: McpContext, a: Args) -> str:
    """Back to cold; needs the checkout nonce. Pins stay."""
    e = ctx.store.checkin(a.ref(), a.text("nonce", required=True), scope=ctx.scope)
    return f"{e.ref} checked in ({fmt.status_of(e)})"


async def retrieve(ctx: McpContext, a: Args) -> str:
    """The full original content by any reference, fenced."""
    e = ctx.store.resolve(a.ref(), read_scope(ctx, a))
    body = ctx.store.body(e, original=True)
    notes = {
        "lossy": " (the original; the stored body is compressed)",
        "transcript": " (the exact messages; the stored body is their transcript)",
    }
    note = notes.get(e.body_form, "")
    return f"{e.ref} {e.size} bytes, {e.lines} lines{note}\n{fenced(ctx, e, body)}"


async def checkout_remote(ctx: McpContext, a: Args) -> str:
    """The body distilled by the configured local model; an error rather than a fallback."""
    ref = a.ref()
    focus = a.text("focus").strip() or None
    e = ctx.store.resolve(ref, read_scope(ctx, a))
    from offload.llm.local_model import LocalModel  # deferred: pulls in httpx

    async with LocalModel(ctx.settings.local_model) as model:
        if not model.configured:
            raise ModelNotConfigured("checkout_remote")
        # the original: distilling a lossy compression would lose twice
        result = await model.distill(ctx.store.body(e, original=True), focus, strict=True)
    head = (
        f"{e.ref} distilled by the local model: ~{result.input_tokens} -> "
        f"~{result.output_tokens} tokens (lossy; read or checkout for the exact text)"
    )
    return f"{head}\n{fenced(ctx, e, result.text)}"


async def stats(ctx: McpContext, a: Args) -> str:
    """This session's operation counts and volumes."""
    s = ctx.stats
    total = sum(s.calls.values())
    errors = sum(s.errors.values())
    per_tool = ", ".join(f"{k} {v}" for k, v in sorted(s.calls.items())) or "none"
    counts = ctx.store.peek(ctx.scope)
    return "\n".join(
        [
            f"this session: {total} calls ({errors} errors), {s.bytes_in} bytes in, "
            f"{s.bytes_out} bytes out",
            f"by tool: {per_tool}",
            f"offloaded: {s.stored} new ({s.stored_bytes} bytes), {s.deduped} already stored; "
            f"fenced bodies sent: {s.bodies} ({s.body_bytes} bytes)",
            f"scope {fmt.one_line(ctx.scope, 200)}: {counted(counts['entries'], 'entry')}, "
            f"~{counts['tokens']} tokens",
        ]
    )
