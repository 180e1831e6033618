"""Entry vectors as stores kept them before 4 bits a component, and their conversion.

Frozen like store/sqlite/frozen.py: the migrations that convert a store's vectors
(SQLite's ``m_entry_vectors_four_bits``, PostgreSQL's ``pg_entry_vectors_four_bits``) run
this copy, never the live ``store/write/vectors.py``, so a store migrated later gets the
bytes the migration gave when it was new. Apart from both backends' packages, which may
not import each other.
"""

from __future__ import annotations

import struct


def vector_in_four_bits(stored: bytes) -> bytes | None:
    """An int8 vector (a positive float32 scale, then one byte a component) in 4 bits a
    component: the scale negated, then two components a byte, low nibble first, each
    within -7..7 of the vector's largest component. None when ``stored`` is not of that
    form (already 4 bits, or an odd number of components). Both backends' migrations
    run it: they store the same bytes."""
    import numpy as np

    if len(stored) < 4 or (len(stored) - 4) % 2:
        return None
    (scale,) = struct.unpack_from("<f", stored)
    if not scale > 0:
        return None
    vector = np.frombuffer(stored, dtype=np.int8, offset=4).astype(np.float32) * scale
    top = float(np.max(np.abs(vector))) if vector.size else 0.0
    scale = top / 7.0 if top > 0 else 1.0
    q = np.clip(np.rint(vector / scale), -7, 7).astype(np.int8)
    nibbles = q.view(np.uint8) & 0x0F
    packed = (nibbles[0::2] | (nibbles[1::2] << 4)).astype(np.uint8)
    return struct.pack("<f", -scale) + bytes(packed.tobytes())
