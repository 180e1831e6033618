"""Run a real llama.cpp server (xllamacpp, in-process) until SIGTERM or its parent's end.

Started by ``tests/realparts.py: LlamaServer`` in its own subprocess so that it can be
stopped by PID. A test run that is itself killed never stops it that way, so the server
also ends when the process that started it is gone (it is then re-parented). Usage:
``python llama_server_main.py MODEL_PATH PORT N_CTX [PARENT_PID]``: the starter names its
own PID, since it may be gone before this process first asks for its parent.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

import xllamacpp

# how often the server looks whether the process that started it is still there
PARENT_CHECK_S = 0.5


def main(argv: list[str]) -> int:
    """Build the params, start the server and block until SIGTERM or SIGINT, or until the
    process that started it ends."""
    model_path, port, n_ctx = argv[0], int(argv[1]), int(argv[2])
    params = xllamacpp.CommonParams()
    params.model.path = model_path
    params.hostnames = ["127.0.0.1"]
    params.port = port
    params.n_ctx = n_ctx
    params.n_parallel = 1
    # one thread: two threads on two shared cores collapse generation speed
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.endpoint_props = True
    params.endpoint_metrics = True
    params.endpoint_slots = True

    stop = threading.Event()
    parent = int(argv[3]) if len(argv) > 3 else os.getppid()

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = xllamacpp.Server(params)
    print(f"llama server listening: {server.listening_address}", file=sys.stderr, flush=True)
    while not stop.wait(PARENT_CHECK_S) and os.getppid() == parent:
        pass
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
