"""``offload store migrate --to URL``: copy this store into another backend, verified.

The source is the store the settings name (the SQLite file in the home by default); the
target is ``--to`` (``postgresql://…`` for a team store, or ``sqlite:///path``). Every
entry, label, semantic vector, tombstone, state and counter is copied through the portable
archive, then every block is read back from the target and re-hashed and every vector
compared (store/life/migrate.py); only entries that had no vector are embedded. A re-run adds
only what is missing. URLs are shown without their password.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from offload.cli.common import emit, open_store, scope_name
from offload.cli.flags import subcommand
from offload.cli.progress import Bar
from offload.config import Settings
from offload.core.text.wording import counted
from offload.core.urls import redact_url
from offload.errors import InvalidInput
from offload.store.life.migrate import migrate
from offload.store.write.vectors import backfill


def configure(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do")
    migrating = subcommand(
        actions,
        "migrate",
        "copy this store into another (a team store on PostgreSQL), verified",
        "offload store migrate --to postgresql://offload@db.internal/offload",
    )
    migrating.add_argument(
        "--to",
        metavar="URL",
        help="the target store: postgresql://user@host/db (a team store) or sqlite:///path",
    )
    restrict = subcommand(
        actions,
        "restrict",
        "hold a PostgreSQL role to some scopes in the database itself (row-level security)",
        "offload store restrict team_b --scope github.com/acme/proj-b --scope shared",
    )
    restrict.add_argument("role", help="the PostgreSQL role to restrict")
    restrict.add_argument(
        "--scope",
        type=scope_name,
        action="append",
        default=[],
        metavar="NAME",
        help="a scope the role may touch (repeatable; restrict replaces its earlier scopes)",
    )
    unrestrict = subcommand(
        actions,
        "unrestrict",
        "lift a PostgreSQL role's hold to its scopes",
        "offload store unrestrict team_b",
    )
    unrestrict.add_argument("role", help="the PostgreSQL role to lift")
    subcommand(actions, "roles", "list the roles held to scopes", "offload store roles")


def target_settings(settings: Settings, url: str) -> Settings:
    """The settings of the target store: these, with ``store.url`` = ``url`` (validated).

    Raises InvalidInput when the target is the source itself.
    """
    target = settings.with_overrides({"store.url": url})
    if _where(target) == _where(settings):
        raise InvalidInput(f"--to {redact_url(url)} is the store being migrated")
    folder = target.db_path.parent
    if url.startswith("sqlite:") and not folder.is_dir():
        # a mistyped path must not make directories from the filesystem's root down
        raise InvalidInput(f"--to {redact_url(url)}: no directory {folder}; make it first")
    return target


def _where(settings: Settings) -> str:
    url = settings.store.url
    if url and not url.startswith("sqlite:"):
        return url
    return str(settings.db_path.resolve())


def run(args: argparse.Namespace, settings: Settings) -> int:
    if args.action != "migrate":
        return _run_roles(args, settings)
    if not args.to:
        raise InvalidInput("store migrate needs --to URL (the target store)")
    target = target_settings(settings, args.to)
    shown = redact_url(args.to)
    with (
        open_store(settings, existing=True) as source,
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
            f"migrated {counted(report.exported, 'entry')} to {shown} ({report.added} new); "
            f"{counted(report.blocks_checked, 'block')} re-hashed and "
            f"{counted(report.vectors_checked, 'vector')} "
            "compared on the target: all intact"
        ),
    )
    return 0


def _run_roles(args: argparse.Namespace, settings: Settings) -> int:
    """``store restrict | unrestrict | roles``: row-level security on a team store
    (store/postgres/pgscopes.py, docs/team-store.md); run as the schema's owner."""
    if args.action != "roles" and not getattr(args, "role", None):
        raise InvalidInput(f"store {args.action} needs a ROLE")
    with open_store(settings) as store:
        if args.action == "restrict":
            store.restrict_role(args.role, args.scope)
            text = f"role {args.role} is held to scope(s) {', '.join(sorted(set(args.scope)))}"
        elif args.action == "unrestrict":
            n = store.unrestrict_role(args.role)
            text = f"role {args.role} is no longer held to scopes ({n} lifted)"
        else:
            text = ""
        roles = store.restricted_roles()
    lines = [f"{r}: {', '.join(s)}" for r, s in roles.items()] or ["no role is held to scopes"]
    emit(args, {"roles": roles}, lambda d: text or "\n".join(lines))
    return 0
