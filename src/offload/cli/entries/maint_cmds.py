"""Maintenance commands: doctor, export, import."""

from __future__ import annotations

import argparse
from pathlib import Path

from offload.cli.common import emit, open_store, scope_name
from offload.cli.progress import Bar
from offload.config import Settings
from offload.core.text.wording import counted
from offload.core.untrusted import inline
from offload.errors import InvalidInput
from offload.store.life.archive import export_archive, import_archive
from offload.store.life.maintenance import compact, doctor, reindex
from offload.store.models import DoctorReport
from offload.store.write.vectors import backfill


def configure_doctor(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repair", action="store_true", help="fix what can be fixed")
    p.add_argument("--reindex", action="store_true", help="rebuild the search index from blocks")
    p.add_argument("--compact", action="store_true", help="merge the index, reclaim free pages")


def configure_export(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="archive to write (zstd-compressed JSON lines)")
    p.add_argument(
        "--scope",
        type=scope_name,
        help="only this scope's entries and tombstones (default: the whole store, its "
        "state and counters too)",
    )


def configure_import(p: argparse.ArgumentParser) -> None:
    p.add_argument("file", help="archive written by `offload export`")
    p.add_argument(
        "--accept-unverified",
        action="store_true",
        help="also import lossy entries whose original the archive does not carry (their "
        "content hash cannot be checked): only for an archive you trust",
    )
    p.add_argument(
        "--scope",
        type=scope_name,
        help="put every entry and tombstone into this scope, whatever scope the archive "
        "gives it (the archive's store-wide state and counters are left out)",
    )


def run_doctor(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings, existing=True) as store:
        if args.reindex:
            reindex(store, progress=Bar("reindexing"))
            backfill(store, progress=Bar("embedding"))
        report = doctor(store, repair=args.repair, progress=Bar("checking blocks"))
        if args.compact:
            before, after = compact(store)
            report.repaired.append(f"compacted the store: {before} -> {after} bytes")
    data = {
        "clean": report.clean,
        "blocks_checked": report.blocks_checked,
        "corrupt_blocks": report.corrupt_blocks,
        "missing_blocks": report.missing_blocks,
        "orphan_blocks": report.orphan_blocks,
        "unindexed_blocks": report.unindexed_blocks,
        "stale_chunks": report.stale_chunks,
        "index_ok": report.index_ok,
        "stale_hot": report.stale_hot,
        "chunk_map_off": report.chunk_map_off,
        "unreadable_counts": len(report.unreadable_counts),
        "bad_dictionaries": [{"id": str(i), "why": why} for i, why in report.bad_dictionaries],
        "unverified_content": report.unverified_content,
        "letter_tags": report.letter_tags,
        "repaired": report.repaired,
    }

    emit(args, data, lambda d: _doctor_text(report, args.repair))
    return 0 if report.clean or (args.repair and not report.corrupt_blocks) else 1


def _doctor_text(report: DoctorReport, repair: bool) -> str:
    """What doctor found and did, a line each."""
    lines = [
        f"checked {counted(report.blocks_checked, 'block')}: {'clean' if report.clean else 'problems found'}"
    ]
    for digest in report.corrupt_blocks:
        lines.append(f"corrupt block {digest[:16]} (its bytes no longer match the hash)")
    for digest in report.missing_blocks:
        lines.append(f"missing block {digest[:16]} (entries point at it)")
    if report.orphan_blocks:
        lines.append(f"{counted(len(report.orphan_blocks), 'orphan block')} (no entry uses them)")
    if report.unindexed_blocks:
        lines.append(f"{counted(len(report.unindexed_blocks), 'block')} missing from the index")
    if report.stale_chunks:
        lines.append(f"{counted(report.stale_chunks, 'index chunk')} of missing blocks")
    if not report.index_ok:
        lines.append("full-text index failed its integrity check")
    if report.stale_hot:
        lines.append(f"{counted(report.stale_hot, 'entry')} left hot by dead processes")
    if report.chunk_map_off:
        lines.append(f"{counted(report.chunk_map_off, 'chunk map row')} missing or extra")
    for dict_id, why in report.bad_dictionaries:
        shown = inline(str(dict_id), 40)
        lines.append(f"count dictionary {shown} is unusable: {why} (its counts read as none)")
    if report.unreadable_counts:
        n = len(report.unreadable_counts)
        whose = counted(n, "chunk's", "chunks'")
        lines.append(f"{whose} cached term counts unreadable (scored from their text)")
    if report.unverified_content:
        n = len(report.unverified_content)
        lines.append(
            f"{counted(n, 'entry')} whose content hash names content the store does not hold "
            "(cannot be verified: a lossy entry without its original)"
        )
    lines += [f"repaired: {r}" for r in report.repaired]
    if report.letter_tags:
        shown = ", ".join(f"#{i}" for i in report.letter_tags[:10])
        more = f" and {len(report.letter_tags) - 10} more" if len(report.letter_tags) > 10 else ""
        lines.append(
            f"note: {counted(len(report.letter_tags), 'entry')} ({shown}{more}) tagged with single "
            "letters: `offload add --tags` of 2026-12-01 to 2026-12-05 split the tags it was "
            "given into letters and the words are not kept; to tag one again, save its body "
            "(`offload cat`), `offload forget` it and add the body back with its tags "
            "(docs/upgrading.md)"
        )
    if not report.clean and not repair:
        lines.append("run `offload doctor --repair` to fix what can be fixed")
    return "\n".join(lines)


def run_export(args: argparse.Namespace, settings: Settings) -> int:
    path = Path(args.file)
    if not args.file.strip() or not path.name:  # "", "  ", ".", "/": no file to write
        raise InvalidInput(f"export needs a file name to write the archive to, got {args.file!r}")
    replaced = path.is_file()  # an older archive there is overwritten: say so
    with open_store(settings, existing=True) as store:
        n = export_archive(store, path, scope=args.scope, progress=Bar("exporting"))
        scopes = store.scope_counts() if args.scope is not None and n == 0 else {}
    tail = " (it replaced the file that was there)" if replaced else ""
    data = {"entries": n, "file": args.file, "replaced": replaced, "scope": args.scope}
    where = "" if args.scope is None else f" of scope {args.scope!r}"
    line = f"exported {counted(n, 'entry')}{where} to {args.file}{tail}"
    if scopes:  # a scope named wrong, most likely: say which scopes hold entries
        named = ", ".join(inline(name or "''") for name in sorted(scopes)[:5])
        more = f" and {len(scopes) - 5} more" if len(scopes) > 5 else ""
        line += f"\n(no entry is in that scope; the store's scopes: {named}{more})"
    emit(args, data, lambda d: line)
    return 0


def run_import(args: argparse.Namespace, settings: Settings) -> int:
    with open_store(settings) as store:
        n = import_archive(
            store,
            Path(args.file),
            progress=Bar("importing"),
            accept_unverified=args.accept_unverified,
            scope=args.scope,
        )
    where = "" if args.scope is None else f" into scope {args.scope!r}"
    emit(
        args,
        {"added": n, "file": args.file, "scope": args.scope},
        lambda d: f"imported {counted(n, 'new entry')}{where} from {args.file}",
    )
    return 0
