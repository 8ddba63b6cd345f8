"""The bounded GGUF header reader: the same metadata and tensor table as gguf-py's GGUFReader
(on the shipped model and tiny GGUFs), and one named error, quickly, for any damaged header."""

from __future__ import annotations

import struct
import time
from pathlib import Path

import gguf
import pytest
from gguf import GGMLQuantizationType as QT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.model.gguf_header import (
    KEEP_ARRAY_ITEMS,
    GGUFHeaderError,
    GGUFVersionError,
    HeaderLimitError,
    MalformedHeaderError,
    NotGGUFHeaderError,
    SkippedArray,
    TruncatedHeaderError,
    parse_header,
    read_header,
)
from engine.paths import default_model_path

from .model_homes import write_other_architecture
from .tiny_model import TinySpec, write_tiny_gguf


def assert_same_as_gguf_py(path: Path) -> None:
    header = read_header(path)
    reader = gguf.GGUFReader(path)
    fields = {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}
    assert header.version == reader.fields["GGUF.version"].contents()
    assert set(header.metadata) == set(fields)
    for key, field in fields.items():
        ours = header.metadata[key]
        if isinstance(ours, SkippedArray):
            assert field.types[0] == gguf.GGUFValueType.ARRAY
            assert ours.count == len(field.data) > KEEP_ARRAY_ITEMS
            assert ours.item_type == field.types[1]
        elif isinstance(ours, float):
            assert ours == pytest.approx(field.contents(), rel=1e-7), key
        else:
            assert ours == field.contents(), key
    assert [(t.name, t.ggml_type, t.shape, t.n_elements) for t in header.tensors] == [
        (t.name, int(t.tensor_type), tuple(int(x) for x in t.shape), int(t.n_elements))
        for t in reader.tensors]
    # Offsets are relative to the data section, which starts after the aligned header.
    assert [t.offset for t in header.tensors] == [
        int(t.data_offset) - int(reader.data_offset) for t in reader.tensors]


def test_matches_gguf_py_on_the_shipped_model() -> None:
    assert_same_as_gguf_py(default_model_path())


@pytest.mark.parametrize("qtype", [QT.F32, QT.F16, QT.Q8_0, QT.Q4_1])
def test_matches_gguf_py_on_tiny_models(tmp_path: Path, qtype: QT) -> None:
    assert_same_as_gguf_py(write_tiny_gguf(tmp_path / "t.gguf", TinySpec(tensor_type=qtype)))


def test_matches_gguf_py_on_naming_metadata(tmp_path: Path) -> None:
    assert_same_as_gguf_py(write_other_architecture(tmp_path / "gemma.gguf"))


def test_shipped_model_header_is_fast() -> None:
    path = default_model_path()
    read_header(path)  # page cache
    t0 = time.perf_counter()
    header = read_header(path)
    elapsed = time.perf_counter() - t0
    assert len(header.tensors) == 272 and header.get("tokenizer.ggml.tokens") is None
    assert elapsed < 0.5, f"{elapsed * 1e3:.0f} ms"


@pytest.fixture(scope="module")
def tiny_header_bytes(tmp_path_factory) -> bytes:
    path = write_tiny_gguf(tmp_path_factory.mktemp("hdr") / "t.gguf")
    data = path.read_bytes()
    return data[: read_header(path).header_bytes]


def test_named_errors(tiny_header_bytes: bytes, tmp_path: Path) -> None:
    good = tiny_header_bytes
    with pytest.raises(NotGGUFHeaderError, match="starts with b'GGML'"):
        parse_header(b"GGML" + good[4:])
    with pytest.raises(GGUFVersionError, match="version 1 is not supported"):
        parse_header(good[:4] + struct.pack("<I", 1) + good[8:])
    with pytest.raises(GGUFVersionError, match="big-endian"):
        parse_header(good[:4] + struct.pack(">I", 3) + good[8:])
    with pytest.raises(TruncatedHeaderError, match="truncated GGUF header"):
        parse_header(good[:-3])
    with pytest.raises(HeaderLimitError, match="larger than 100 bytes"):
        parse_header(good, max_bytes=100)
    with pytest.raises(HeaderLimitError, match="tensors, over the limit"):
        parse_header(good[:8] + struct.pack("<Q", 1 << 40) + good[16:])
    # the first key's value type (after magic, version, counts, key length and key)
    key_len = struct.unpack_from("<Q", good, 24)[0]
    at = 32 + key_len
    with pytest.raises(MalformedHeaderError, match="unknown value type 77"):
        parse_header(good[:at] + struct.pack("<I", 77) + good[at + 4 :])
    (tmp_path / "empty.gguf").write_bytes(b"")
    with pytest.raises(NotGGUFHeaderError, match="0 bytes"):
        read_header(tmp_path / "empty.gguf")
    with pytest.raises(NotGGUFHeaderError, match="not a regular file"):
        read_header(tmp_path)


@settings(max_examples=300, deadline=2000, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.data_too_large])
@given(data=st.data())
def test_fuzzed_headers_fail_with_one_named_error(tiny_header_bytes: bytes, data) -> None:
    """Flipped bytes, overwritten lengths and truncations: a header, or a GGUFHeaderError
    with a one-line message, in bounded time (the deadline), never another exception."""
    buf = bytearray(tiny_header_bytes)
    for _ in range(data.draw(st.integers(1, 6), label="edits")):
        at = data.draw(st.integers(0, len(buf) - 1), label="at")
        kind = data.draw(st.sampled_from(["byte", "u64", "u32"]), label="kind")
        if kind == "byte":
            buf[at] = data.draw(st.integers(0, 255), label="value")
        else:
            size = 8 if kind == "u64" else 4
            value = data.draw(st.integers(0, (1 << (8 * size)) - 1), label="value")
            buf[at : at + size] = value.to_bytes(size, "little")[: len(buf) - at]
    cut = data.draw(st.integers(0, len(buf)), label="cut")
    try:
        header = parse_header(bytes(buf[:cut]))
    except GGUFHeaderError as exc:
        message = str(exc)
        assert message and "\n" not in message
    else:
        assert header.header_bytes <= cut
