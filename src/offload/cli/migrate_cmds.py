"""``offload store migrate --to URL``: copy this store into another backend, verified.

The source is the store the settings name (the SQLite file in the home by default); the
target is ``--to`` (``postgresql://…`` for a team store, or ``sqlite:///path``). Every
entry, label, semantic vector, tombstone, state and counter is copied through the portable
archive, then every block is read back from the target and re-hashed and every vector
compared (store/migrate.py); only entries that had no vector are embedded. A re-run adds
only what is missing. URLs are shown without their password.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from offload.cli.common import emit, open_store
from offload.cli.flags import subcommand
from offload.cli.progress import Bar
from offload.config import Settings
from offload.core.urls import redact_url
from offload.errors import InvalidInput
from offload.store.migrate import migrate
from offload.store.vectors import backfill


def configure(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do")
    p = subcommand(
        actions,
        "migrate",
        "copy this store into another (a team store on PostgreSQL), verified",
        "offload store migrate --to postgresql://offload@db.internal/offload",
    )
    p.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the target store: postgresql://user@host/db (a team store) or sqlite:///path",
    )


def target_settings(settings: Settings, url: str) -> Settings:
    """The settings of the target store: these, with ``store.url`` = ``url`` (validated).

    Raises InvalidInput when the target is the source itself.
    """
    target = settings.with_overrides({"store.url": url})
    if _where(target) == _where(settings):
        raise InvalidInput(f"--to {redact_url(url)} is the store being migrated")
    return target


def _where(settings: Settings) -> str:
    url = settings.store.url
    if url and not url.startswith("sqlite:"):
        return url
    return str(settings.db_path.resolve())


def run(args: argparse.Namespace, settings: Settings) -> int:
    target = target_settings(settings, args.to)
    shown = redact_url(args.to)
    with (
        open_store(settings) as source,
        open_store(target) as dest,
        tempfile.TemporaryDirectory(prefix="offload-migrate-") as work,
    ):
        report = migrate(
            source,
            dest,
            Path(work),
            on_export=Bar("reading"),
            on_import=Bar("writing"),
            on_verify=Bar("verifying"),
        )
        embedded = backfill(dest, progress=Bar("embedding"))
    data = {
        "to": shown,
        "entries": report.exported,
        "added": report.added,
        "blocks_verified": report.blocks_checked,
        "vectors_verified": report.vectors_checked,
        "embedded": embedded,
    }
    emit(
        args,
        data,
        lambda d: (
            f"migrated {report.exported} entries to {shown} ({report.added} new); "
            f"{report.blocks_checked} blocks re-hashed and {report.vectors_checked} vectors "
            "compared on the target: all intact"
        ),
    )
    return 0
