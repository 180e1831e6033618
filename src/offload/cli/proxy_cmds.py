"""``offload proxy``: the OpenAI-compatible proxy (and ``offload replay``, same pipeline)."""

from __future__ import annotations

import argparse

from offload.cli.common import open_store
from offload.config import Settings


def configure_proxy(parser: argparse.ArgumentParser) -> None:
    """Flags of ``offload proxy``."""
    parser.add_argument(
        "--upstream", help="the model server's base URL (default http://127.0.0.1:8080)"
    )
    parser.add_argument("--host", help="listen address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help="listen port (default 8900)")
    parser.add_argument("--n-ctx", type=int, help="context size (default: the upstream's /props)")
    parser.add_argument("--model-alias", help="an extra model name advertised by /v1/models")
    parser.add_argument(
        "--log-level", default="info", choices=["debug", "info", "warning", "error"]
    )


def overrides(args: argparse.Namespace) -> dict[str, object]:
    """Flags as dotted settings keys (flags a command lacks are skipped)."""
    out: dict[str, object] = {}
    for flag, key in (
        ("upstream", "proxy.upstream"),
        ("host", "proxy.host"),
        ("port", "proxy.port"),
        ("n_ctx", "proxy.n_ctx"),
        ("model_alias", "proxy.model_alias"),
    ):
        value = getattr(args, flag, None)
        if value is not None and value != "":
            out[key] = value
    return out


def run_proxy(args: argparse.Namespace, settings: Settings) -> int:
    """Serve until interrupted; counters are flushed to the store on the way out."""
    import logging

    import uvicorn

    from offload.proxy.app import create_app

    level = str(getattr(args, "log_level", "info")).upper()
    logging.basicConfig(level=level, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    store = open_store(settings)
    try:
        app = create_app(settings.proxy, store)
        # access logs carry method, path and status only: never headers or keys
        uvicorn.run(
            app,
            host=settings.proxy.host,
            port=settings.proxy.port,
            log_level=level.lower(),
            lifespan="on",
        )
    finally:
        store.close()
    return 0
