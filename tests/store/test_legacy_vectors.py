"""store.legacy_vectors: the frozen conversion of int8 vectors to 4 bits a component."""

from __future__ import annotations

import numpy as np

from offload.store import legacy_vectors
from offload.store.write import vectors


def test_an_int8_vector_converts_to_the_four_bit_form_the_live_code_reads() -> None:
    vector = np.sin(np.arange(256, dtype=np.float32))
    vector /= np.linalg.norm(vector)
    scale = float(np.max(np.abs(vector))) / 127.0
    int8 = np.float32(scale).tobytes() + np.rint(vector / scale).astype(np.int8).tobytes()
    converted = legacy_vectors.vector_in_four_bits(bytes(int8))
    assert converted is not None and len(converted) == 4 + 128
    assert converted == vectors.pack(vectors.unpack(bytes(int8)))
    back = vectors.unpack(converted)
    assert float(back @ vector) / float(np.linalg.norm(back)) > 0.98


def test_a_four_bit_or_odd_vector_is_left_as_it_is() -> None:
    assert legacy_vectors.vector_in_four_bits(vectors.pack(np.ones(256, np.float32))) is None
    assert legacy_vectors.vector_in_four_bits(vectors.pack(np.ones(255, np.float32))) is None
    assert legacy_vectors.vector_in_four_bits(b"") is None
