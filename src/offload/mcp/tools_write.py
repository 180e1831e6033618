"""Tools that change the store: offload, offload_path, offload_path_sectioned, pin, unpin,
reap, forget, snapshot, restore."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from offload.core.fence import iso
from offload.core.text.gist import gist
from offload.core.text.markdown import split_sections
from offload.core.text.timeexpr import EARLIEST, LATEST
from offload.core.text.wording import counted
from offload.core.untrusted import inline
from offload.errors import InvalidInput, ReferenceError_, UpstreamError
from offload.mcp import format as fmt
from offload.mcp.args import Args, parse_duration
from offload.mcp.context import McpContext
from offload.store.models import PutResult
from offload.store.paths import FileText, read_text_file

SNAPSHOT_NS = "mcp.snapshot"
#: The sections one offload_path_sectioned call stores (each is an entry of its own), and
#: the ones its answer lists: a file of many tiny sections made thousands of puts and an
#: answer several times the file's size.
MAX_SECTIONS = 5000
LISTED_SECTIONS = 100
DEFAULT_SNAPSHOT = "default"
_NAME = re.compile(r"[\w.-]{1,64}")
_REAP_LIST = 50


def _topic_from(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return fmt.one_line(line.strip().lstrip("#").strip(), 80)
    return ""


def _count(ctx: McpContext, res: PutResult, content: str | int) -> None:
    """Tally a put in the session's stats (``content``: the text, or its size in bytes)."""
    if res.created:
        ctx.stats.stored += 1
        ctx.stats.stored_bytes += (
            content if isinstance(content, int) else len(content.encode("utf-8", "surrogatepass"))
        )
    else:
        ctx.stats.deduped += 1


def _put_line(res: PutResult) -> str:
    verb = "stored" if res.created else "already stored"
    return f"{verb}: {fmt.entry_line(res.entry)}"


async def _compress(ctx: McpContext, content: str) -> tuple[str | None, str]:
    """(compressed body or None, a note for the result)."""
    from offload.llm.local_model import LocalModel  # deferred: pulls in httpx

    async with LocalModel(ctx.settings.local_model) as model:
        if not model.configured:
            return None, "compress: no local model configured, stored raw"
        try:
            result = await model.compress(content)
        except UpstreamError as exc:
            return None, f"compress: the local model failed ({exc}), stored raw"
    if result.kept_raw:
        return None, f"compress: {result.reason}, stored raw"
    note = f"compress: ~{result.input_tokens} -> ~{result.output_tokens} tokens (lossy)"
    return result.text, note + "; retrieve gives the original"


async def offload(ctx: McpContext, a: Args) -> str:
    """Store content; dedup returns the existing pointer."""
    content = a.text("content", required=True)
    summary = a.text("summary").strip()
    salience = a.number("salience", 0.0, 1.0)
    body, note = (None, "")
    if a.flag("compress"):
        body, note = await _compress(ctx, content)
    res = ctx.store.put(
        content,
        kind=a.text("kind").strip() or "text",
        topic=a.text("topic").strip() or _topic_from(content),
        tags=a.strings("tags"),
        summary=summary or gist(content),
        salience=0.5 if salience is None else salience,
        pinned=a.flag("pin"),
        source="mcp",
        scope=ctx.scope,
        body=body,
        index_original=True,  # a lossy body must not hide the original's words from search
        event_time=a.when("when"),
    )
    _count(ctx, res, content)
    return "\n".join(x for x in (_put_line(res), note if res.created else "") if x)


def _read_file(ctx: McpContext, a: Args) -> tuple[FileText, str]:
    path = a.text("path", required=True).strip()
    ft = read_text_file(
        path, ctx.roots, max_bytes=ctx.settings.store.max_file_bytes, base=ctx.roots[0]
    )
    return ft, _relative(ctx, ft.path)


def _relative(ctx: McpContext, path: Path) -> str:
    for root in ctx.roots:
        if path.is_relative_to(root):
            return str(path.relative_to(root)) or path.name
    return str(path)


async def offload_path(ctx: McpContext, a: Args) -> str:
    """Store a file the server reads itself, so its content never passes through the agent."""
    ft, rel = _read_file(ctx, a)
    summary, path, size = gist(ft.text), ft.path, ft.size
    # the put is handed the only reference to the text: a big file's is let go once it is
    # analysed and packed, before its write (Store.put)
    handed = [ft.text]
    del ft
    res = ctx.store.put(
        handed.pop(),
        kind=a.text("kind").strip() or "file",
        topic=a.text("topic").strip() or rel,
        tags=a.strings("tags"),
        summary=summary,
        source=str(path),
        scope=ctx.scope,
        progress=None if a.notify is None else a.notify(size),
    )
    _count(ctx, res, size)
    return _put_line(res)


async def offload_path_sectioned(ctx: McpContext, a: Args) -> str:
    """One entry per heading section; entries of an earlier version of the file go."""
    level = a.integer("level", 2, 1, 6)
    tags = a.strings("tags")
    ft, rel = _read_file(ctx, a)
    source = f"{ft.path}#sections"
    sections = [sec for sec in split_sections(ft.text, level) if sec.text.strip()]
    if len(sections) > MAX_SECTIONS:
        raise InvalidInput(
            f"{fmt.one_line(rel, 200)} has {len(sections)} sections at level {level}, over the "
            f"{MAX_SECTIONS} one call stores; split at a lower level (level=1 splits at # "
            "only) or offload it whole with offload_path"
        )
    lines: list[str] = []
    keep: list[int] = []
    new = 0
    for sec in sections:
        res = ctx.store.put(
            sec.text,
            kind="section",
            topic=f"{rel} § {' > '.join(sec.path)}",
            tags=tags,
            summary=gist(sec.text),
            source=source,
            scope=ctx.scope,
        )
        _count(ctx, res, sec.text)
        new += res.created
        keep.append(res.entry.id)
        if len(lines) < LISTED_SECTIONS:
            title = fmt.one_line(sec.title, 60)
            lines.append(
                f"{res.entry.ref} | L{sec.start_line}-{sec.end_line} | {title} | "
                f"~{res.entry.tokens}"
            )
    removed = ctx.store.forget_where(
        source=source, scope=ctx.scope, keep=keep, reason=f"replaced by a newer version of {rel}"
    )
    head = (
        f"{len(keep)} sections of {fmt.one_line(rel, 200)}: {new} new, "
        f"{len(keep) - new} unchanged, "
        f"{removed} old removed"
    )
    if len(keep) > len(lines):  # the answer stays short whatever the file holds
        more = fmt.call("search", source=source, limit=ctx.settings.search.max_limit)
        lines.append(f"[{len(keep) - len(lines)} more sections; list them: {more}]")
    return "\n".join([head, *lines])


async def pin(ctx: McpContext, a: Args) -> str:
    """Pin: salience 1.0, spared by reap."""
    return "pinned: " + fmt.entry_line(ctx.store.pin(a.ref(), ctx.scope))


async def unpin(ctx: McpContext, a: Args) -> str:
    """Clear the pin."""
    return "unpinned: " + fmt.entry_line(ctx.store.unpin(a.ref(), ctx.scope))


async def reap(ctx: McpContext, a: Args) -> str:
    """Forget idle, low-salience, unpinned entries of this scope (or list them: dry_run)."""
    older = a.text("older_than").strip()
    max_sal = a.number("max_salience", 0.0, 1.0)
    status = a.choice("status", ("cold", "hot", "any"), "cold")
    dry = a.flag("dry_run")
    if not older and max_sal is None:
        raise InvalidInput(
            'reap: give older_than (e.g. "7d") and/or max_salience; add dry_run=true to preview'
        )
    victims = ctx.store.reap(
        older_than_s=parse_duration("reap", older) if older else None,
        max_salience=max_sal,
        status=None if status == "any" else "hot" if status == "hot" else "cold",
        scope=ctx.scope,
        dry_run=dry,
    )
    verb = "would forget" if dry else "forgot"
    out = [f"{verb} {counted(len(victims), 'entry')} (pinned ones are always spared)"]
    out += [fmt.entry_line(e) for e in victims[:_REAP_LIST]]
    if len(victims) > _REAP_LIST:
        out.append(f"… +{len(victims) - _REAP_LIST} more")
    return "\n".join(out)


async def forget(ctx: McpContext, a: Args) -> str:
    """Remove one entry; its tombstone answers later references."""
    e = ctx.store.forget(a.ref(), reason="forgotten via the MCP forget tool", scope=ctx.scope)
    return f"forgot {e.ref} ({fmt.one_line(e.topic, 60)}); references to it now say why"


def _snapshot_name(a: Args) -> str:
    name = a.text("name").strip() or DEFAULT_SNAPSHOT
    if not _NAME.fullmatch(name):
        raise InvalidInput(
            f"{a.tool}: name must be 1-64 letters, digits, '.', '_' or '-', got {name!r}"
        )
    return name


def _namespace(ctx: McpContext) -> str:
    return f"{SNAPSHOT_NS}:{ctx.scope}"


async def snapshot(ctx: McpContext, a: Args) -> str:
    """Save the working state; every key ref must resolve now."""
    name = _snapshot_name(a)
    refs = [ctx.store.resolve(r, ctx.scope).ref for r in a.strings("refs")]
    doc: dict[str, Any] = {
        "task": a.text("task", required=True).strip(),
        "decisions": a.strings("decisions"),
        "threads": a.strings("threads"),
        "refs": list(dict.fromkeys(refs)),
        "saved": ctx.store.clock(),
    }
    ctx.store.put_state(_namespace(ctx), name, doc)
    return (
        f'saved snapshot "{name}": {len(doc["decisions"])} decisions, {len(doc["threads"])} '
        f"open threads, {len(doc['refs'])} refs; a new session: " + fmt.call("restore", name=name)
    )


def _ref_line(ctx: McpContext, ref: str) -> str:
    try:
        return fmt.entry_line(ctx.store.resolve(ref, ctx.scope))
    except ReferenceError_ as exc:
        return inline(f"{ref}: {exc}")  # a key ref forgotten since: say why


def snapshot_of(value: Any) -> dict[str, Any] | None:
    """``value`` as :func:`snapshot` writes it (a task, lists of texts, the time saved), or
    None: state can come from an imported archive, shaped any way at all."""
    if not isinstance(value, dict):
        return None
    saved = value.get("saved", 0)
    if isinstance(saved, bool) or not isinstance(saved, int | float):
        return None
    if not EARLIEST <= saved <= LATEST:  # NaN fails this too
        return None

    def texts(key: str) -> list[str]:
        items = value.get(key)
        return [x for x in items if isinstance(x, str)] if isinstance(items, list) else []

    task = value.get("task")
    return {
        "task": task if isinstance(task, str) else "",
        "decisions": texts("decisions"),
        "threads": texts("threads"),
        "refs": texts("refs"),
        "saved": float(saved),
    }


async def restore(ctx: McpContext, a: Args) -> str:
    """Load a snapshot (the most recently saved one by default)."""
    ns = _namespace(ctx)
    if a.text("name").strip():
        name = _snapshot_name(a)
        doc = snapshot_of(ctx.store.get_state(ns, name))
    else:
        saved = [(k, d) for k, v in ctx.store.state_items(ns) if (d := snapshot_of(v))]
        name, doc = max(saved, key=lambda kv: kv[1]["saved"]) if saved else ("", None)
    if doc is None:
        names = [inline(k, 64) for k, v in ctx.store.state_items(ns) if snapshot_of(v)]
        have = f"saved: {', '.join(names)}" if names else "none saved in this scope"
        raise InvalidInput(f"no snapshot {name!r} ({have}); snapshot(task=…) saves one")
    out = [f'snapshot "{inline(name, 64)}" saved {iso(doc["saved"])}']
    out.append("task: " + inline(doc["task"]))
    for title, key in (("decisions", "decisions"), ("open threads", "threads")):
        items = [inline(x) for x in doc[key]]
        if items:
            out.append(f"{title}:")
            out += [f"- {x}" for x in items]
    refs = list(doc["refs"])
    if refs:
        out.append("key refs:")
        out += [_ref_line(ctx, r) for r in refs]
    return "\n".join(out)
