"""``offload replay``'s help: every mark its per-turn line can carry is explained."""

from __future__ import annotations

import itertools
import json
import signal
import threading
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from cli.cli_support import run
from offload.proxy.rewrite.replay import Turn, render_turn
from offload_process import OffloadProcess
from realparts import ServerThread


def turn(windowed: bool, emergency: bool, kept: bool) -> Turn:
    return Turn(
        run="run", turn=3, messages=7, client_tokens=900, wire_tokens=400, stubs_made=1,
        stubbed_messages=1, windowed=windowed, emergency=emergency, prefix_kept=kept,
        break_cause=None if kept else "windowing", ms=1.0,
    )  # fmt: skip


def test_replay_help_explains_each_flag_a_turn_line_can_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        run(capsys, "replay", "--help")
    help_text = capsys.readouterr().out
    for w, e, kept in itertools.product((True, False), repeat=3):
        flags = render_turn(turn(w, e, kept)).split("stubs +1")[1].split()[0]
        assert len(flags) == 3
        for mark in set(flags) - {"-"}:
            assert f"\n    {mark}  " in help_text, (mark, flags)
    assert "\n    W  " in help_text and "- it did not" in help_text
    assert "windowing" in help_text and "PROBLEM:" in help_text


# -- stopping ------------------------------------------------------------------------------


class ProxyProcess(OffloadProcess):
    """``offload proxy`` in a subprocess on a free loopback port, in front of ``upstream``."""

    what = "offload proxy"

    def __init__(self, tmp: Path, upstream: str) -> None:
        (tmp / "home").mkdir()
        super().__init__(tmp, tmp / "home", tmp / "proxy.log")
        self.upstream = upstream

    def arguments(self, port: int) -> list[str]:
        return ["proxy", "--port", str(port), "--upstream", self.upstream, "--n-ctx", "4096"]


def endless_upstream(first_chunk_sent: threading.Event) -> Starlette:
    """A model server whose chat stream sends one chunk and then never ends."""

    async def chat(request: Request) -> Response:
        await request.body()

        async def chunks() -> AsyncIterator[bytes]:
            delta = {"choices": [{"index": 0, "delta": {"content": "Once"}}]}
            yield f"data: {json.dumps(delta)}\n\n".encode()
            first_chunk_sent.set()
            await anyio.sleep_forever()

        return StreamingResponse(chunks(), media_type="text/event-stream")

    async def props(request: Request) -> Response:
        return JSONResponse({"default_generation_settings": {"n_ctx": 4096}})

    return Starlette(
        routes=[
            Route("/v1/chat/completions", chat, methods=["POST"]),
            Route("/props", props),
        ]
    )


@pytest.mark.slow
def test_ctrl_c_stops_the_proxy_while_a_generation_is_still_streaming(tmp_path: Path) -> None:
    sent = threading.Event()
    upstream = ServerThread(endless_upstream(sent)).start()
    proxy = ProxyProcess(tmp_path, upstream.url).start()
    try:
        body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "a story"}]}
        url = f"http://127.0.0.1:{proxy.port}/v1/chat/completions"
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", url, json=body) as streaming,
        ):
            assert streaming.status_code == 200
            assert sent.wait(60)  # the stream is open and the upstream still generating
            assert proxy.proc is not None
            proxy.proc.send_signal(signal.SIGINT)
            # it waited for the stream to end: here, for ever (a second Ctrl-C forced it)
            code = proxy.proc.wait(timeout=30)
        assert code in (0, -signal.SIGINT, 130), proxy.log_text()
        assert "Traceback" not in proxy.log_text(), proxy.log_text()
    finally:
        proxy.stop()
        upstream.stop()
