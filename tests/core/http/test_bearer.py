"""The bearer guard of /mcp and the gateway's endpoint, through a real ASGI call."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import httpx
import pytest

from offload.core.http.bearer import BearerGuard
from offload.core.http.bodylimit import Receive, Send

pytestmark = pytest.mark.anyio


async def _ok(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"in"})


async def _status(authorization: str | None) -> int:
    app = BearerGuard(_ok, "s3cret", "[mcp] bearer_token")
    headers = {} if authorization is None else {"authorization": authorization}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return (await client.get("/mcp", headers=headers)).status_code


@pytest.mark.parametrize("given", ["Bearer s3cret", "bearer s3cret", "BEARER s3cret"])
async def test_the_token_passes_whatever_the_case_of_its_scheme(given: str) -> None:
    # the auth scheme is case-insensitive (RFC 9110 11.1); the token is not
    assert await _status(given) == 200


@pytest.mark.parametrize(
    "given",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "s3cret",
        "Basic s3cret",
        "Bearer S3CRET",
        "Bearer s3cre",
        "Bearer s3cret2",
        "Bearer s3cret, Bearer x",
        "Bearers3cret",
    ],
)
async def test_anything_but_the_token_is_a_401(given: str | None) -> None:
    assert await _status(given) == 401
