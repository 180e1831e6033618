"""``offload proxy``: the OpenAI-compatible proxy (and ``offload replay``, same pipeline)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING

from offload.cli.common import held_port, open_store, server_logging
from offload.cli.progress import Bar
from offload.config import Settings
from offload.core.http.listen import SHUTDOWN_GRACE_S

if TYPE_CHECKING:
    import socket

    from offload.proxy.rewrite.replay import Report, Run, Turn


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
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="log verbosity on stderr; debug adds a line per request (default info)",
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
    # before the banner, the store and uvicorn: a taken port is one line, exit 7
    with held_port(settings.proxy.host, settings.proxy.port, "proxy.port") as sock:
        _serve_proxy(args, settings, sock)
    return 0


def _serve_proxy(args: argparse.Namespace, settings: Settings, sock: socket.socket | None) -> None:
    import os
    import sys

    from offload.serve.heap import freeze_startup, tune_heap

    # before any worker thread: a long-running process keeps its heap compact
    tune_heap(os.environ)

    import uvicorn

    from offload.cli.headers_deadline import bounded_http
    from offload.proxy.app import banner, create_app, proxy_settings

    level = server_logging(args)
    store = open_store(settings, serving=True)
    try:
        print(banner(settings.proxy), file=sys.stderr, flush=True)
        app = create_app(proxy_settings(settings), store, http=settings.http)
        freeze_startup()  # what starting made lives as long as the process: never walk it
        # access logs carry method, path and status only: never headers or keys
        config = uvicorn.Config(
            app,
            host=settings.proxy.host,
            port=settings.proxy.port,
            log_level=level.lower(),
            # a line per request costs ~0.1 ms on the streaming path; --log-level debug has it
            access_log=level == "DEBUG",
            lifespan="on",
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
            http=bounded_http(settings.http),
        )
        uvicorn.Server(config).run(sockets=None if sock is None else [sock])
    finally:
        store.close()


# -- offload replay ------------------------------------------------------------------------


#: How to read a line of ``offload replay`` (its --help and docs/cli.md show it); the line
#: is rendered by offload.proxy.rewrite.replay.render_turn.
TURN_LINE = """\
reading a turn's line:
  RUN #TURN  msgs N  client T  wire T  stubs +N  FLAGS [CAUSE] [PROBLEM: ...]
  msgs: messages the client sent; client / wire: their tokens as sent by the client
  and as the proxy put them on the wire; stubs +N: stubs made on this turn.
  FLAGS, three characters:
    W  the window moved on this turn (a compaction paged messages out), - it did not
    E  the emergency ceiling (proxy.emergency of n_ctx) acted, - it did not
    =  the wire begins with the previous turn's wire (the upstream's prompt cache hits)
    !  it does not (a prefix break), followed by its cause: windowing, client_edit,
       new_session, restart, moved, stubs_restored, recall or loop_note
  e.g. `--=` nothing moved and the prefix held; `WE! windowing` an emergency
  compaction that broke the prefix. PROBLEM: a per-turn check failed (the wire over
  the ceiling, the tail not verbatim, the wire not expanding back to the client's
  messages); the command then exits 1. --no-verify skips the checks."""


def configure_replay(parser: argparse.ArgumentParser) -> None:
    """Flags of ``offload replay``, and how to read its lines (the epilog)."""
    parser.epilog = f"{TURN_LINE}\n\n{parser.epilog or ''}".rstrip()
    parser.add_argument("trace", metavar="TRACE.jsonl", help="one run per line, OpenAI chat format")
    parser.add_argument(
        "--n-ctx", type=int, help="context size to replay under (default proxy.n_ctx, else 8192)"
    )
    parser.add_argument(
        "--chain", action="store_true", help="append the file's runs into one continuous session"
    )
    parser.add_argument(
        "--no-verify",
        action="store_true",
        help="skip the per-turn checks (ceiling, verbatim tail, stubs expand to the original)",
    )
    parser.add_argument(
        "--keep-store",
        action="store_true",
        help="write stubs into the configured store instead of a temporary one",
    )


NO_TURNS = (
    "offload replay: no turn to replay: a turn is the request before each assistant message, "
    "and the transcript has none after its first message"
)


def run_replay(args: argparse.Namespace, settings: Settings) -> int:
    """Replay a transcript turn by turn through the proxy pipeline; 1 when a check failed."""
    import json
    import sys

    from offload.errors import InvalidInput
    from offload.proxy.rewrite.replay import chain_runs, load_runs, render_totals

    n_ctx = args.n_ctx or settings.proxy.n_ctx or 8192
    if n_ctx <= 0:
        raise InvalidInput(f"--n-ctx must be positive, got {n_ctx}")
    runs = load_runs(args.trace)
    if args.chain:
        runs = [chain_runs(runs)]
    as_json = bool(getattr(args, "json", False))
    report = _replayed(args, settings, runs, n_ctx, _turn_shower(runs, as_json))
    totals = report.totals()
    if as_json:
        json.dump(report.to_json(), sys.stdout, ensure_ascii=False, indent=1)
        sys.stdout.write("\n")
    else:
        print(render_totals(totals))
    return 1 if totals["problems"] else 0


def _turn_shower(runs: list[Run], as_json: bool) -> Callable[[Turn], None]:
    """What each replayed turn shows: a line of text, or with --json a bar on stderr
    saying how far it is."""
    import sys

    from offload.proxy.rewrite.replay import render_turn, turn_points

    bar = Bar("replaying turns") if as_json else None
    total = sum(len(turn_points(run.messages)) for run in runs)
    if not total:
        print(NO_TURNS, file=sys.stderr)
    done = 0

    def show(turn: Turn) -> None:
        nonlocal done
        done += 1
        if bar is not None:
            bar(done, total)
        else:
            print(render_turn(turn), flush=True)

    return show


def _replayed(
    args: argparse.Namespace,
    settings: Settings,
    runs: list[Run],
    n_ctx: int,
    show: Callable[[Turn], None],
) -> Report:
    """``runs`` through a pipeline on a temporary store (the configured one with
    --keep-store)."""
    import tempfile
    from pathlib import Path

    from offload.core.tokens import default_counter
    from offload.proxy.rewrite.messages import wants_alternation
    from offload.proxy.rewrite.pipeline import Pipeline
    from offload.proxy.rewrite.replay import replay
    from offload.store.store import Store

    counter = default_counter()
    alternate = wants_alternation(settings.proxy.alternate_roles)  # no upstream: no template
    with tempfile.TemporaryDirectory(prefix="offload-replay-") as tmp:
        store = (
            open_store(settings)
            if args.keep_store
            else Store(Path(tmp) / "replay.db", settings.store, counter=counter)
        )
        try:
            pipeline = Pipeline(store, settings.proxy, counter, scope="replay")
            return replay(
                runs,
                pipeline,
                n_ctx,
                chained=args.chain,
                verify=not args.no_verify,
                on_turn=show,
                alternate=alternate,
            )
        finally:
            store.close()
