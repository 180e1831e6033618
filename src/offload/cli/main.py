"""The ``offload`` command: a thin dispatcher that imports only the command it runs.

Each command lives in ``offload.cli.<module>`` and exposes::

    def configure(parser: argparse.ArgumentParser) -> None   # add its arguments
    def run(args: argparse.Namespace, settings: Settings) -> int

and optionally ``def overrides(args) -> dict[str, object]`` mapping its flags to dotted
setting keys (``{"proxy.port": 9000}``). ``offload --help`` lists commands from the table
below without importing any of them, which keeps start-up fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import types
from collections.abc import Sequence
from typing import TYPE_CHECKING

from offload.cli.flags import add_global_flags

if TYPE_CHECKING:
    from offload.errors import OffloadError

# name -> (module under offload.cli, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "add": ("entries.store_cmds", "store text from stdin, an argument or --path"),
    "ls": ("entries.store_cmds", "list entries, most salient first"),
    "search": ("entries.store_cmds", "ranked full-text search with refs, lines and snippets"),
    "show": ("entries.store_cmds", "an entry's metadata and summary"),
    "cat": ("entries.store_cmds", "an entry's body (or --lines A-B)"),
    "pin": ("entries.store_cmds", "pin an entry (salience 1.0, never reaped)"),
    "unpin": ("entries.store_cmds", "clear an entry's pin"),
    "forget": ("entries.store_cmds", "remove an entry, leaving a tombstone"),
    "reap": ("entries.store_cmds", "forget idle, low-salience entries (--dry-run to preview)"),
    "stats": ("entries.store_cmds", "figures of a scope (--all-scopes: every scope) and the store"),
    "doctor": ("entries.maint_cmds", "re-hash every block, check references and the index, repair"),
    "export": ("entries.maint_cmds", "write a portable archive of the store"),
    "import": ("entries.maint_cmds", "load an archive written by export"),
    "store": (
        "entries.migrate_cmds",
        "store migrate --to URL: copy this store into another, verified",
    ),
    "config": ("config_cmds", "show the effective settings and where each came from"),
    "mcp": ("mcp_cmds", "serve the cooperative MCP tools (stdio, or --http)"),
    "proxy": ("proxy_cmds", "run the OpenAI-compatible proxy"),
    "replay": ("proxy_cmds", "replay a recorded transcript through the proxy pipeline"),
    "gateway": ("gateway_cmds", "run the MCP gateway over upstream MCP servers"),
    "serve": ("serve_cmds", "proxy + MCP + gateway + dashboard + /metrics on one port"),
    "context": ("sections_cmds", "cache-alignment report for context files"),
    "models": ("models_cmds", "local-model tools (models bench --endpoint URL)"),
    "setup": (
        "wiring.setup_cmds",
        "wire a client's MCP (or --provider) in its own config; --revert",
    ),
    "status": ("wiring.status_cmds", "store health, upstream and its n_ctx, serve, wired clients"),
}

# one example per command, shown at the end of its --help
EXAMPLES: dict[str, str] = {
    "add": "  offload add --path build.log --kind log --topic 'CI build' --tags ci,build\n"
    "  make test 2>&1 | offload add --kind log --label test-run",
    "ls": "  offload ls --kind log --limit 20",
    "search": "  offload search parseConfig --limit 5",
    "show": "  offload show test-run",
    "cat": "  offload cat ctx:sha256:3f2a9c1e --lines 10-40",
    "pin": "  offload pin 42",
    "unpin": "  offload unpin 42",
    "forget": "  offload forget 42 --reason 'held a secret'",
    "reap": "  offload reap --older-than 30 --max-salience 0.3 --dry-run",
    "stats": "  offload stats --json",
    "doctor": "  offload doctor --repair",
    "export": "  offload export backup.jsonl.zst",
    "import": "  offload import backup.jsonl.zst",
    "store": "  offload store migrate --to postgresql://offload@db.internal/offload",
    "config": "  offload config show",
    "mcp": "  offload mcp --http --port 8901",
    "proxy": "  offload proxy --upstream http://127.0.0.1:8080 --port 8900",
    "replay": "  offload replay session.jsonl",
    "gateway": "  offload gateway --config gateway.toml --http",
    "serve": "  offload serve --upstream http://127.0.0.1:8080",
    "context": "  offload context AGENTS.md CLAUDE.md",
    "models": "  offload models bench --endpoint http://127.0.0.1:8080/v1",
    "setup": "  offload setup claude-code --dry-run",
    "status": "  offload status",
}


def top_parser() -> argparse.ArgumentParser:
    """The parser of ``offload`` itself (its options and the list of commands)."""
    parser = argparse.ArgumentParser(
        prog="offload",
        description="Keep an LLM agent's context lean: a durable, searchable store behind stubs.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="commands:\n"
        + "\n".join(f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()),
    )
    add_global_flags(parser)
    parser.add_argument("command", nargs="?", help="one of the commands below")
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    return parser


def command_parser(command: str) -> tuple[types.ModuleType, argparse.ArgumentParser]:
    """The module running ``command`` and its parser: the global flags, the command's own
    (each with its help) and an example in the epilog."""
    module_name, help_ = COMMANDS[command]
    module = importlib.import_module(f"offload.cli.{module_name}")
    parser = argparse.ArgumentParser(
        prog=f"offload {command}",
        description=help_,
        epilog=f"example:\n{EXAMPLES[command]}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_global_flags(parser)
    configure = getattr(module, f"configure_{command}", None) or module.configure
    configure(parser)
    return module, parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``offload`` console script."""
    args_list = list(sys.argv[1:] if argv is None else argv)
    command = _find_command(args_list)
    if command is None or command not in COMMANDS:
        top = top_parser()
        if command is None and ("-h" in args_list or "--help" in args_list):
            top.print_help()
            return 0
        ns, unknown = top.parse_known_args(args_list)
        if ns.version:
            from offload import __version__

            print(f"offload {__version__}")
            return 0
        if command is not None:
            top.error(f"unknown command {command!r}; see `offload --help`")
        if unknown:
            top.error(f"unrecognized arguments: {' '.join(unknown)}; see `offload --help`")
        top.print_help()
        return 2
    module, parser = command_parser(command)
    rest = list(args_list)
    rest.remove(command)
    args = parser.parse_args(rest)
    args.command = command
    return _run(module, command, args)


def _find_command(args: list[str]) -> str | None:
    """The first word that is neither an option nor the value of a global option."""
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg in ("--config", "--home"):
            skip = True
        elif not arg.startswith("-"):
            return arg
    return None


def _check_unicode(args: argparse.Namespace) -> None:
    """Refuse an argument that is not UTF-8: the OS hands such bytes over as lone
    surrogates, which no ref, filter, label or stored field can hold. A NUL byte (which no
    real argv can carry, only a caller of :func:`main`) is refused too: no path holds one."""
    from offload.errors import EncodingError, InvalidInput

    for name, value in vars(args).items():
        for text in value if isinstance(value, list) else [value]:
            if isinstance(text, str) and "\x00" in text:
                shown = name if name in _POSITIONAL else "--" + name.replace("_", "-")
                raise InvalidInput(f"{shown} holds a NUL byte; no argument can")
            if isinstance(text, str) and not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    shown = name if name in _POSITIONAL else "--" + name.replace("_", "-")
                    quoted = repr(text) if len(text) <= 60 else repr(text[:60]) + "…"
                    # a file on disk may carry such a name: add can still read it on stdin
                    fix = "pipe the file in instead (offload add < FILE)" if name == "path" else ""
                    raise EncodingError(
                        f"{shown} is not valid UTF-8 text ({quoted}); {fix or 'pass UTF-8'}"
                    ) from None


# argparse destinations given without a leading ``--``
_POSITIONAL = frozenset({"text", "ref", "query", "file", "files", "trace", "action", "client"})


def _run(module: types.ModuleType, command: str, args: argparse.Namespace) -> int:
    from offload.config import load_settings
    from offload.errors import ConfigError, OffloadError

    settings = None
    try:
        flags: dict[str, object] = {}
        if args.home is not None and not args.home.strip():
            raise ConfigError("--home is empty; name the store directory, or leave it out")
        if args.home:
            flags["store.home"] = args.home
        _check_unicode(args)
        overrides = getattr(module, "overrides", None)
        if overrides is not None:
            flags.update(overrides(args))
        settings = load_settings(config_file=args.config, env=os.environ, flags=flags)
        runner = getattr(module, f"run_{command}", None) or module.run
        return int(runner(args, settings))
    except OffloadError as exc:
        return _failed(command, args, exc)
    except KeyboardInterrupt:
        # a write under way is one transaction: it is whole or absent (a progress line has
        # cleared itself by now)
        print(f"offload {command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (e.g. `offload cat X | head`): not an error
        sys.stderr.close()
        return 0
    except Exception as exc:
        # a damaged store file: one line, not a traceback (imported here: most commands
        # never get this far, and the store is heavy to import)
        from offload.store.sqlite.db import DATABASE_ERRORS, database_failure

        if not isinstance(exc, DATABASE_ERRORS) or settings is None:
            raise
        return _failed(command, args, database_failure(settings.db_path, exc))


def _failed(command: str, args: argparse.Namespace, exc: OffloadError) -> int:
    """Report ``exc`` in one line on stderr (and as an object on stdout with ``--json``);
    its exit code."""
    from offload.core.untrusted import inline
    from offload.errors import NotFound, OtherScope

    # the store leaves to its surface how to find an entry, or to reach every scope
    if isinstance(exc, NotFound):
        exc = exc.with_hint("list the entries to find it: `offload ls` or `offload search WORDS`")
    elif isinstance(exc, OtherScope):
        exc = exc.with_hint("ask for every scope to reach it: --all-scopes")
    if getattr(args, "json", False):
        # a --json caller reads stdout: the error is an object there too (one line)
        error = {"type": type(exc).__name__, "message": str(exc), "exit_code": exc.exit_code}
        print(json.dumps({"error": error}))
    # one line, no terminal escapes: messages may quote refs, paths, tombstone reasons
    print(f"offload {command}: error: {inline(str(exc))}", file=sys.stderr)
    return exc.exit_code


if __name__ == "__main__":
    raise SystemExit(main())
