"""Where a server listens, as its start-up lines say it: the address it really binds, and
one line of warning when other machines can reach that address.

Pure: an address is judged by its text, never resolved. A name other than ``localhost``
counts as reachable (it may resolve to any interface); so does a wildcard (``0.0.0.0``,
``::``, the empty host), which listens on every interface.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

WILDCARDS = ("0.0.0.0", "::", "")
# the loopback names a local client puts in Host and Origin (IPv6 without its brackets)
LOOPBACK_NAMES = ("127.0.0.1", "localhost", "::1")
SECURITY_DOC = "docs/security.md"
# on Ctrl-C or SIGTERM a server waits this long for open streams (a long generation, an MCP
# client's event stream) before it cancels them; without a bound one such stream held
# the process until it ended, and only a second Ctrl-C stopped it
SHUTDOWN_GRACE_S = 5


def is_loopback(host: str) -> bool:
    """Whether ``host`` (an address or a name, IPv6 with or without brackets) is loopback."""
    name = host.strip().strip("[]").lower()
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


def served_names(host: str) -> tuple[str, ...]:
    """The host names a server bound at ``host`` answers to in Host and Origin: the
    loopback names, and ``host`` itself unless it is a wildcard (lower case, no brackets)."""
    names = list(LOOPBACK_NAMES)
    if host not in WILDCARDS:
        names.append(host.strip().strip("[]").lower())
    return tuple(dict.fromkeys(names))


def parse_host(value: str) -> tuple[str, str] | None:
    """``(name, port)`` of a Host header: the name lower-cased (an IPv6 address without its
    brackets), the port as given ("" when absent); None unless it is ``name[:port]`` or
    ``[address][:port]`` with a port of digits from 1 to 65535 and nothing after it (so
    ``127.0.0.1:8900:80`` is not a Host of 127.0.0.1)."""
    if value.startswith("["):
        name, bracket, rest = value[1:].partition("]")
        if not bracket:
            return None
    else:
        name, colon, port_text = value.partition(":")
        rest = colon + port_text
    port = rest[1:]
    if rest and not (rest[0] == ":" and port.isascii() and port.isdigit() and len(port) <= 5):
        return None
    if rest and not 0 < int(port) < 65536:
        return None
    if not name or not name.isascii() or any(c.isspace() or c in "/@[]" for c in name):
        return None
    return name.lower(), port


#: The schemes a served origin may have, and the port each means when none is written.
DEFAULT_PORTS = {"http": 80, "https": 443}

Origin = tuple[str, str, int]


def parse_origin(value: str) -> Origin | None:
    """``(scheme, host, port)`` of an Origin header, compared as RFC 6454 has it: scheme
    and host lower-cased, an IPv6 address without its brackets, the scheme's default port
    when none is written (``http://localhost`` is ``http://localhost:80``); one trailing
    slash is allowed. None for ``null`` (an opaque origin, a sandboxed page or a file),
    another scheme, a path, query, fragment or user name, or a host or port as
    :func:`parse_host` refuses them."""
    text = value.strip()
    text = text[:-1] if text.endswith("/") else text
    scheme, sep, rest = text.partition("://")
    scheme = scheme.lower()
    if not sep or scheme not in DEFAULT_PORTS or any(c in rest for c in "/?#@\\"):
        return None
    parsed = parse_host(rest)
    if parsed is None:
        return None
    name, port = parsed
    return scheme, name, int(port) if port else DEFAULT_PORTS[scheme]


class Origins:
    """Which Origin a server accepts: ``allowed`` (each compared as :func:`parse_origin`
    reads it; one it cannot read never matches), or one of the served ``names`` on the
    port the request came in on (a page on another local port is another origin)."""

    def __init__(self, names: Sequence[str], allowed: Sequence[str] = ()) -> None:
        self.names = frozenset(n.strip("[]").lower() for n in names)
        self.allowed = frozenset(o for o in map(parse_origin, allowed) if o is not None)

    def accepts(self, origin: str, served_port: int | None) -> bool:
        """Whether a request with ``Origin: origin`` that came in on ``served_port`` may pass."""
        parsed = parse_origin(origin)
        if parsed is None:
            return False
        _scheme, name, port = parsed
        return parsed in self.allowed or (name in self.names and port == served_port)


def url_host(host: str) -> str:
    """``host`` as it stands in a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def bind_url(host: str, port: int) -> str:
    """``http://HOST:PORT`` of the address a server binds (a wildcard as it is, ``0.0.0.0``)."""
    return f"http://{url_host(host or '0.0.0.0')}:{port}"


def where(host: str) -> str:
    """``0.0.0.0 (every interface)``, ``192.0.2.7``: the bind address for a message."""
    if host in WILDCARDS:
        return f"{host or '0.0.0.0'} (every interface)"
    return host


def exposure_warning(host: str, parts: Sequence[tuple[str, bool]]) -> str | None:
    """None when ``host`` is loopback; else one line saying that other machines can reach
    the server, which of its ``parts`` (``(phrase, guarded)``, as :func:`token_guard`
    makes them) a bearer token guards and which nothing of offload's does, and what to do."""
    if is_loopback(host):
        return None
    line = f"warning: listening on {where(host)}, not loopback: other machines can reach it."
    unguarded = [phrase for phrase, guarded in parts if not guarded]
    guarded = [phrase for phrase, ok in parts if ok]
    if unguarded:
        line += f" Open to them: {'; '.join(unguarded)}."
    if guarded:
        line += f" Behind a bearer token: {'; '.join(guarded)}."
    return line + (
        " The Host/Origin checks stop other sites' pages in a browser, not other clients:"
        f" bind 127.0.0.1, or set the tokens ({SECURITY_DOC})."
    )


def token_guard(token: str, what: str, setting: str) -> tuple[str, bool]:
    """``(phrase, guarded)`` for a part of a server that ``setting``'s bearer token guards
    when it is set: ``("/mcp ([mcp] bearer_token)", True)``, or without the token
    ``("/mcp (set [mcp] bearer_token)", False)``."""
    if token:
        return f"{what} ({setting})", True
    return f"{what} (set {setting})", False
