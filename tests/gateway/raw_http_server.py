"""A hand-written Streamable HTTP MCP peer for gateway fault tests (no SDK on this side).

    python raw_http_server.py MODE MIB PORT_FILE

It listens on 127.0.0.1 (a port of the system's choosing, written to PORT_FILE once it
listens), completes the MCP handshake in JSON responses and lists one tool, ``probe``.
A call of ``probe`` is answered with a tool result whose text is MIB MiB of ``x``:

- ``json``: as one ``application/json`` body;
- ``sse``: as one server-sent event of a ``text/event-stream`` body;
- ``gzip``: as one ``application/json`` body sent gzip-compressed (whatever was asked):
  a few KiB on the wire.
- ``gzip-cut``: as ``gzip``, without the member's last 8 bytes (the trailer that checks
  what was inflated): every byte of the answer inflates, nothing vouches for it.

- ``notify``: its notification stream (GET) is hostile: the first two each send one
  event of MIB MiB (past the gateway's bound), and from then on its tool list has a
  second tool, ``fresh``; later GETs stay open and quiet until the client leaves.

- ``forget``: its first call of ``probe`` is answered 404 (the session is unknown, as
  after a restart); later calls, on a new session, with the text ``again``.

The answer is written in 1 MiB pieces, never built whole. Every other request gets a
correct empty answer (a GET, a 405: no notification stream); it runs until killed.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

TOOL = {"name": "probe", "description": "Answer hugely", "inputSchema": {"type": "object"}}
FRESH = {"name": "fresh", "description": "Listed late", "inputSchema": {"type": "object"}}
PIECE = b"x" * 2**20
#: Notification streams (GETs) opened so far, in ``notify`` mode.
GETS = [0]
GETS_LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = "json"
    mib = 1

    def log_message(self, format: str, *args: Any) -> None:
        return None

    def do_GET(self) -> None:
        if self.mode != "notify":
            self.send_response(405)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        with GETS_LOCK:
            GETS[0] += 1
            n = GETS[0]
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            if n <= 2:  # retry soon (the SDK waits 1 s unless told), then an event without end
                self.wfile.write(b"retry: 10\n\ndata: ")
                for _ in range(self.mib):
                    self.wfile.write(PIECE)
                self.wfile.write(b"\n\n")
                return
            self.wfile.write(b": listening\n\n")
            self.wfile.flush()
            self.rfile.read(1)  # a GET has no body: this returns when the client leaves
        except (BrokenPipeError, ConnectionResetError):
            return

    def do_DELETE(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        rid, method = request.get("id"), request.get("method")
        if rid is None:  # a notification
            self.send_response(202)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if method == "tools/call" and self.mode == "forget":
            with GETS_LOCK:
                GETS[0] += 1
                first = GETS[0] == 1
            if first:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.answer(rid, {"content": [{"type": "text", "text": "again"}]}, "new-session")
            return
        if method == "tools/call":
            self.huge(rid)
            return
        if method == "initialize":
            result: Any = {
                "protocolVersion": request["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "raw-http", "version": "1"},
            }
        elif method == "tools/list":
            result = {"tools": [TOOL, FRESH] if GETS[0] >= 2 else [TOOL]}
        else:
            result = {}
        self.answer(rid, result, "new-session" if GETS[0] and self.mode == "forget" else "")

    def answer(self, rid: Any, result: Any, session: str) -> None:
        body = json.dumps({"jsonrpc": "2.0", "id": rid, "result": result}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Mcp-Session-Id", session or "raw-session")
        self.end_headers()
        self.wfile.write(body)

    def huge(self, rid: Any) -> None:
        rid_json = json.dumps(rid)
        head = f'{{"jsonrpc": "2.0", "id": {rid_json}, "result": {{"content": [{{"type": "text", "text": "'.encode()
        tail = b'"}]}}'
        if self.mode == "sse":
            head, tail = b"event: message\ndata: " + head, tail + b"\n\n"
        if self.mode in ("gzip", "gzip-cut"):
            self.gzipped(head, tail)
            return
        self.send_response(200)
        kind = "text/event-stream" if self.mode == "sse" else "application/json"
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(head) + self.mib * len(PIECE) + len(tail)))
        self.end_headers()
        try:
            self.wfile.write(head)
            for _ in range(self.mib):
                self.wfile.write(PIECE)
            self.wfile.write(tail)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client stopped reading: as it should

    def gzipped(self, head: bytes, tail: bytes) -> None:
        packer = zlib.compressobj(9, zlib.DEFLATED, 31)
        body = [packer.compress(head)]
        body += [packer.compress(PIECE) for _ in range(self.mib)]
        body += [packer.compress(tail), packer.flush()]
        data = b"".join(body)
        if self.mode == "gzip-cut":
            data = data[:-8]
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def main() -> None:
    """Serve until killed."""
    Handler.mode, Handler.mib, port_file = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    with open(port_file + ".tmp", "w") as out:
        out.write(str(server.server_address[1]))
    os.replace(port_file + ".tmp", port_file)
    server.serve_forever()


if __name__ == "__main__":
    main()
