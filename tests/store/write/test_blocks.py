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


def test_small_bodies_share_a_bound_of_their_own_beside_the_large_ones() -> None:
    cache = blocks.BodyCache(max_chars=300, small_chars=100, small_body=50)
    large = [(f"L{i}", chr(65 + i) * 120) for i in range(2)]
    for digest, text in large:
        cache.put(digest, text)
    for i in range(10):  # 10 small bodies of 40: only the newest two fit in 100
        cache.put(f"s{i}", str(i) * 40)
    assert [cache.get(f"s{i}") for i in range(7, 10)] == [None, "8" * 40, "9" * 40]
    assert [cache.get(d) for d, _ in large] == [t for _, t in large]  # not pushed out
    assert cache.held_chars == 240 + 80
    cache.put("huge", "x" * 301)  # larger than the whole bound: not kept
    assert cache.get("huge") is None
    cache.put("empty", "")
    assert cache.get("empty") == ""
    cache.clear()
    assert cache.held_chars == 0 and cache.get("L0") is None


def _declaring(size: int, payload: bytes = b"x" * 10) -> bytes:
    """A zstd frame (single segment) of one raw block of ``payload`` whose header declares
    ``size`` bytes of content."""
    header = b"\x28\xb5\x2f\xfd" + bytes([0b1110_0000]) + size.to_bytes(8, "little")
    block = ((len(payload) << 3) | 1).to_bytes(3, "little")  # last, raw
    return header + block + payload


@pytest.mark.parametrize("declared", [40 << 30, 1 << 62])
def test_a_frame_declaring_more_than_its_bytes_can_hold_is_refused_before_allocating(
    declared: int,
) -> None:
    # the decompressor allocated what the frame declared: 40 GB raised MemoryError, outside
    # the store's errors, from a block of 26 bytes
    with pytest.raises(IntegrityError, match=f"declares {declared} bytes, more than 26 comp"):
        blocks.unpack("0" * 64, "zstd", _declaring(declared))


def test_a_frame_that_can_hold_what_it_declares_is_read_as_the_decompressor_reads_it() -> None:
    # a frame as short as the most inflating one can be: RLE blocks of 4 bytes, 128 KiB each
    data = b"\0" * (16 << 20)
    codec, stored = blocks.pack(data)
    assert codec == "zstd"
    assert blocks.unpack(sha256_hex(data), codec, stored) == data.decode()
    with pytest.raises(IntegrityError, match=r"Data corruption|does not match"):
        blocks.unpack("0" * 64, "zstd", _declaring(len(_declaring(0)) * 4096))
