"""Run a real llama.cpp server (xllamacpp, in-process) until SIGTERM.

Started by ``tests/realparts.py: LlamaServer`` in its own subprocess so that it can be
stopped by PID. Usage: ``python llama_server_main.py MODEL_PATH PORT N_CTX``.
"""

from __future__ import annotations

import signal
import sys
import threading

import xllamacpp


def main(argv: list[str]) -> int:
    """Build the params, start the server and block until SIGTERM or SIGINT."""
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

    def on_signal(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    server = xllamacpp.Server(params)
    print(f"llama server listening: {server.listening_address}", file=sys.stderr, flush=True)
    stop.wait()
    del server
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
