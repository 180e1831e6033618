"""Async client for an OpenAI-compatible upstream (llama-server, vLLM, Ollama, OpenAI).

Chat (plain and streaming) goes to ``/v1/chat/completions``; llama-server extras
(``/props``, ``/tokenize``, ``/health``) live at the server root and are optional: an
upstream without them answers ``None`` instead of an error. ``base_url`` may be given with
or without a trailing ``/v1``.

Errors: connection failures -> :class:`UpstreamUnavailable`; no answer in time ->
:class:`UpstreamTimeout`; any other HTTP error -> :class:`UpstreamHTTPError` (an
:class:`UpstreamError` carrying status and body). Credentials are sent, never logged and
never put in messages or reprs.
"""

from __future__ import annotations

import functools
import json
import ssl
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import contextmanager
from types import TracebackType
from typing import Any

import httpx

from offload.core.tokens import plausible_count
from offload.core.urls import redact_url
from offload.errors import UpstreamError, UpstreamTimeout, UpstreamUnavailable

# statuses meaning "this server has no such endpoint"
_UNSUPPORTED = frozenset({404, 405, 501})
_BODY_IN_MESSAGE = 500  # characters of an error body quoted in the message


@functools.cache
def tls_context() -> ssl.SSLContext:
    """The verifying TLS context every HTTP client of the process shares: building one
    parses certifi's CA bundle (~50 ms of CPU), and each client would build its own."""
    return httpx.create_ssl_context()


class UpstreamHTTPError(UpstreamError):
    """The upstream answered with an HTTP error; ``status`` and ``body`` are kept."""

    def __init__(self, status: int, body: str, url: str) -> None:
        self.status = status
        self.body = body
        self.url = url
        self.error_type = _error_type(body)
        detail = " ".join(body.split())[:_BODY_IN_MESSAGE]
        kind = f" {self.error_type}" if self.error_type else ""
        # the message reaches logs and clients: never a password in the base URL
        shown = redact_url(url)
        super().__init__(f"upstream {shown} answered HTTP {status}{kind}: {detail}")

    def json(self) -> Any:
        """The body parsed as JSON, or ``None`` when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


def _error_type(body: str) -> str:
    try:
        obj = json.loads(body)
    except ValueError:
        return ""
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and isinstance(err.get("type"), str):
        return str(err["type"])
    return ""


def split_base_url(base_url: str) -> tuple[str, str]:
    """``(root, api)``: the server root (for /props, /tokenize, /health) and the
    OpenAI API prefix (``root/v1``)."""
    base = base_url.rstrip("/")
    if base.endswith("/v1"):
        return base[: -len("/v1")], base
    return base, base + "/v1"


class UpstreamClient:
    """One upstream, one pooled :class:`httpx.AsyncClient`; use as an async context manager."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str = "",
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        headers: Mapping[str, str] | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.root, self.api = split_base_url(base_url)
        default_headers = dict(headers or {})
        if api_key:
            default_headers["Authorization"] = f"Bearer {api_key}"
        self._client = httpx.AsyncClient(
            headers=default_headers,
            timeout=httpx.Timeout(timeout, connect=min(connect_timeout, timeout)),
            transport=transport,
            verify=tls_context(),
        )
        self._tokenize_supported = True
        self._props_supported = True

    def __repr__(self) -> str:
        # never the headers: they may carry credentials
        return f"UpstreamClient({self.root!r})"

    async def __aenter__(self) -> UpstreamClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the pooled connections."""
        await self._client.aclose()

    @property
    def tokenize_supported(self) -> bool:
        """False once the upstream said it has no ``/tokenize``."""
        return self._tokenize_supported

    async def chat(
        self, payload: Mapping[str, Any], *, headers: Mapping[str, str] | None = None
    ) -> dict[str, Any]:
        """POST a non-streaming chat completion; the parsed response object."""
        body = {**payload, "stream": False}
        resp = await self._send("POST", f"{self.api}/chat/completions", json=body, headers=headers)
        return _json_object(resp)

    async def stream_chat(
        self, payload: Mapping[str, Any], *, headers: Mapping[str, str] | None = None
    ) -> AsyncIterator[bytes]:
        """POST a streaming chat completion; yield the raw SSE bytes as they arrive.

        Errors (including an HTTP error status) are raised on the first iteration.
        Decode with :func:`offload.core.http.sse.iter_sse_events` if needed.
        """
        url = f"{self.api}/chat/completions"
        body = {**payload, "stream": True}
        request = self._client.build_request("POST", url, json=body, headers=headers)
        with _mapped_errors(url):
            resp = await self._client.send(request, stream=True)
            try:
                if resp.status_code >= 400:
                    await resp.aread()
                    raise UpstreamHTTPError(resp.status_code, resp.text, url)
                async for chunk in resp.aiter_bytes():
                    yield chunk
            finally:
                await resp.aclose()

    async def props(self) -> dict[str, Any] | None:
        """llama-server's ``GET /props``; ``None`` when the upstream has none."""
        if not self._props_supported:
            return None
        url = f"{self.root}/props"
        resp = await self._send("GET", url, allow=_UNSUPPORTED)
        if resp.status_code in _UNSUPPORTED:
            self._props_supported = False
            return None
        try:
            return _json_object(resp)
        except UpstreamError:
            self._props_supported = False  # an HTML page or similar: not a llama-server
            return None

    async def n_ctx(self) -> int | None:
        """The context size the upstream serves, from ``/props``; ``None`` if unknown."""
        return n_ctx_of(await self.props())

    async def tokenize(self, text: str) -> int | None:
        """Exact token count from ``POST /tokenize``; ``None`` when unsupported.

        After a 404/405/501 the client remembers and stops asking; a count that cannot be
        one of ``text`` (:func:`~offload.core.tokens.plausible_count`) is ``None`` too.
        """
        if not self._tokenize_supported:
            return None
        url = f"{self.root}/tokenize"
        resp = await self._send("POST", url, json={"content": text}, allow=_UNSUPPORTED)
        if resp.status_code in _UNSUPPORTED:
            self._tokenize_supported = False
            return None
        try:
            tokens = _json_object(resp).get("tokens")
        except UpstreamError:
            tokens = None
        if not isinstance(tokens, list):
            self._tokenize_supported = False
            return None
        return len(tokens) if plausible_count(text, len(tokens)) else None

    async def health(self) -> bool:
        """True when the upstream is up and ready (``/health``, else ``/v1/models``)."""
        try:
            resp = await self._client.get(f"{self.root}/health")
            if resp.status_code in _UNSUPPORTED:
                resp = await self._client.get(f"{self.api}/models")
        except (httpx.HTTPError, httpx.InvalidURL):  # InvalidURL: a control character in it
            return False
        return resp.status_code == 200

    async def _send(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        headers: Mapping[str, str] | None = None,
        allow: frozenset[int] = frozenset(),
    ) -> httpx.Response:
        with _mapped_errors(url):
            resp = await self._client.request(method, url, json=json, headers=headers)
        if resp.status_code >= 400 and resp.status_code not in allow:
            raise UpstreamHTTPError(resp.status_code, resp.text, url)
        return resp


@contextmanager
def _mapped_errors(url: str) -> Iterator[None]:
    """Translate httpx transport failures into offload's upstream errors."""
    shown = redact_url(url)
    try:
        yield
    except httpx.TimeoutException as exc:
        raise UpstreamTimeout(
            f"upstream {shown} did not answer in time ({type(exc).__name__}); "
            "raise the timeout or check the server's load"
        ) from exc
    except httpx.TransportError as exc:
        raise UpstreamUnavailable(
            f"cannot reach upstream {shown}: {type(exc).__name__}: {exc}; is the server running?"
        ) from exc


def _json_object(resp: httpx.Response) -> dict[str, Any]:
    shown = redact_url(str(resp.request.url))
    try:
        obj = resp.json()
    except ValueError as exc:
        raise UpstreamError(
            f"upstream {shown} answered HTTP {resp.status_code} with non-JSON: {resp.text[:200]!r}"
        ) from exc
    if not isinstance(obj, dict):
        raise UpstreamError(f"upstream {shown} answered a JSON {type(obj).__name__}")
    return obj


def n_ctx_of(props: dict[str, Any] | None) -> int | None:
    """The context size in a llama-server ``/props`` answer; ``None`` if it has none."""
    if props is None:
        return None
    dgs = props.get("default_generation_settings")
    for source in (dgs if isinstance(dgs, dict) else {}, props):
        value = source.get("n_ctx")
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def chat_template_of(props: dict[str, Any] | None) -> str:
    """The chat template in a llama-server ``/props`` answer ("" if it has none)."""
    template = (props or {}).get("chat_template")
    return template if isinstance(template, str) else ""


def tool_support_of(props: dict[str, Any] | None) -> bool | None:
    """Whether a llama-server ``/props`` answer says its chat template renders tools
    (``chat_template_caps.supports_tools``); None when it does not say."""
    caps = (props or {}).get("chat_template_caps")
    value = caps.get("supports_tools") if isinstance(caps, dict) else None
    return value if isinstance(value, bool) else None
