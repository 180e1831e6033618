"""Store commands: add, ls, search, show, cat, pin, unpin, forget, reap, stats."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

from offload.cli.common import add_scope_args, emit, open_store, scope_of
from offload.cli.progress import Meter, size_label
from offload.config import Settings
from offload.core.fence import iso
from offload.core.hashing import decode
from offload.core.text.gist import gist
from offload.core.text.timeexpr import iso_day, parse_time
from offload.core.text.wording import counted
from offload.core.untrusted import inline, printable
from offload.errors import InvalidInput, NotAFile, OutsideRoots, TooLarge
from offload.store.models import Entry, Filters, Hit
from offload.store.paths import limit_text, project_root, read_text_file
from offload.store.search.explain import Explanation, explanation_lines, path_line
from offload.store.search.pipeline import HitPage
from offload.store.store import Store

# -- arguments ------------------------------------------------------------------------------


def configure_add(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "text",
        nargs="*",
        help="the text to store, its words joined by spaces when unquoted (default: stdin)",
    )
    p.add_argument("--path", help="read this file (confined to the project root)")
    p.add_argument(
        "--kind", default="text", help="what it is: text, log, code, doc, ... (default text)"
    )
    p.add_argument("--topic", default="", help="a short title (default: the file name with --path)")
    p.add_argument("--tags", default="", help="comma or space separated")
    p.add_argument("--summary", default=None, help="default: an extractive gist")
    p.add_argument(
        "--salience", type=float, default=0.5, help="0-1: how much it matters; low is reaped first"
    )
    p.add_argument("--pin", action="store_true", help="pin it: never reaped, listed first")
    p.add_argument("--label", help="a unique name to refer to it by (instead of its id or hash)")
    p.add_argument(
        "--when",
        metavar="DATE",
        help="when what it tells happened, if not now (ISO: 2023-05-08 or 2023-05-08T13:56Z); "
        "a search naming a date prefers entries near it",
    )
    p.add_argument(
        "--max-file-bytes",
        type=int,
        metavar="N",
        help="refuse inputs over N bytes (setting store.max_file_bytes, default 8 MiB)",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="show a big input's progress on stderr even when it is not a terminal",
    )
    add_scope_args(p, every=False)  # an entry is stored in one scope


def configure_ls(p: argparse.ArgumentParser) -> None:
    p.add_argument("--limit", type=int, default=50, help="entries per page (default 50)")
    p.add_argument("--page", type=int, default=1, help="which page, from 1")
    _filter_args(p)
    add_scope_args(p)


def configure_search(p: argparse.ArgumentParser) -> None:
    p.add_argument("query", nargs="+", help="words, identifiers or a phrase to look for")
    p.add_argument(
        "--limit",
        type=int,
        help="hits per page (default: the setting search.default_limit, 5)",
    )
    p.add_argument("--page", type=int, default=1, help="which page, from 1")
    p.add_argument(
        "--explain",
        action="store_true",
        help="say for each hit which path scored it and what each part contributed",
    )
    _filter_args(p)
    add_scope_args(p)


def _filter_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--kind", action="append", default=[], help="only this kind (repeatable)")
    p.add_argument(
        "--status", choices=["cold", "hot"], help="only cold (stored) or hot (checked out)"
    )
    p.add_argument("--pinned", action="store_true", default=None, help="only pinned entries")
    p.add_argument("--min-salience", type=float, help="only entries at least this salient (0-1)")
    p.add_argument(
        "--source",
        help="source prefix: a file or directory (add --path stores its absolute path) or a "
        "label such as proxy:",
    )


def _ref_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("ref", help="entry id, label, ctx:sha256:<hex> or a hex prefix (>= 8)")
    add_scope_args(p)


configure_show = configure_pin = configure_unpin = _ref_args


def configure_cat(p: argparse.ArgumentParser) -> None:
    _ref_args(p)
    p.add_argument("--lines", help="A-B (1-based, inclusive), A, or A- (to the end)")
    p.add_argument("--original", action="store_true", help="what was sent, if compressed")


def configure_forget(p: argparse.ArgumentParser) -> None:
    _ref_args(p)
    p.add_argument(
        "--reason", default="forgotten", help="kept in the tombstone, shown to whoever asks for it"
    )


def configure_reap(p: argparse.ArgumentParser) -> None:
    p.add_argument("--older-than", type=float, metavar="DAYS", help="idle longer than this")
    p.add_argument("--max-salience", type=float, help="only entries at most this salient (0-1)")
    p.add_argument(
        "--status",
        choices=["cold", "hot", "any"],
        default="cold",
        help="which entries (default cold)",
    )
    p.add_argument("--dry-run", action="store_true", help="list what would go, forget nothing")
    add_scope_args(p)


def configure_stats(p: argparse.ArgumentParser) -> None:
    add_scope_args(p)


# -- commands ---------------------------------------------------------------------------------


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """``add --max-file-bytes N`` is ``store.max_file_bytes``."""
    limit = getattr(args, "max_file_bytes", None)
    return {} if limit is None else {"store.max_file_bytes": limit}


def run_add(args: argparse.Namespace, settings: Settings) -> int:
    source = ""
    if args.path and args.text:
        raise InvalidInput("give the text or --path FILE, not both")
    if args.path:
        text, source = _read_path(args.path, settings.store.max_file_bytes)
    elif args.text:
        text = " ".join(args.text)
    else:
        text = _read_stdin(settings.store.max_file_bytes)
    if not text or text.isspace():  # not strip(): a big body is not copied to be checked
        raise InvalidInput("nothing to store: the text is empty or only white space")
    when = _when(args.when)
    size = _size(source) if source else len(text)  # characters: about the bytes
    meter = Meter(f"adding {Path(source).name or size_label(size)}", size)
    if args.progress:
        meter.enabled = True
    summary = args.summary if args.summary is not None else gist(text)
    # the put is handed the only reference to the text: a big body is let go once it is
    # analysed and packed, before its write (Store.put)
    handed = [text]
    del text
    scope = scope_of(args, settings, for_write=True) or ""
    with open_store(settings) as store:
        try:
            res = store.put(
                handed.pop(),
                kind=args.kind,
                topic=args.topic or (Path(source).name if source else ""),
                tags=split_tags(args.tags),
                summary=summary,
                salience=args.salience,
                pinned=args.pin,
                source=source,
                scope=scope,
                label=args.label,
                progress=meter,
                event_time=when,
            )
        finally:
            meter.close()  # cleared before the output
        # "created" is the entry's timestamp, as in `show --json`; "new": stored by this add
        moved = res.label_moved_from
        data = {**_entry_json(res.entry), "new": res.created, "label_moved_from": moved}
        emit(args, data, lambda d: _added_line(res.entry, created=d["new"], moved=moved))
    return 0


def _added_line(entry: Entry, *, created: bool, moved: int | None = None) -> str:
    """What ``add`` prints: the entry; for text already stored, that the flags describing
    it did not replace what it was first stored with; a label taken from another entry."""
    line = f"stored {_line(entry)}"
    if not created:
        line = (
            f"exists {_line(entry)}\n(the same text was already stored: its topic, tags, "
            "summary, kind and salience stay as first given; --label, --pin and --when apply)"
        )
    if moved is not None:
        line += f"\nthe label moved here from #{moved}, which no longer has it"
    return line


def _when(text: str | None) -> float | None:
    """``--when`` as epoch seconds (None: not given); a value naming no date is refused."""
    if text is None:
        return None
    at = parse_time(text)
    if at is None:
        raise InvalidInput(
            f"--when {printable(text[:40])!r} is not a date: give one such as 2023-05-08 "
            "or 2023-05-08T13:56:00Z"
        )
    return at


def split_tags(text: str) -> list[str]:
    """``--tags`` as its help says: words separated by commas or white space."""
    return text.replace(",", " ").split()


def _read_path(path: str, max_bytes: int) -> tuple[str, str]:
    """A file's text and resolved path, read inside the project the command runs in. A
    missing file says so wherever it is (not "outside the allowed roots")."""
    try:
        exists = Path(path).expanduser().exists()
    except (OSError, RuntimeError) as exc:  # a name too long, an unknown ~user
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise NotAFile(f"{printable(path[:200])}: not a file ({printable(why)})") from None
    if not exists:
        raise NotAFile(f"{printable(path[:200])}: no such file")
    root = project_root(Path.cwd())
    try:
        ft = read_text_file(path, [root], max_bytes=max_bytes, base=Path.cwd())
    except OutsideRoots as exc:
        raise OutsideRoots(
            f"{exc}; add --path reads files inside the project it runs in: run it from the "
            f"file's project, or pipe the file in (offload add < FILE)"
        ) from exc
    except TooLarge as exc:
        raise TooLarge(f"{exc}, or pass --max-file-bytes N") from exc
    return ft.text, str(ft.path)


def _size(path: str) -> int:
    try:
        return Path(path).stat().st_size
    except OSError:
        return 0


def _read_stdin(max_bytes: int) -> str:
    """Standard input, capped like ``--path`` (``store.max_file_bytes``); on a terminal, a
    line on stderr first says how to end it."""
    if sys.stdin.isatty():
        print("offload add: reading the text to store; end it with Ctrl-D", file=sys.stderr)
    data = sys.stdin.buffer.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise InvalidInput(
            f"standard input is over {limit_text(max_bytes)}, or pass --max-file-bytes N"
        )
    return decode(data)


_MAX_LIMIT = 1_000_000
_MAX_OFFSET = 2**53  # well inside SQLite's 64-bit integers


def _check_paging(page: int, limit: int) -> None:
    if page < 1:
        raise InvalidInput(f"--page counts from 1, got {page}")
    if not 1 <= limit <= _MAX_LIMIT:
        raise InvalidInput(f"--limit must be within 1-{_MAX_LIMIT}, got {limit}")
    if (page - 1) * limit > _MAX_OFFSET:
        raise InvalidInput(f"--page {page} is past any store's last entry")


def run_ls(args: argparse.Namespace, settings: Settings) -> int:
    _check_paging(args.page, args.limit)
    _check_salience("--min-salience", args.min_salience)
    with open_store(settings, existing=True) as store:
        f = _filters(args, settings)
        limit = max(1, args.limit)
        rows = store.entries(f, limit=limit, offset=(max(1, args.page) - 1) * limit)
        total = store.count(f)
        others = _elsewhere(store, f, store.count(replace(f, scope=None)) - total)
        data = {
            "total": total,
            "page": args.page,
            "entries": [_entry_json(e) for e in rows],
            **_scope_json(f.scope, others),
        }
        emit(
            args,
            data,
            lambda d: (
                _ls_text(rows, total, args.page, limit, f.scope is None)
                + _scope_text(f.scope, others, "entry")
            ),
        )
    return 0


def _elsewhere(store: Store, f: Filters, entries: int) -> dict[str, int]:
    """``entries`` matching elsewhere and how many other scopes hold anything."""
    if f.scope is None:
        return {"entries": 0, "scopes": 0}
    return {"entries": entries, "scopes": store.elsewhere(f.scope)["scopes"]}


def _scope_json(scope: str | None, others: dict[str, int]) -> dict[str, Any]:
    """Which scope a listing shows and what the others hold (``--json``)."""
    return {
        "scope": scope,
        "all_scopes": scope is None,
        "other_scopes": {**others, "shown_by": "--all-scopes"},
    }


def _scope_text(scope: str | None, others: dict[str, int], what: str) -> str:
    """The line under a listing: its scope, and what other scopes hold with the flag that
    shows it (an entry added in another project is not silently missing)."""
    if scope is None:
        return "\n[every scope]"
    n, k = others["entries"], others["scopes"]
    scopes = counted(k, "other scope")
    if n:
        return f"\n[scope {scope}; {counted(n, what)} in {scopes}: --all-scopes shows them]"
    return f"\n[scope {scope}; none in {scopes}]" if k else f"\n[scope {scope}]"


def run_search(args: argparse.Namespace, settings: Settings) -> int:
    # without --limit, the page the settings give (search.default_limit, as MCP's search)
    limit = settings.search.default_limit if args.limit is None else args.limit
    _check_paging(args.page, limit)
    _check_salience("--min-salience", args.min_salience)
    with open_store(settings, existing=True) as store:
        text, f = " ".join(args.query), _filters(args, settings)
        found = store.search_page(
            text,
            f,
            limit=limit,
            offset=(max(1, args.page) - 1) * limit,
            snippet_chars=settings.search.snippet_chars,
            explain=args.explain,
        )
        others = _elsewhere(store, f, store.hits_elsewhere(text, f))
        hits = [_hit_json(h) for h in found.hits]
        for hit, why in zip(hits, found.why, strict=False):  # with --explain
            hit["explain"] = why.as_dict()
        data = {
            "total": found.total,
            "total_exact": found.every,
            "page": args.page,
            "more": found.after > 0 or not found.every,
            "hits": hits,
            **_scope_json(f.scope, others),
        }
        emit(
            args,
            data,
            lambda d: (
                _page_text(found, args.page, limit, f.scope is None)
                + _scope_text(f.scope, others, "hit")
            ),
        )
    return 0


def _page_text(found: HitPage, page: int, limit: int, scoped: bool) -> str:
    """A page of hits and, as ``ls`` says it, how many more and the next page; for a page
    past the last hit, how many hits and pages there are."""
    if not found.hits and page > 1 and found.total:
        hits = f"{'' if found.every else 'at least '}{counted(found.total, 'hit')}"
        pages = counted(-(-found.total // limit), "page")
        return f"no hits on page {page} ({hits}: {pages} of {limit})"
    text = _hits_text(found.hits, found.why or None, scoped)
    at_least = "" if found.every else "at least "
    if found.after:
        return f"{text}\n… {at_least}{found.after} more; --page {page + 1}"
    return text if found.every or not found.hits else f"{text}\n… maybe more; --page {page + 1}"


def run_show(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, existing=True) as store:
        e = store.resolve(args.ref, scope_of(args, settings))
        emit(args, _entry_json(e), lambda d: _show_text(e))
    return 0


def run_cat(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, existing=True) as store:
        e = store.resolve(args.ref, scope_of(args, settings))
        text = store.body(e, original=args.original and e.compressed, touch=True)
    if args.lines:
        text = _slice_lines(text, args.lines)
    if args.json:
        emit(args, {"ref": e.ref, "body": text}, str)
    else:
        # byte-exact into a pipe or file; on a terminal no stored escape sequence is obeyed
        sys.stdout.write(printable(text) if sys.stdout.isatty() else text)
        sys.stdout.flush()
    return 0


def run_pin(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, existing=True) as store:
        e = store.pin(args.ref, scope_of(args, settings))
        emit(args, _entry_json(e), lambda d: f"pinned {_line(e)}")
    return 0


def run_unpin(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, existing=True) as store:
        e = store.unpin(args.ref, scope_of(args, settings))
        # pinning raised the salience to 1.00; unpinning leaves it, and says so
        note = f" (salience stays {e.salience:.2f})"
        emit(args, _entry_json(e), lambda d: f"unpinned {_line(e)}{note}")
    return 0


def run_forget(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, existing=True) as store:
        e = store.forget(args.ref, reason=args.reason, scope=scope_of(args, settings))
        emit(args, _entry_json(e), lambda d: f"forgot {_line(e)}")
    return 0


def _check_reap(args: argparse.Namespace) -> None:
    """A reap without a filter would forget every unpinned entry of the scope: refused, as
    are negative or non-finite ages and saliences outside [0, 1]."""
    if args.older_than is None and args.max_salience is None:
        raise InvalidInput(
            "reap needs a filter: --older-than DAYS and/or --max-salience S "
            "(add --dry-run to preview what they select)"
        )
    if args.older_than is not None and not (
        math.isfinite(args.older_than) and args.older_than >= 0
    ):
        raise InvalidInput(f"--older-than takes a number of days >= 0, got {args.older_than}")
    _check_salience("--max-salience", args.max_salience)


def _check_salience(flag: str, value: float | None) -> None:
    """A salience bound outside [0, 1] (or not a number) would select nothing or
    everything without a word: refused."""
    if value is not None and not 0.0 <= value <= 1.0:
        raise InvalidInput(f"{flag} takes a number in [0, 1], got {value}")


def run_reap(args: argparse.Namespace, settings: Settings) -> int:
    _check_reap(args)
    with open_store(settings, existing=True) as store:
        victims = store.reap(
            older_than_s=None if args.older_than is None else args.older_than * 86400,
            max_salience=args.max_salience,
            status=None if args.status == "any" else args.status,
            scope=scope_of(args, settings),
            dry_run=args.dry_run,
        )
    verb = "would reap" if args.dry_run else "reaped"
    data = {"dry_run": args.dry_run, "entries": [_entry_json(e) for e in victims]}
    emit(
        args,
        data,
        lambda d: "\n".join(
            [f"{verb} {counted(len(victims), 'entry')}"]
            + [_line(e, args.all_scopes) for e in victims]
        ),
    )
    return 0


def run_stats(args: argparse.Namespace, settings: Settings) -> int:
    scope = scope_of(args, settings)
    with open_store(settings, existing=True) as store:
        data = {**store.stats(), **store.peek(scope)}
        others = store.elsewhere(scope)
    data.update(_scope_json(scope, others))
    emit(args, data, lambda d: _stats_text(d, scope) + _scope_text(scope, others, "entry"))
    return 0


# -- rendering ------------------------------------------------------------------------------


def _filters(args: argparse.Namespace, settings: Settings) -> Filters:
    return Filters(
        scope=scope_of(args, settings),
        kinds=tuple(args.kind),
        status=args.status,
        pinned=args.pinned,
        min_salience=args.min_salience,
        source_prefix=_source_prefix(args.source),
    )


def _source_prefix(text: str | None) -> str | None:
    """``--source`` as the sources are stored: a relative path naming a file or directory
    here is made absolute (``add --path`` stores the resolved path), a directory ending in
    a separator so ``src`` does not take in ``src2``; anything else as given."""
    if not text or text.startswith("/"):
        return text
    try:
        path = Path(text)
        if not path.exists():
            return text
        resolved = str(path.resolve())
    except (OSError, RuntimeError):
        return text
    return resolved + "/" if path.is_dir() else resolved


def _entry_json(e: Entry) -> dict[str, Any]:
    return {
        "id": e.id,
        "ref": e.full_ref,
        "kind": e.kind,
        "topic": e.topic,
        "tags": list(e.tags),
        "summary": e.summary,
        "salience": e.salience,
        "status": e.status,
        "pinned": e.pinned,
        "tokens": e.tokens,
        "bytes": e.size,
        "lines": e.lines,
        "source": e.source,
        "scope": e.scope,
        "labels": list(e.labels),
        "created": iso(e.created),
        "accessed": iso(e.accessed),
        "access_count": e.access_count,
        "expires": iso(e.expires) if e.expires else None,
        "event_time": iso(e.event_time) if e.event_time is not None else None,
    }


def _hit_json(h: Hit) -> dict[str, Any]:
    return {
        "ref": h.entry.full_ref,
        "id": h.entry.id,
        "topic": h.entry.topic,
        "lines": [h.start_line, h.end_line],
        "match_line": h.match_line,
        "score": round(h.score, 4),
        "snippet": h.snippet,
        "in_original": h.in_original,
        "best_lines": [{"line": n, "text": t} for n, t in _best_lines(h)],
    }


def _one(text: str) -> str:
    """A stored field (kind, topic, tag, source, label, scope, snippet) as one inert line:
    it comes from whoever wrote the entry, so it may not start a line of its own."""
    return inline(text)


def _line(e: Entry, scoped: bool = False) -> str:
    """An entry in one line; ``scoped`` (a listing of every scope): with its scope, since
    the same content may be an entry in several scopes, each line alike but for it."""
    tags = f" [{', '.join(_one(t) for t in e.tags)}]" if e.tags else ""
    pin = " pinned" if e.pinned else ""
    return (
        f"{e.ref} #{e.id} | {_one(e.topic) or '(no topic)'}{tags} | {_one(e.kind)} | "
        f"{e.salience:.2f} | {e.status}{pin} | ~{e.tokens} tok{_scope_of(e, scoped)}"
    )


def _scope_of(e: Entry, scoped: bool) -> str:
    return f" | scope {_one(e.scope) or repr(e.scope)}" if scoped else ""


def _ls_text(rows: list[Entry], total: int, page: int, limit: int, scoped: bool) -> str:
    if not rows:
        return "no entries" if total == 0 else f"page {page} is empty ({counted(total, 'entry')})"
    lines = [_line(e, scoped) for e in rows]
    shown_to = (page - 1) * limit + len(rows)
    if shown_to < total:
        lines.append(f"… {total - shown_to} more; --page {page + 1}")
    return "\n".join(lines)


def _best_lines(h: Hit) -> tuple[tuple[int, str], ...]:
    # a metadata-only hit has no lines of its own: its topic and summary stand in
    return h.lines or ((h.match_line, h.snippet),)


def _hits_text(hits: list[Hit], why: list[Explanation] | None = None, scoped: bool = False) -> str:
    """A head line per hit, then its best-matching lines, each with its number (with
    ``why``: each hit's rank and score, and what made them, after its lines; ``scoped``:
    each hit's scope on its head line)."""
    if not hits:
        return "no matches"
    out: list[str] = [] if not why else [path_line(why[0])]
    for i, h in enumerate(hits):
        rank = "" if why is None else f"#{why[i].rank} score {h.score:.4g} "
        when = "" if h.entry.event_time is None else f" | {iso_day(h.entry.event_time)}"
        out.append(
            f"{rank}{h.entry.ref} L{h.start_line}-{h.end_line}{_hit_note(h)} | "
            f"{_one(h.entry.topic or h.entry.kind)}{when}{_scope_of(h.entry, scoped)}"
        )
        out.extend(f"  L{n}: {_one(text)}" for n, text in _best_lines(h))
        if why is not None:  # emit() makes the whole text printable
            out.extend(explanation_lines(why[i], str))
    return "\n".join(out)


def _hit_note(h: Hit) -> str:
    if h.in_original:
        return f" (in the original; the stored body is lossy: offload cat --original {h.entry.ref})"
    return f" ({h.entry.body_form})" if h.entry.body_form else ""


def _show_text(e: Entry) -> str:
    rows = [
        ("ref", e.full_ref),
        ("id", str(e.id)),
        ("kind", _one(e.kind)),
        ("topic", _one(e.topic)),
        ("tags", ", ".join(_one(t) for t in e.tags)),
        ("summary", _one(e.summary)),  # a gist's lines kept apart by a visible \\n
        ("salience", f"{e.salience:.2f}"),
        ("status", e.status + (" (pinned)" if e.pinned else "")),
        (
            "size",
            f"{counted(e.tokens, 'token')}, {counted(e.lines, 'line')}, {counted(e.size, 'byte')}",
        ),
        ("source", _one(e.source)),
        ("labels", " ".join(_one(label) for label in e.labels)),
        ("scope", _one(e.scope)),
        ("created", iso(e.created)),
        ("when", iso(e.event_time) if e.event_time is not None else ""),
        ("accessed", f"{iso(e.accessed)} ({e.access_count}x)"),
    ]
    if e.expires:
        rows.append(("expires", iso(e.expires)))
    return "\n".join(f"{k:<9} {v}" for k, v in rows if v)


def _stats_text(d: dict[str, Any], scope: str | None = None) -> str:
    """The stats: the entries' rows count the scope asked; blocks, disk and tombstones are
    the whole store's (blocks are shared between scopes), which a scoped view says."""
    kinds = ", ".join(f"{_one(k)} {v['entries']}" for k, v in d["kinds"].items()) or "none"
    ratio = d["stored_bytes"] / d["raw_bytes"] if d["raw_bytes"] else 0.0
    whole = "" if scope is None else " (whole store)"
    return "\n".join(
        [
            f"entries   {d['entries']} ({d['cold']} cold, {d['hot']} hot, {d['pinned']} pinned)",
            f"kinds     {kinds}",
            f"tokens    {d['tokens']}",
            f"blocks    {d['blocks']}: {d['raw_bytes']} bytes raw, {d['stored_bytes']} stored"
            f" ({ratio:.2f}x){whole}",
            f"on disk   {d['disk_bytes']} bytes at {d['path']}{whole}",
            f"tombstones {d['tombstones']}{whole}",
        ]
    )


def _slice_lines(text: str, spec: str) -> str:
    """``--lines``: ``A-B``, ``A`` (that line), ``A-`` (from A to the end)."""
    lines = text.splitlines(keepends=True)
    try:
        a_s, dash, b_s = spec.partition("-")
        a = int(a_s)
        b = int(b_s) if b_s else (max(a, len(lines)) if dash else a)
    except ValueError as exc:
        raise InvalidInput(f"--lines wants A-B, A or A- (e.g. 10-40), got {spec!r}") from exc
    if a < 1 or b < a:
        raise InvalidInput(f"--lines {spec}: need 1 <= A <= B")
    if a > len(lines):
        raise InvalidInput(f"--lines {spec}: the body has {counted(len(lines), 'line')}")
    return "".join(lines[a - 1 : b])
