"""Start-up lines about where a server listens: loopback or not, judged by the text alone."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from offload.core.http.listen import (
    Origin,
    Origins,
    bind_url,
    exposure_warning,
    is_loopback,
    parse_host,
    parse_origin,
    served_names,
    token_guard,
    url_host,
)


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_addresses_and_localhost_are_loopback(host: str) -> None:
    assert is_loopback(host)
    assert exposure_warning(host, [("the proxy", False)]) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "", "192.0.2.7", "2001:db8::1", "myhost"])
def test_wildcards_other_addresses_and_names_count_as_reachable(host: str) -> None:
    assert not is_loopback(host)
    assert exposure_warning(host, []) is not None


def test_a_wildcard_bind_is_shown_as_it_is_bound_not_as_loopback() -> None:
    assert bind_url("0.0.0.0", 8912) == "http://0.0.0.0:8912"
    assert bind_url("::", 8912) == "http://[::]:8912"
    assert bind_url("", 8912) == "http://0.0.0.0:8912"


def test_the_warning_is_one_line_naming_what_is_open_and_what_a_token_guards() -> None:
    parts = [
        ("the proxy /v1", False),
        token_guard("s3cret", "/mcp", "[mcp] bearer_token"),
        token_guard("", "/metrics", "[proxy] bearer_token"),
    ]
    warning = exposure_warning("0.0.0.0", parts)
    assert warning is not None and "\n" not in warning
    assert warning.startswith("warning: listening on 0.0.0.0 (every interface), not loopback")
    opened, _, rest = warning.partition("Open to them: ")[2].partition(". Behind a bearer token: ")
    assert opened == "the proxy /v1; /metrics (set [proxy] bearer_token)"
    assert rest.startswith("/mcp ([mcp] bearer_token).")
    assert "s3cret" not in warning
    assert "docs/security.md" in warning


def test_a_server_answers_to_the_loopback_names_and_its_own_bound_host() -> None:
    assert served_names("127.0.0.1") == ("127.0.0.1", "localhost", "::1")
    assert served_names("[::1]") == ("127.0.0.1", "localhost", "::1")
    assert served_names("Box.LAN") == ("127.0.0.1", "localhost", "::1", "box.lan")


@pytest.mark.parametrize("host", ["0.0.0.0", "::", ""])
def test_a_wildcard_bind_adds_no_name_a_browser_could_send_as_host(host: str) -> None:
    assert served_names(host) == ("127.0.0.1", "localhost", "::1")


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:8900", ("127.0.0.1", "8900")),
        ("LOCALHOST:8900", ("localhost", "8900")),
        ("localhost", ("localhost", "")),
        ("[::1]:8900", ("::1", "8900")),
        ("[::1]", ("::1", "")),
        ("127.0.0.1:8900:80", None),
        ("127.0.0.1:", None),
        ("127.0.0.1:0", None),
        ("127.0.0.1:65536", None),
        ("127.0.0.1:+80", None),
        ("127.0.0.1:٨٠", None),  # digits, but not ASCII ones
        ("[::1]x:8900", None),
        ("[::1:8900", None),
        ("", None),
        ("user@127.0.0.1:8900", None),
        ("local host:8900", None),
    ],
)
def test_a_host_header_is_a_name_and_a_port_of_digits_or_nothing(
    value: str, parsed: tuple[str, str] | None
) -> None:
    assert parse_host(value) == parsed


@pytest.mark.parametrize(
    ("origin", "parsed"),
    [
        ("http://localhost:8900", ("http", "localhost", 8900)),
        ("HTTP://LOCALHOST:8900", ("http", "localhost", 8900)),  # scheme and host: no case
        ("http://localhost:8900/", ("http", "localhost", 8900)),  # one trailing slash
        ("http://localhost", ("http", "localhost", 80)),  # the scheme's default port
        ("https://App.Example.com", ("https", "app.example.com", 443)),
        ("http://[::1]:8900", ("http", "::1", 8900)),
    ],
)
def test_an_origin_is_read_as_rfc_6454_compares_it(origin: str, parsed: Origin) -> None:
    assert parse_origin(origin) == parsed


@pytest.mark.parametrize(
    "origin",
    [
        "null",
        "",
        "localhost:8900",
        "file://",
        "ftp://localhost:8900",
        "http://localhost:8900/path",
        "http://localhost:8900//",
        "http://localhost:8900?x",
        "http://localhost:8900#x",
        "http://user@localhost:8900",
        "http://localhost:0",
        "http://localhost:65536",
        "http://localhost:8900:80",
        "http://localhost:89x",
        "http://",
    ],
)
def test_an_origin_that_is_no_served_origin_cannot_be_read(origin: str) -> None:
    assert parse_origin(origin) is None


def test_the_served_origin_is_one_of_its_names_on_the_port_the_request_came_in_on() -> None:
    origins = Origins(served_names("127.0.0.1"), ["https://app.example.com:443"])
    assert origins.accepts("http://LOCALHOST:8900", 8900)
    assert origins.accepts("http://localhost", 80)
    assert not origins.accepts("http://localhost:3000", 8900)  # another local page
    assert not origins.accepts("null", 8900)
    assert origins.accepts("https://APP.example.com/", 8900)  # configured: any port served
    assert not origins.accepts("http://app.example.com", 8900)  # another scheme


ORIGIN_TEXT = st.one_of(
    st.text(max_size=60),
    st.builds(
        lambda scheme, host, port, tail: f"{scheme}://{host}{port}{tail}",
        st.sampled_from(["http", "HTTP", "https", "ftp", "", "http:"]),
        st.sampled_from(["127.0.0.1", "LOCALHOST", "[::1]", "::1", "a.localhost", "evil.com"])
        | st.text(max_size=12),
        st.sampled_from(["", ":8900", ":0", ":65536", ":08900", ":", ":8900:80", ":+80", ":٣"]),
        st.sampled_from(["", "/", "//", "/x", "?q", "#f", "@x", " ", "\t", "\x00"]),
    ),
)


def _check_origin(value: str) -> None:
    parsed = parse_origin(value)  # never raises
    accepted = Origins(["127.0.0.1", "localhost", "::1"]).accepts(value, 8900)
    if parsed is None:
        assert not accepted
        return
    scheme, name, port = parsed
    assert scheme in ("http", "https") and 0 < port < 65536 and name == name.lower()
    again = parse_origin(f"{scheme}://{url_host(name)}:{port}")
    assert again == parsed  # what it reads is an origin written back the same
    if accepted:  # a served name on the served port, nothing else
        assert name in ("127.0.0.1", "localhost", "::1") and port == 8900


@settings(max_examples=300, deadline=None)
@given(ORIGIN_TEXT)
def test_an_origin_is_read_as_one_it_writes_back_and_accepted_only_when_served(
    value: str,
) -> None:
    _check_origin(value)


@pytest.mark.slow
@settings(max_examples=20_000, deadline=None)
@given(ORIGIN_TEXT)
def test_many_more_origins_are_read_as_ones_they_write_back(value: str) -> None:
    _check_origin(value)
