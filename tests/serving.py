"""``offload serve`` as a real process on a loopback port, and a scripted upstream for it.

Shared by the tests of the command (``tests/cli/test_serve.py``) and of its dashboard
(``tests/serve/``): the process is stopped by PID; the upstream is a tiny Starlette app on
another loopback port standing in for llama-server.
"""

from __future__ import annotations

import json
import re
import signal
import time
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

import loopback
from offload_process import OffloadProcess
from realparts import ServerThread

SCRIPTED_N_CTX = 4096
ANSWER = "scripted answer"


class ServeProcess(OffloadProcess):
    """``offload serve`` in a subprocess on a free loopback port, stopped by PID."""

    what = "offload serve /api/stats"

    def __init__(self, tmp: Path, *args: str, env: dict[str, str] | None = None) -> None:
        super().__init__(tmp / "project", tmp / "home", tmp / "serve.log", env)
        self.home.mkdir(exist_ok=True)
        self.project = self.cwd
        self.project.mkdir(exist_ok=True)
        self.args = args

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def arguments(self, port: int) -> list[str]:
        return ["serve", "--port", str(port), "--scope", "serve-test", *self.args]

    def ready(self) -> bool:
        try:
            answered = loopback.get(f"{self.url}/api/stats", timeout=2).status_code == 200
        except httpx.TransportError:
            return False
        return answered and super().ready()  # and the answer came from this process

    def assert_shut_down_cleanly(self, code: int, took: float) -> None:
        """SIGTERM ended it promptly, through the lifespan's shutdown, without a traceback."""
        assert code in (0, -signal.SIGTERM), self.log_text()
        assert took < 10
        assert "Application shutdown complete" in self.log_text()
        assert "Traceback" not in self.log_text()

    def stats(self) -> dict[str, Any]:
        resp = loopback.get(f"{self.url}/api/stats", timeout=10)
        assert resp.status_code == 200, resp.text
        data: dict[str, Any] = resp.json()
        return data

    def metrics(self) -> str:
        resp = loopback.get(f"{self.url}/metrics", timeout=10)
        assert resp.status_code == 200, resp.text
        return resp.text

    def terminate(self, timeout: float) -> tuple[int, float]:
        """SIGTERM; the exit code and how long the process took to exit.

        After a graceful shutdown uvicorn re-raises the signal, so the code is -SIGTERM."""
        assert self.proc is not None
        started = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(timeout=timeout)
        return code, time.monotonic() - started


def metric(text: str, name: str) -> float:
    """The value of one sample (``name`` includes its labels) in Prometheus text."""
    match = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert match, f"{name} not in /metrics:\n{text}"
    return float(match.group(1))


# -- the scripted upstream -----------------------------------------------------------------


class ScriptedUpstream:
    """Answers /v1/models, /props and non-streaming chat completions; records chat bodies.

    ``prefix_cache``: report usage as a prompt cache would (prompt ~ a token per 4 bytes of
    the messages, cached ~ the bytes shared with the previous prompt's start), so cache
    reuse and prefix breaks show; otherwise every prompt is 12 tokens, none cached."""

    def __init__(self, *, n_ctx: int = 0, prefix_cache: bool = False) -> None:
        self.chats: list[dict[str, Any]] = []
        self.n_ctx = n_ctx or SCRIPTED_N_CTX
        self.prefix_cache = prefix_cache
        self._previous = ""
        self._server: ServerThread | None = None

    def _usage(self, body: dict[str, Any]) -> tuple[int, int]:
        if not self.prefix_cache:
            return 12, 0
        text = json.dumps(body.get("messages"), ensure_ascii=False)
        shared = 0
        for a, b in zip(text, self._previous, strict=False):
            if a != b:
                break
            shared += 1
        self._previous = text
        return max(1, len(text) // 4), shared // 4

    @property
    def url(self) -> str:
        assert self._server is not None, "the scripted upstream is not started"
        return self._server.url

    def app(self) -> Starlette:
        async def models(request: Request) -> Response:
            return JSONResponse(
                {"object": "list", "data": [{"id": "scripted-model", "object": "model"}]}
            )

        async def props(request: Request) -> Response:
            return JSONResponse(
                {"default_generation_settings": {"n_ctx": self.n_ctx}, "total_slots": 1}
            )

        async def chat(request: Request) -> Response:
            body = json.loads(await request.body())
            self.chats.append(body)
            prompt, cached = self._usage(body)
            return JSONResponse(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "finish_reason": "stop",
                            "message": {"role": "assistant", "content": ANSWER},
                        }
                    ],
                    "usage": {
                        "prompt_tokens": prompt,
                        "completion_tokens": 2,
                        "total_tokens": prompt + 2,
                    },
                    "timings": {"cache_n": cached, "prompt_n": prompt - cached},
                }
            )

        return Starlette(
            routes=[
                Route("/v1/models", models),
                Route("/props", props),
                Route("/v1/chat/completions", chat, methods=["POST"]),
            ]
        )

    def start(self) -> ScriptedUpstream:
        self._server = ServerThread(self.app(), log_level="error").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()


# -- an agent-like conversation ------------------------------------------------------------

#: a tool output carries this markup: the dashboard must show it as text
MARKUP = '<img src=x onerror="document.title=1"><b>bold</b>'
TITLE = "Find why the quokka parser drops the last line"


def tool_output(turn: int) -> str:
    """A log dump of 30 lines: unique words per turn (``wombat<turn>``), markup in turn 2."""
    lines = [f"turn {turn} wombat{turn} quokka-parser line {j}: offset={j * 37}" for j in range(30)]
    if turn == 2:
        lines.insert(10, MARKUP)
    return "\n".join(lines)


def conversation(turns: int) -> list[list[dict[str, Any]]]:
    """The messages of each of ``turns`` requests of one growing conversation (tool calls
    with outputs big enough to be stubbed and, as it grows, paged), the scripted upstream's
    answer in between."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a careful coding agent."},
        {"role": "user", "content": TITLE},
    ]
    out = []
    for turn in range(turns):
        call = {
            "id": f"call_{turn}",
            "type": "function",
            "function": {"name": "bash", "arguments": json.dumps({"cmd": f"cat log{turn}"})},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append(
            {"role": "tool", "tool_call_id": f"call_{turn}", "content": tool_output(turn)}
        )
        out.append(list(messages))
        messages.append({"role": "assistant", "content": ANSWER})
        messages.append({"role": "user", "content": f"go on with step {turn + 1}"})
    return out
