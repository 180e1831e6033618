"""Serving the gateway: the line ``offload gateway --http`` starts with."""

from __future__ import annotations

from offload.gateway.run import banner


def test_the_http_start_line_names_the_address_bound_and_warns_off_loopback() -> None:
    assert (
        banner("127.0.0.1", 8902) == "offload gateway: Streamable HTTP at http://127.0.0.1:8902/mcp"
    )
    head, warning = banner("0.0.0.0", 8902).split("\n")
    assert head == "offload gateway: Streamable HTTP at http://0.0.0.0:8902/mcp"
    assert warning.startswith("warning: listening on 0.0.0.0 (every interface), not loopback")
    assert "Open to them: the gateway /mcp: every upstream's tools (it has no token)" in warning
