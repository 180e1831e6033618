"""Settings: defaults < TOML file < ``OFFLOAD_*`` environment < flags.

Built once at the edge (the CLI, a test, a library caller) into one frozen
:class:`Settings` and passed down. Nothing else in offload reads the environment.

Environment names are ``OFFLOAD_<SECTION>__<FIELD>`` (``OFFLOAD_PROXY__HIGH_WATER=0.6``),
plus ``OFFLOAD_HOME`` for the store directory. Flags arrive as the same dotted keys
(``{"proxy.high_water": 0.6}``). Each effective value remembers where it came from, so
``offload config show`` can say it, and only values that differ from the defaults are
ever written back to a file.
"""

from __future__ import annotations

import dataclasses
import math
import os
import tomllib
import types
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from offload.errors import ConfigError


@dataclass(frozen=True)
class StoreSettings:
    """Where the store lives and how it behaves."""

    home: str = ""  # empty: the platform data dir
    busy_timeout_s: float = 15.0
    # SQLite connections a process opens at most, each lent to one store call at a time
    # (store/sqlite/pool.py): what bounds its file descriptors and page caches however many
    # threads call the store; a call that finds all lent waits up to busy_timeout_s
    connections: int = 8
    synchronous: str = "NORMAL"  # NORMAL survives process crashes; FULL also power loss
    chunk_lines: int = 60
    chunk_chars: int = 4000
    max_file_bytes: int = 8 * 1024 * 1024
    # what `offload import` reads of an archive before refusing it (store/life/archive_read.py):
    # the longest record (one line of text), how many records, how much text in all
    import_max_line_mb: int = 256
    import_max_records: int = 10_000_000
    import_max_mb: int = 16384
    # how a project's default scope is named: "path" (its git root on this machine) or
    # "remote" (its normalised git remote URL, shared by every clone: for a team store)
    scope_by: str = "path"
    # where the store is: "" (the SQLite file in home), sqlite:///path, or postgresql://...
    # (a team store; user, password, TLS options in the URL or libpq's PG* files)
    url: str = ""

    def __post_init__(self) -> None:
        if self.home.startswith("~") and self.home != "~" and not self.home.startswith("~/"):
            raise ConfigError(
                f"the store directory {self.home[:200]!r} (--home, OFFLOAD_HOME, store.home) "
                "names a user's home (~user), which offload does not look up: give the full path"
            )
        if self.scope_by not in SCOPE_BY:
            raise ConfigError(
                f"store.scope_by must be one of {', '.join(SCOPE_BY)}, got {self.scope_by!r}"
            )
        if self.url.startswith("sqlite://") and not self.url.startswith("sqlite:///"):
            raise ConfigError("store.url: a SQLite URL is sqlite:///absolute/path")
        if self.url and not self.url.startswith(STORE_URL_SCHEMES):
            # only the scheme: the rest may hold a password
            scheme = self.url.split("://", 1)[0] if "://" in self.url else "(none)"
            raise ConfigError(
                f"store.url must start with sqlite:/// or postgresql://, got scheme {scheme!r}"
            )


SCOPE_BY = ("path", "remote")
STORE_URL_SCHEMES = ("sqlite:///", "postgresql://", "postgres://")


@dataclass(frozen=True)
class SearchSettings:
    """Ranking and limits of full-text search."""

    default_limit: int = 5
    max_limit: int = 20
    snippet_chars: int = 300
    # hybrid ranking: an offline embedding model's similarity fused with BM25 (llm/embedding.py;
    # EMBEDDING_MODELS: the shipped static model, or MINILM_MODEL from offload[tools])
    semantic: bool = True
    embedding_model: str = "wordllama-l2_supercat-256"
    semantic_weight: float = 0.2  # its share of the fused score; lexical keeps the rest
    # a long-running process (serve, mcp, proxy, gateway, a library caller) keeps the body
    # index in memory for BM25 (store/search/memory/resident.py), built in the background on its first
    # search, up to this many MB (0: off; a one-shot CLI search never builds it)
    resident_mb: int = 512
    # a process that serves (serve, proxy) lets the in-memory copies (the index, its entry
    # maps, the vector matrix) go after this many seconds without a search, and hands the
    # memory back; the next search rebuilds them, answered the SQL way meanwhile (0: kept)
    resident_idle_s: float = 30.0

    def __post_init__(self) -> None:
        if self.resident_mb < 0:
            raise ConfigError(f"search.resident_mb must be 0 or more, got {self.resident_mb}")
        if self.embedding_model not in EMBEDDING_MODELS:
            known = ", ".join(EMBEDDING_MODELS)
            raise ConfigError(
                f"search.embedding_model {self.embedding_model!r} is not known (known: {known})"
            )
        if not 0.0 <= self.semantic_weight < 1.0:
            raise ConfigError(
                f"search.semantic_weight must be within [0, 1), got {self.semantic_weight}"
            )


# all-MiniLM-L6-v2 as int8 ONNX (offload.llm.minilm, installed by offload[tools])
MINILM_MODEL = "all-MiniLM-L6-v2-int8"
# the models offload.llm.embedding.load_embedder can load (kept here so settings validate
# without it)
EMBEDDING_MODELS = ("wordllama-l2_supercat-256", MINILM_MODEL)


@dataclass(frozen=True)
class McpSettings:
    """The cooperative MCP server."""

    scope: str = ""  # empty: the git root of the working directory
    roots: tuple[str, ...] = ()  # empty: the project root
    tools: tuple[str, ...] = ()  # empty: every tool
    host: str = "127.0.0.1"
    port: int = 8901
    churn_window_s: float = 120.0
    read_limit_lines: int = 200
    read_cap_bytes: int = 64 * 1024
    bearer_token: str = ""
    # extra browser origins for --http (the served one, loopback on this port, always)
    allowed_origins: tuple[str, ...] = ()


@dataclass(frozen=True)
class ProxySettings:
    """The OpenAI-compatible proxy."""

    upstream: str = "http://127.0.0.1:8080"
    host: str = "127.0.0.1"
    port: int = 8900
    model_alias: str = ""
    n_ctx: int = 0  # 0: read from the upstream's /props
    stub_ratio: float = 0.02
    high_water: float = 0.80
    target: float = 0.20
    emergency: float = 0.85
    tail_messages: int = 4
    # page chats only up to a user message, for templates that refuse two messages of one
    # role in a row: "auto" (when the upstream's chat template says so), "always", "never"
    alternate_roles: str = "auto"
    timeout_s: float = 600.0
    # a streamed answer's first byte (its headers, which come with the first token) must
    # arrive this soon, so a hung upstream does not hold a client for timeout_s
    first_byte_timeout_s: float = 120.0
    bearer_token: str = ""
    # extra Host values (and Origins) accepted besides loopback ones, for a non-loopback bind
    allowed_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    props_refresh_s: float = 60.0  # re-read n_ctx from /props at most this often
    tokenize_timeout_s: float = 2.0  # a slower /tokenize falls back to the offline counter
    metrics_flush_s: float = 1.0  # persisted counters lag the live ones by at most this
    metrics_sessions: int = 200  # sessions whose counters are kept (most recent first)
    # the store scope of paged-out messages; empty: the MCP server's own (mcp.scope, else
    # the git root of the working directory), so the project's search finds them
    scope: str = ""
    # auto-recall: each turn, the best hits of the live tail's words in what this session
    # paged out ("session") or the whole scope ("project"), as one block of at most this
    # share of n_ctx (0: off)
    recall_ratio: float = 0.04
    recall_scope: str = "session"
    # a block is sent only when one of its records brings back at least this share of the
    # query's weight in terms the rest of the wire lacks (the conversation returns to
    # something paged out); every block costs the upstream its tokens again next turn, so
    # higher keeps more of its KV cache, lower brings back more (0: a block every turn)
    recall_min_new: float = 0.3
    # the loop guard: the same assistant call (or text) this many times in a row gets a
    # short note on the wire telling the model so (0: off)
    loop_repeats: int = 3
    # learn each harness's own compaction size and keep its wire under it; off by default:
    # a new conversation that opens like an earlier one shares its session and looks alike
    learn_client_ceiling: bool = False
    # transparent retrieval: offer the upstream model the proxy's own memory tools (read a
    # reference, search this session's memory) and answer its calls of them without the
    # client seeing them: "auto" (unless the upstream says its template has no tools),
    # "on", "off"; at most this many rounds of them per answer
    retrieval: str = "auto"
    retrieval_rounds: int = 4
    # a bulky message that repeats an earlier one with a few lines changed (a file read
    # again after an edit, a command run again) gets a stub naming that earlier body and
    # the changed lines instead of a gist of the whole
    delta_stubs: bool = True
    # the most bytes, in MiB, of one server-sent event from the upstream (a line, or lines
    # with no blank line after them): an upstream that streams past it without ending an
    # event gets its request cancelled, and the client an error event in its stream
    max_event_mb: int = 4
    # the most bytes, in MiB, of a whole (not streamed) answer from the upstream: past it
    # the request is cancelled and the client gets a 502 in its shape (an answer with
    # every token's log-probabilities runs to a few MiB; a model's text far less)
    max_answer_mb: int = 64

    @property
    def max_event_bytes(self) -> int:
        """``max_event_mb`` in bytes."""
        return self.max_event_mb * 1024 * 1024

    @property
    def max_answer_bytes(self) -> int:
        """``max_answer_mb`` in bytes."""
        return self.max_answer_mb * 1024 * 1024

    def __post_init__(self) -> None:
        if self.retrieval not in ("auto", "on", "off"):
            raise ConfigError(
                f"proxy.retrieval must be one of auto, on, off, got {self.retrieval!r}"
            )
        rounds = self.retrieval_rounds
        if isinstance(rounds, bool) or not isinstance(rounds, int) or not 1 <= rounds <= 16:
            raise ConfigError(f"proxy.retrieval_rounds must be from 1 to 16, got {rounds!r}")
        limit = self.first_byte_timeout_s
        if not 0 < limit < float("inf"):
            raise ConfigError(
                f"proxy.first_byte_timeout_s must be a number of seconds above 0, got {limit!r}"
            )


@dataclass(frozen=True)
class GatewaySettings:
    """The MCP gateway."""

    config: str = ""
    response_threshold: int = 16384
    catalog_threshold: int = 16384
    search_tool: str = "IndexSearch"
    read_tool: str = "IndexRead"
    call_timeout_s: float = 60.0
    host: str = "127.0.0.1"
    port: int = 8902
    index_responses: bool = True  # job 1, globally; [clients.NAME] may override
    compress_catalog: bool = True  # job 2, globally; [clients.NAME] may override
    call_tool_name: str = "call_tool"  # the meta-tool that calls a deferred tool directly
    scope: str = "gateway"  # the store scope of indexed responses and tool definitions
    preview_bytes: int = 2048
    instructions_threshold: int = 2048  # server instructions longer than this may be indexed
    connect_timeout_s: float = 30.0
    reconnect_max_s: float = 10.0
    max_active_tools: int = 16  # deferred tools a client has back in tools/list at once
    # what one upstream's catalog may hold: past either, its first tools that fit are kept
    # (in the order it lists them) and the rest are left out, said in the log, the
    # gateway's instructions and /api/stats
    max_upstream_tools: int = 1000
    max_upstream_catalog_mb: int = 8
    # one message from an upstream (a stdio line, a JSON body, a server-sent event): a
    # longer one is dropped as it arrives and the call it answered gets an error
    max_upstream_message_mb: int = 64
    # tool search with all-MiniLM-L6-v2 when offload[tools] is installed (llm/minilm.py)
    tool_model: bool = True
    # when set, the gateway's HTTP endpoint (--http, and /gateway/mcp in serve) requires
    # Authorization: Bearer <token>
    bearer_token: str = ""


@dataclass(frozen=True)
class LocalModelSettings:
    """An optional OpenAI-compatible endpoint used for lossy compression and distillation."""

    base_url: str = ""
    model: str = ""
    api_key: str = ""
    compress_target_tokens: int = 256
    distill_target_tokens: int = 384
    timeout: float = 60.0
    retries: int = 1
    chunk_tokens: int = 1500


@dataclass(frozen=True)
class SectionsSettings:
    """The library's section compression."""

    ttl_days: float = 7.0
    retrieve_tool: str = "RetrieveContext"


@dataclass(frozen=True)
class HttpSettings:
    """What every HTTP route of every surface accepts (``offload serve``, ``proxy``,
    ``mcp --http``, ``gateway --http``)."""

    # the largest request body, in MiB: sized for a long agent prompt with its tool outputs
    # (a 200k-token context is ~1 MB of JSON), far below what would exhaust memory
    max_body_mb: int = 32
    # the longest the whole request body may take to arrive, counted from the request's
    # headers: a slow or stalled body (slowloris) is answered 408 and its connection closed
    # past it; generous for a 32 MiB body on a slow link, short against a held connection
    body_timeout_s: float = 60.0
    # the longest a request's headers may take to arrive, counted from the connection (or,
    # on a kept-alive connection, the request's first byte): a client sends them in one
    # write, so this only ends a connection held open by sending them slowly or not at all
    header_timeout_s: float = 20.0
    # the most bytes a request's line and headers may take, in KiB: past it the answer is
    # 431 and the connection is closed (nginx allows 32 KiB, h11 16 KiB); a client sending
    # header lines without end no longer grows the server's memory
    max_header_kb: int = 64
    # the most connections served at once: a request on a connection past it is answered
    # 503 in its route's shape and the connection closed (long-lived MCP streams count)
    max_connections: int = 256

    @property
    def max_body_bytes(self) -> int:
        """``max_body_mb`` in bytes."""
        return self.max_body_mb * 1024 * 1024

    @property
    def max_header_bytes(self) -> int:
        """``max_header_kb`` in bytes."""
        return self.max_header_kb * 1024


#: The HTTP bounds of a surface built without settings (a test, a library caller).
HTTP_DEFAULTS = HttpSettings()


@dataclass(frozen=True)
class Settings:
    """Every setting offload has, frozen. Build with :func:`load_settings`."""

    store: StoreSettings = field(default_factory=StoreSettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    mcp: McpSettings = field(default_factory=McpSettings)
    proxy: ProxySettings = field(default_factory=ProxySettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    local_model: LocalModelSettings = field(default_factory=LocalModelSettings)
    sections: SectionsSettings = field(default_factory=SectionsSettings)
    http: HttpSettings = field(default_factory=HttpSettings)
    # dotted key -> "default" | "file:<path>" | "env:<NAME>" | "flag"
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def home(self) -> Path:
        """The store directory (created on first use by the store, not here)."""
        return _expanded(self.store.home) if self.store.home else default_home()

    @property
    def db_path(self) -> Path:
        """The SQLite database file (``store.url``'s when it names one)."""
        if self.store.url.startswith("sqlite:///"):
            return Path(self.store.url[len("sqlite://") :])
        return self.home / "offload.db"

    def with_overrides(self, overrides: Mapping[str, Any]) -> Settings:
        """A copy with dotted-key overrides applied (recorded as flags)."""
        return _build({k: (v, "flag") for k, v in overrides.items()}, base=self)


SECTION_NAMES = tuple(f.name for f in dataclasses.fields(Settings) if f.name != "sources")


def _expanded(home: str) -> Path:
    """``home`` with a leading ``~/`` made the user's home (as it is where none is known)."""
    try:
        return Path(home).expanduser()
    except RuntimeError:
        return Path(home)


def default_home() -> Path:
    """The platform data directory for offload (``~/.local/share/offload`` on Linux)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("offload", appauthor=False))


def load_settings(
    *,
    config_file: str | Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> Settings:
    """Build the effective settings: defaults < TOML < environment < flags.

    ``env`` is passed in by the edge (normally ``os.environ``); nothing here reads it.
    The TOML file is ``config_file``, else ``offload.toml`` in the store directory.
    """
    env = dict(env or {})
    flag_items = dict(flags or {})
    if "OFFLOAD_HOME" in env and not env["OFFLOAD_HOME"].strip():
        raise ConfigError(
            "OFFLOAD_HOME is set but empty; set it to the store directory, or unset it for "
            "the default one"
        )
    home = flag_items.get("store.home") or env.get("OFFLOAD_HOME")
    path = Path(config_file) if config_file else None
    if path is None:
        candidate = (_expanded(str(home)) if home else default_home()) / "offload.toml"
        path = candidate if _is_file(candidate) else None
    elif not _is_file(path):
        shown = str(path)[:200]
        if _is_dir(path):
            raise ConfigError(f"config file {shown!r} is a directory; name a TOML file in it")
        raise ConfigError(f"config file {shown!r} does not exist")

    layered: dict[str, tuple[Any, str]] = {}
    if path is not None:
        for key, value in _flatten_toml(_read_toml(path), f"file:{path}").items():
            layered[key] = (value, f"file:{path}")
    if env.get("OFFLOAD_HOME"):
        layered["store.home"] = (env["OFFLOAD_HOME"], "env:OFFLOAD_HOME")
    for name, value in env.items():
        if name.startswith("OFFLOAD_") and "__" in name:
            section, _, fld = name[len("OFFLOAD_") :].partition("__")
            layered[f"{section.lower()}.{fld.lower()}"] = (value, f"env:{name}")
    for key, value in flag_items.items():
        layered[key] = (value, "flag")
    return _build(layered, base=Settings())


def environ() -> Mapping[str, str]:
    """The process environment, for edges to pass to :func:`load_settings`."""
    return os.environ


def explain(settings: Settings) -> list[tuple[str, Any, str]]:
    """Every dotted key with its effective value and where it came from."""
    rows: list[tuple[str, Any, str]] = []
    for section in SECTION_NAMES:
        obj = getattr(settings, section)
        for f in dataclasses.fields(obj):
            key = f"{section}.{f.name}"
            rows.append((key, getattr(obj, f.name), settings.sources.get(key, "default")))
    return rows


# settings whose value is a credential, by the name's ending (a new ``*_token`` or
# ``*api_key`` setting is covered without registering it): shown masked, never in clear
SECRET_ENDINGS = ("token", "api_key", "apikey", "password", "secret")


def is_secret(key: str) -> bool:
    """Whether the dotted setting ``key`` holds a credential (``proxy.bearer_token``)."""
    return key.rpartition(".")[2].lower().endswith(SECRET_ENDINGS)


def non_default(settings: Settings) -> dict[str, dict[str, Any]]:
    """Only the values that differ from the defaults, nested by section (for writing back)."""
    defaults = Settings()
    out: dict[str, dict[str, Any]] = {}
    for section in SECTION_NAMES:
        cur, dft = getattr(settings, section), getattr(defaults, section)
        for f in dataclasses.fields(cur):
            value = getattr(cur, f.name)
            if value != getattr(dft, f.name):
                out.setdefault(section, {})[f.name] = value
    return out


def _is_file(path: Path) -> bool:
    """``path`` is a regular file; False for a name no filesystem can hold (over 255
    bytes, a NUL byte), which ``Path.is_file`` raises on."""
    try:
        return path.is_file()
    except (OSError, ValueError):
        return False


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except (OSError, ValueError):
        return False


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
    except UnicodeDecodeError as exc:  # TOML is UTF-8; this is some other file
        raise ConfigError(f"{path}: not UTF-8 text, so not a TOML settings file") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


# tables of a settings file that other readers own: the gateway's [servers.*], [clients.*]
FOREIGN_TABLES = ("servers", "clients")


def _flatten_toml(data: Mapping[str, Any], origin: str) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for section, body in data.items():
        if section in FOREIGN_TABLES:
            continue
        if section not in SECTION_NAMES:
            # a misspelt table would otherwise change nothing, silently
            what = f"table [{section}]" if isinstance(body, dict) else f"key {section!r}"
            raise ConfigError(
                f"unknown {what} (from {origin}); settings go under "
                + ", ".join(f"[{name}]" for name in SECTION_NAMES)
            )
        if not isinstance(body, dict):
            raise ConfigError(f"[{section}] must be a table")
        for key, value in body.items():
            flat[f"{section}.{key}"] = value
    return flat


def _build(layered: Mapping[str, tuple[Any, str]], base: Settings) -> Settings:
    sources = dict(base.sources)
    per_section: dict[str, dict[str, Any]] = {}
    for key, (raw, origin) in layered.items():
        section, _, name = key.partition(".")
        if section not in SECTION_NAMES:
            raise ConfigError(f"unknown setting {key!r} (from {origin})")
        obj = getattr(base, section)
        hints = typing.get_type_hints(type(obj))
        if name not in hints:
            raise ConfigError(f"unknown setting {key!r} (from {origin})")
        per_section.setdefault(section, {})[name] = _coerce(key, raw, hints[name], origin)
        sources[key] = origin
    replaced = {
        section: dataclasses.replace(getattr(base, section), **values)
        for section, values in per_section.items()
    }
    built = dataclasses.replace(base, sources=sources, **replaced)
    check(built)
    return built


# -- ranges and orderings ---------------------------------------------------------------------
# Every number has a range, so a typo fails at start with one line naming the setting instead
# of a budget that makes no sense later. By default an int counts something (>= 1) and a float
# is a duration or size (> 0, finite); the exceptions are listed here, so a new setting is
# checked without registering it.
_INT_FLOOR_ZERO = {
    "proxy.n_ctx",
    "proxy.tail_messages",
    "local_model.retries",
    "search.resident_mb",  # 0: no in-memory index
}
# durations where 0 means off
_FLOAT_FLOOR_ZERO = {"search.resident_idle_s"}
_PORTS = (0, 65535)  # 0: let the system pick a free port
_RATIOS = {"proxy.stub_ratio", "proxy.high_water", "proxy.target", "proxy.emergency"}
_SHARES = {"proxy.recall_min_new"}  # 0 to 1
# ratios of the context where 0 means off
_RATIOS_OR_OFF = {"proxy.recall_ratio"}
# the largest value some numbers may take (a body limit past these is no limit at all)
_CEILINGS = {
    "http.max_body_mb": 4096,
    "http.body_timeout_s": 3600,
    "http.header_timeout_s": 3600,
    "http.max_header_kb": 1024,
    "http.max_connections": 100_000,
    "proxy.max_event_mb": 1024,
    "proxy.max_answer_mb": 4096,
    "gateway.max_upstream_catalog_mb": 1024,
    "gateway.max_upstream_message_mb": 4096,
}
# HTTP(S) base URLs, and whether empty (not used) is allowed
_URLS = {"proxy.upstream": False, "local_model.base_url": True}
# (smaller, larger, strictly): the first must stay below the second
_ORDERS = (
    ("proxy.target", "proxy.high_water", True),
    ("proxy.high_water", "proxy.emergency", True),
    ("search.default_limit", "search.max_limit", False),
)


def _numbers(settings: Settings) -> dict[str, int | float]:
    out: dict[str, int | float] = {}
    for section in SECTION_NAMES:
        obj = getattr(settings, section)
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f"{section}.{f.name}"] = value
    return out


def _range_problem(key: str, value: int | float) -> str | None:
    name = key.rpartition(".")[2]
    if not math.isfinite(value):
        return "must be a finite number"
    if name == "port" or name.endswith("_port"):
        lo, hi = _PORTS
        return None if lo <= value <= hi else f"must be a port number ({lo}-{hi})"
    if key in _RATIOS:
        return None if 0 < value < 1 else "must be a ratio of the context, above 0 and below 1"
    if key in _SHARES:
        return None if 0 <= value <= 1 else "must be a share, from 0 to 1"
    if key in _RATIOS_OR_OFF:
        return None if 0 <= value < 1 else "must be a ratio of the context, 0 (off) to below 1"
    if key in _CEILINGS and value > _CEILINGS[key]:
        return f"must be at most {_CEILINGS[key]}"
    if key in _FLOAT_FLOOR_ZERO:
        return None if value >= 0 else "must be 0 (off) or more"
    if isinstance(value, int):
        floor = 0 if key in _INT_FLOOR_ZERO else 1
        return None if value >= floor else f"must be at least {floor}"
    return None if value > 0 else "must be above 0"


def _url_problem(url: str) -> str | None:
    """Why ``url`` is not an absolute http(s) URL with a host, or None (the message shows
    only the scheme: the rest may hold a password)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - a port out of range or not a number raises
    except ValueError:
        return "is not a valid URL (expected http://host:port)"
    if parts.scheme not in ("http", "https"):
        shown = parts.scheme or "(none)"
        return (
            f"must be an http:// or https:// URL (like http://127.0.0.1:8080), got scheme {shown!r}"
        )
    if not parts.hostname:
        return "must name a host (like http://127.0.0.1:8080)"
    return None


def check(settings: Settings) -> None:
    """Raise ConfigError naming the first setting out of its range or order (and where it
    came from); settings built by :func:`load_settings` have always passed it."""

    def where(key: str) -> str:
        return settings.sources.get(key, "default")

    for key, empty_ok in _URLS.items():
        section, _, name = key.partition(".")
        url = getattr(getattr(settings, section), name)
        if not (empty_ok and url == "") and (problem := _url_problem(url)) is not None:
            raise ConfigError(f"setting {key!r} from {where(key)}: {problem}")
    numbers = _numbers(settings)
    for key, value in numbers.items():
        problem = _range_problem(key, value)
        if problem is not None:
            raise ConfigError(f"setting {key!r} from {where(key)}: {value!r} {problem}")
    for low, high, strict in _ORDERS:
        a, b = numbers[low], numbers[high]
        if a > b or (strict and a == b):
            word = "below" if strict else "at most"
            raise ConfigError(
                f"setting {low!r} ({a!r}, from {where(low)}) must be {word} "
                f"{high!r} ({b!r}, from {where(high)})"
            )


def _coerce(key: str, raw: Any, hint: Any, origin: str) -> Any:
    try:
        if hint is bool:
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in {"1", "true", "yes", "on"}:
                return True
            if text in {"0", "false", "no", "off"}:
                return False
            raise ValueError(raw)
        if hint is int:
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(raw)
        if hint is float:
            if isinstance(raw, bool):
                raise ValueError(raw)
            return float(raw)
        if hint is str:
            if not isinstance(raw, str | int | float):
                raise ValueError(raw)
            return str(raw)
        origin_type = typing.get_origin(hint)
        if origin_type is tuple:
            if isinstance(raw, str):
                items = [p.strip() for p in raw.split(",") if p.strip()]
            elif isinstance(raw, list | tuple):
                items = [str(p) for p in raw]
            else:
                raise ValueError(raw)
            return tuple(items)
        if isinstance(hint, types.UnionType):
            return raw
    except (TypeError, ValueError):
        pass
    else:
        return raw
    raise ConfigError(f"setting {key!r} from {origin}: cannot use {raw!r} as {_type_name(hint)}")


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", str(hint))
