"""``offload config show``: the effective settings and where each came from."""

from __future__ import annotations

import argparse

from offload.cli.common import emit
from offload.cli.flags import subcommand
from offload.config import Settings, explain
from offload.core.urls import redact_setting


def configure(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION", help="what to do")
    subcommand(
        actions,
        "show",
        "show the effective settings and where each came from",
        "offload config show --json",
    )


def run(args: argparse.Namespace, settings: Settings) -> int:
    # a credential (proxy.bearer_token) or a URL's password (proxy.upstream): never in clear
    rows = [(k, redact_setting(k, v), s) for k, v, s in explain(settings)]
    data = {
        "home": str(settings.home),
        "settings": {k: {"value": v, "source": s} for k, v, s in rows},
    }

    def text(d: object) -> str:
        width = max(len(k) for k, _, _ in rows)
        out = [f"# store: {settings.db_path}"]
        out += [f"{k:<{width}} = {v!r:<30} # {s}" for k, v, s in rows]
        return "\n".join(out)

    emit(args, data, text)
    return 0
