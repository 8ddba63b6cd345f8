"""Snapshot element types: f16 keys and values (ggml) and f32 ones (numpy, Vulkan) in one
format (v2), and values stored by dimension (ggml, v4), converted on restore; version 1-3
files still restore; unknown codes are refused."""

from __future__ import annotations

import struct

import numpy as np
import pytest
import xxhash

from engine.backends.numpy.backend import NumpyBackend
from engine.conversation import Conversation
from engine.snapshot.chain import restore
from engine.snapshot.format import BY_DIMENSION, HEADER, TRAILER, SnapshotCorruptError
from engine.snapshot.snapshotter import Snapshotter
from engine.state.kv_format import KVFormat
from engine.state.ring_policy import RingPolicy

POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=8, prefill_chunk=16)
PROMPT = [1, 40, 77, 200, 13, 99, 5, 250, 31, 64, 128, 7]
VERSION_AT = 4  # the seed header's u32 version
CODES_AT = HEADER.size + 40  # the body header's K and V element codes (u8 each)


def saved(tiny_model, tmp_path) -> tuple[Conversation, bytearray]:
    conv = Conversation(tiny_model, POLICY)
    conv.ingest(PROMPT)
    path = Snapshotter(conv, tmp_path / "x.snapshot.bin").save("").path
    return conv, bytearray(path.read_bytes())


def resealed(data: bytearray, path):
    body = bytes(data[: -TRAILER.size])
    path.write_bytes(body + b"SNAPSUM\0" + xxhash.xxh3_128_digest(body))
    return path


def test_the_current_version_records_the_element_types(tiny_model, tmp_path) -> None:
    _, data = saved(tiny_model, tmp_path)
    assert struct.unpack_from("<I", data, VERSION_AT)[0] == 4
    assert tuple(data[CODES_AT : CODES_AT + 2]) == (1, 1)  # f32 keys, f32 values
    assert b'"k_dtype":"float32"' in data and b'"v_dtype":"float32"' in data


def test_a_version_1_file_still_restores(tiny_model, tmp_path) -> None:
    """Version 1 had zero padding where version 2 keeps the codes, and only f32 slabs."""
    source, data = saved(tiny_model, tmp_path)
    struct.pack_into("<I", data, VERSION_AT, 1)
    data[CODES_AT : CODES_AT + 2] = b"\0\0"
    path = resealed(data, tmp_path / "v1.snapshot.bin")
    target = Conversation(tiny_model, POLICY)
    report = restore(target, path)
    n = report.n_active
    np.testing.assert_array_equal(target.arena.views().k_cache[:, :n],
                                  source.arena.views().k_cache[:, :n])


@pytest.mark.parametrize("version", [2, 3])
def test_a_version_2_or_3_file_still_restores(tiny_model, tmp_path, version) -> None:
    """Version 3 added layer planes, 4 values by dimension; a model without the one and a
    backend without the other write what version 2 did."""
    source, data = saved(tiny_model, tmp_path)
    struct.pack_into("<I", data, VERSION_AT, version)
    target = Conversation(tiny_model, POLICY)
    report = restore(target, resealed(data, tmp_path / "v2.snapshot.bin"))
    n = report.n_active
    np.testing.assert_array_equal(target.arena.views().v_cache[:, :n],
                                  source.arena.views().v_cache[:, :n])


def test_values_by_dimension_before_version_4_are_refused(tiny_model, tmp_path) -> None:
    _, data = saved(tiny_model, tmp_path)
    struct.pack_into("<I", data, VERSION_AT, 3)
    data[CODES_AT + 1] |= BY_DIMENSION
    with pytest.raises(SnapshotCorruptError, match="unknown K/V element codes 1/129"):
        restore(Conversation(tiny_model, POLICY), resealed(data, tmp_path / "x.bin"))


def test_a_version_2_file_with_layer_planes_is_refused(tiny_model, tmp_path) -> None:
    _, data = saved(tiny_model, tmp_path)
    struct.pack_into("<I", data, VERSION_AT, 2)
    struct.pack_into("<QQ", data, HEADER.size + 42, 4096, 64)  # planes offset and bytes
    with pytest.raises(SnapshotCorruptError, match="version 2 with layer planes"):
        restore(Conversation(tiny_model, POLICY), resealed(data, tmp_path / "x.bin"))


def test_unknown_element_codes_are_refused(tiny_model, tmp_path) -> None:
    _, data = saved(tiny_model, tmp_path)
    data[CODES_AT] = 9
    with pytest.raises(SnapshotCorruptError, match="unknown K/V element codes 9/1"):
        restore(Conversation(tiny_model, POLICY), resealed(data, tmp_path / "y.snapshot.bin"))


class GgmlFormatNumpy(NumpyBackend):
    """numpy computing over f16 keys and values kept by dimension (its matmuls widen them):
    writes what ggml writes."""

    kv_format = KVFormat(np.float16, np.float16, values_by_dimension=True)


@pytest.mark.parametrize("segments", [0, 3])
@pytest.mark.parametrize("direction", ["f16->f32", "f32->f16", "f16->f16"])
def test_slabs_convert_on_restore(tiny_model, tmp_path, direction, segments) -> None:
    """Through a chain too: its base rows, gathered past evictions, and its segments' rows.
    f16 is ggml's format (values by dimension), f32 numpy's (by slot)."""
    formats = {"f16": GgmlFormatNumpy, "f32": NumpyBackend}
    source_backend, target_backend = (formats[side]() for side in direction.split("->"))
    source = Conversation(tiny_model, POLICY, backend=source_backend)
    source.ingest(PROMPT)
    saver = Snapshotter(source, tmp_path / "h.snapshot.bin", compact_share=float("inf"))
    path = saver.save("").path
    for i in range(segments):  # 24 tokens a segment: the 64-slot ring evicts
        source.ingest([(7 * i + t) % 250 + 3 for t in range(24)])
        assert saver.save("").kind == "segment"
    assert source.ring.evicted > 0 or not segments
    codes = (2, 2 | BY_DIMENSION) if direction.startswith("f16") else (1, 1)
    assert tuple(path.read_bytes()[CODES_AT : CODES_AT + 2]) == codes
    target = Conversation(tiny_model, POLICY, backend=target_backend)
    report = restore(target, path)
    n = report.n_active
    assert report.segments == segments and n == source.ring.n_active
    a, b = source.arena.views(), target.arena.views()
    for plane in ("k_cache", "v_cache"):  # f32 rounds to nearest f16, f16 widens exactly
        pa, pb = getattr(a, plane), getattr(b, plane)
        np.testing.assert_array_equal(pa[:, :n].astype(pb.dtype), pb[:, :n])
