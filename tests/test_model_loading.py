"""Model files: clear one-line errors for bad ones, and the cached weight image."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT

from engine.errors import (
    ModelNotFoundError,
    NotGGUFError,
    UnsupportedArchitectureError,
    UnsupportedTensorTypeError,
)
from engine.model.gguf_file import open_model
from engine.model.model import load_model
from engine.model.weights import PREAMBLE

from .tiny_model import TinySpec, write_tiny_gguf

REPO = Path(__file__).resolve().parent.parent


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFoundError, match="model file not found"):
        load_model(tmp_path / "nope.gguf", tmp_path)


def test_not_a_gguf(tmp_path: Path) -> None:
    bogus = tmp_path / "notes.gguf"
    bogus.write_text("hello, I am a text file\n")
    with pytest.raises(NotGGUFError, match="not a GGUF file"):
        load_model(bogus, tmp_path)


def test_empty_file(tmp_path: Path) -> None:
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(NotGGUFError, match="not a GGUF file"):
        load_model(empty, tmp_path)


def test_truncated_gguf(tmp_path: Path, tiny_gguf: Path) -> None:
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(tiny_gguf.read_bytes()[:5000])
    with pytest.raises(NotGGUFError, match="corrupt GGUF"):
        load_model(cut, tmp_path / "cache")


def test_unsupported_architecture(tmp_path: Path) -> None:
    path = write_tiny_gguf(tmp_path / "mamba.gguf", TinySpec(architecture="mamba"))
    with pytest.raises(UnsupportedArchitectureError, match="architecture 'mamba' is not supported"):
        load_model(path, tmp_path / "cache")


def test_unsupported_tensor_type(tmp_path: Path, tiny_gguf: Path) -> None:
    # Rewrite one tensor's type field to Q8_1, which the numpy backend does not handle.
    data = bytearray(tiny_gguf.read_bytes())
    at = _tensor_type_offset(data, b"blk.0.attn_q.weight")
    assert int.from_bytes(data[at : at + 4], "little") == int(QT.F32)
    data[at : at + 4] = int(QT.Q8_1).to_bytes(4, "little")
    bad = tmp_path / "iq2.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(UnsupportedTensorTypeError, match="unsupported type Q8_1"):
        open_model(bad)


def _tensor_type_offset(data: bytearray, name: bytes) -> int:
    # tensor info: u64 name_len, name, u32 n_dims, u64 dims[n_dims], u32 type, u64 offset
    at = data.index(name) + len(name)
    n_dims = int.from_bytes(data[at : at + 4], "little")
    return at + 4 + 8 * n_dims


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--model", "/definitely/missing.gguf"], "model file not found"),
        (["--model", __file__], "not a GGUF file"),
    ],
)
def test_cli_reports_bad_models_in_one_line(tmp_path: Path, args, expected) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "channel_cli.cli", "chat", *args, "--data-dir", str(tmp_path), "hi"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("channel: error:") and expected in lines[0]
    assert "Traceback" not in proc.stderr


def test_image_is_built_once_then_mapped(tmp_path: Path, tiny_gguf: Path) -> None:
    seen = []
    first = load_model(tiny_gguf, tmp_path, progress=lambda done, total: seen.append((done, total)))
    assert first.image_built and "image_build_s" in first.timings
    assert seen and seen[-1][0] == seen[-1][1]  # the progress bar reached 100%
    images = list((tmp_path / "weights").glob("*.chwi"))
    assert len(images) == 1 and first.fingerprint in images[0].name
    mtime = images[0].stat().st_mtime_ns
    second = load_model(tiny_gguf, tmp_path)
    assert not second.image_built and "image_build_s" not in second.timings
    assert images[0].stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(second.weights.layers[1].wqkv, first.weights.layers[1].wqkv)
    assert not second.weights.layers[0].wqkv.flags.writeable


def test_damaged_image_is_rebuilt(tmp_path: Path, tiny_gguf: Path) -> None:
    load_model(tiny_gguf, tmp_path)
    image = next((tmp_path / "weights").glob("*.chwi"))
    reference = image.read_bytes()
    image.write_bytes(reference[: len(reference) // 2])  # truncated
    model = load_model(tiny_gguf, tmp_path)
    assert model.image_built
    assert image.read_bytes() == reference
    image.write_bytes(b"XXXX" + reference[4:])  # wrong magic
    assert load_model(tiny_gguf, tmp_path).image_built


def test_image_keyed_by_content_not_path(tmp_path: Path, tiny_gguf: Path) -> None:
    copy = tmp_path / "copy.gguf"
    copy.write_bytes(tiny_gguf.read_bytes())
    a = load_model(tiny_gguf, tmp_path / "cache")
    b = load_model(copy, tmp_path / "cache")
    assert a.fingerprint == b.fingerprint and not b.image_built
    other = write_tiny_gguf(tmp_path / "other.gguf", TinySpec(seed=9))
    assert load_model(other, tmp_path / "cache").fingerprint != a.fingerprint


def test_real_model_loads_from_cache_quickly(real_model_path: Path, real_model) -> None:
    # real_model built (or found) the shared image; a second load maps it.
    from .conftest import SHARED_CACHE

    t0 = time.perf_counter()
    again = load_model(real_model_path, SHARED_CACHE)
    elapsed = time.perf_counter() - t0
    assert not again.image_built
    assert again.config == real_model.config
    assert again.config.n_layers == 30 and again.config.kv_dim == 192
    # Generous on a shared machine; the benchmark reports the real figure.
    assert elapsed < 5.0, f"cached load took {elapsed:.2f} s"
    image = SHARED_CACHE / "weights" / f"{again.fingerprint}.f32.chwi"
    assert image.stat().st_size > PREAMBLE.size + again.weights.nbytes


def test_metadata_cache_serves_a_quantized_backend_without_the_image(tmp_path, tiny_gguf) -> None:
    model = load_model(tiny_gguf, tmp_path, f32_weights=False)
    assert model.weights is None and not list((tmp_path / "weights").glob("*.chwi"))
    info = model.tensors["blk.0.attn_q.weight"]
    raw = tiny_gguf.read_bytes()[info.offset : info.offset + info.nbytes]
    assert len(raw) == info.nbytes == 64 * 64 * 4
    full = load_model(tiny_gguf, tmp_path)
    first_row = np.frombuffer(raw, np.float32)[:64]
    np.testing.assert_array_equal(full.weights.layers[0].wqkv[0], first_row)


def test_damaged_metadata_cache_is_rebuilt(tmp_path, tiny_gguf) -> None:
    load_model(tiny_gguf, tmp_path)
    meta = next((tmp_path / "weights").glob("*.meta.json"))
    meta.write_text("{not json")
    model = load_model(tiny_gguf, tmp_path)
    assert model.tokenizer.eos_id == 2
    assert meta.read_text().startswith("{")
