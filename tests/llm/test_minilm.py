"""llm.minilm: the optional contextual model of the tool index (offload[tools])."""

from __future__ import annotations

import functools
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from offload.llm.minilm import MiniLM, ToolEncoderUnavailable, load_tool_encoder
from offload.llm.packages import Notices
from realparts import require


@functools.cache
def model() -> MiniLM:
    loaded = load_tool_encoder(notices=Notices())
    require(loaded is not None, "offload[tools] is not installed (pip install 'offload[tools]')")
    assert loaded is not None
    return loaded


def test_without_its_packages_there_is_no_tool_encoder_and_one_notice(
    caplog: pytest.LogCaptureFixture,
) -> None:
    notices = Notices()
    with caplog.at_level(logging.WARNING, logger="offload.embedding"):
        first = load_tool_encoder(required=("offload_no_such_package",), notices=notices)
        again = load_tool_encoder(required=("offload_no_such_package",), notices=notices)
    assert first is None and again is None
    lines = [r.getMessage() for r in caplog.records if "offload_no_such_package" in r.getMessage()]
    assert len(lines) == 1 and "offload[tools]" in lines[0]


@pytest.mark.slow
def test_the_model_encodes_unit_rows_independent_of_the_batch() -> None:
    encoder = model()
    rows = encoder.encode(["make a folder", "create a new directory", "the weather in Paris"])
    assert rows.shape == (3, 384) and rows.dtype == np.float32
    assert np.allclose(np.linalg.norm(rows, axis=1), 1.0, atol=1e-4)
    alone = encoder.encode(["make a folder"])[0]
    assert np.allclose(alone, rows[0], atol=1e-4)  # padding in a batch changes nothing


@pytest.mark.slow
def test_words_no_tool_uses_land_near_the_tool_that_means_them() -> None:
    q_folder, q_ping, directory, ping = model().encode(
        [
            "make a folder called build",
            "is the kubernetes server reachable?",
            "Create a new directory or ensure a directory exists",
            "Verify that the Kubernetes server can be contacted (ping)",
        ]
    )
    assert float(q_folder @ directory) > float(q_folder @ ping)
    assert float(q_ping @ ping) > float(q_ping @ directory)


_EXIT_WHILE_ENCODING = """
import sys, threading
from offload.llm.packages import Notices
from offload.llm.minilm import load_tool_encoder

encoder = load_tool_encoder(notices=Notices())
assert encoder is not None
running = threading.Event()

def embed_forever() -> None:
    for _ in range(100_000):
        encoder.encode(["make a folder"])
        running.set()

threading.Thread(target=embed_forever, daemon=True).start()
running.wait()
print("exiting", flush=True)
"""


@pytest.mark.slow
def test_a_process_exiting_while_a_daemon_thread_encodes_exits_cleanly() -> None:
    model()  # skips without offload[tools]
    # before the exit gate this aborted ("terminate called without an active exception")
    done = subprocess.run(
        [sys.executable, "-c", _EXIT_WHILE_ENCODING], capture_output=True, timeout=120
    )
    assert b"terminate called" not in done.stderr
    assert done.returncode == 0, done.stderr.decode()
    assert done.stdout == b"exiting\n"


def test_a_closed_encoder_refuses_new_batches() -> None:
    encoder = MiniLM(Path("/nonexistent/model.onnx"), Path("/nonexistent/tokenizer.json"))
    assert encoder.close(timeout=0.0)
    with pytest.raises(ToolEncoderUnavailable, match="closed"):
        encoder.encode(["make a folder"])
