"""The block codec: zstd bodies verified on read, and one (de)compressor per thread."""

from __future__ import annotations

import tempfile
import threading

import pytest

from offload.core.hashing import sha256_hex
from offload.errors import IntegrityError
from offload.store.write import blocks


def test_a_packed_body_reads_back_verified_and_a_damaged_one_is_refused() -> None:
    data = ("the same line again\n" * 200).encode()
    codec, stored = blocks.pack(data)
    assert codec == "zstd" and len(stored) < len(data)
    digest = sha256_hex(data)
    assert blocks.unpack(digest, codec, stored) == data.decode()
    with pytest.raises(IntegrityError):
        blocks.unpack(digest, codec, stored[:-3] + b"\0\0\0")
    assert blocks.pack(b"tiny") == ("raw", b"tiny")


@pytest.mark.parametrize(
    "text",
    [
        "the same line again, café\n" * 5000,  # compresses: a zstd frame
        "".join(chr(0x4E00 + i) for i in range(40)),  # distinct characters: kept raw
    ],
)
def test_a_body_packed_into_a_file_holds_the_bytes_packing_it_in_memory_gives(text: str) -> None:
    size = len(text.encode())
    with tempfile.TemporaryFile() as out:
        codec = blocks.pack_text_into(text, size, out)
        out.seek(0)
        stored = out.read()
    assert (codec, stored) == blocks.pack_text(text, size)
    assert blocks.unpack(sha256_hex(text.encode()), codec, stored) == text


def test_each_thread_gets_its_own_object_and_keeps_it() -> None:
    made: list[object] = []

    def make() -> object:
        made.append(object())
        return made[-1]

    get = blocks.per_thread(make)
    seen: dict[str, tuple[object, object]] = {}

    def use(name: str) -> None:
        seen[name] = (get(), get())

    threads = [threading.Thread(target=use, args=(f"t{i}",)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    use("main")
    assert all(first is second for first, second in seen.values())
    assert len({id(first) for first, _ in seen.values()}) == 4 == len(made)
