"""The IQ tensor types (IQ1_S ... IQ4_XS): numpy reads them as ggml does, and each backend
says whether it reads them (engine/model/tensor_types.py).

gguf-py's numpy dequantizers (what the numpy backend's f32 image is built with) are held to
ggml's own dequantization bit for bit, on blocks ggml's quantizer made (tests/iq_blocks.py);
ggml's products, which round their input to 8-bit blocks, to numpy's f32 product within
REL_PRODUCT; and a tiny model whose matrices take all nine types in turn runs on both
backends to the same greedy tokens. Vulkan's shaders read none of them: it refuses such a
model, and `auto` runs it on a CPU backend.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from gguf import GGMLQuantizationType as QT
from gguf import GGUFReader, quants

from engine.backends import problems_running
from engine.backends.select import Choice, fit_to_model
from engine.backends.vulkan import FEATURES as VULKAN_FEATURES
from engine.backends.vulkan import READ_TYPES as VULKAN_READ_TYPES
from engine.errors import UnsupportedTensorTypeError
from engine.model.catalog import describe
from engine.model.catalog_sources import Found
from engine.model.gguf_file import open_model
from engine.model.image_sources import arranged, image_sources
from engine.model.model import META_VERSION, load_model
from engine.model.tensor_types import IQ_TYPES, READ_TYPE_NAMES, type_feature
from engine.model.weights import image_plan

from .backend_stand_in import GpuBackendStandIn
from .parity import TOKENS, run_steps
from .tiny_model import TinySpec, write_tiny_gguf

pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")

from . import iq_blocks  # noqa: E402 - needs the ggml bindings

# What a Vulkan refusal lists, in READ_TYPE_NAMES order.
VULKAN_READS = ", ".join(n for n in READ_TYPE_NAMES if QT[n] in VULKAN_READ_TYPES)
SHAPE = (16, 512)  # rows of two 256-weight super-blocks (IQ4_NL: sixteen 32-weight blocks)
# ggml rounds a product's input to Q8_K (IQ4_NL: Q8_0) blocks; measured 0.5-0.7% of the
# largest output on SHAPE, 2% leaves room without hiding a misread block (tens of percent).
REL_PRODUCT = 0.02
# Over the tiny model's two layers the roundings add up: measured 2.8% of the largest logit
# for IQ_SPEC (1.8-3.8% for models of one IQ type, against 1.8% for Q8_0 and 2.2% for Q4_0
# on this geometry; the IQ products round their input to Q8_K blocks, one scale per 256,
# where those use Q8_0's one per 32). Its greedy tokens agree at every step: the top two
# logits are never closer than 3.6% there.
REL_MODEL = 0.05
# Wide enough for rows of whole super-blocks; nine types in turn over its 15 matrices.
IQ_SPEC = TinySpec(d_model=256, n_heads=4, n_kv_heads=2, ffn_dim=256, matrix_types=IQ_TYPES)
IDS = [t.name for t in IQ_TYPES]


@pytest.fixture(scope="module")
def matrix() -> np.ndarray:
    return (0.08 * np.random.default_rng(7).standard_normal(SHAPE)).astype(np.float32)


@pytest.fixture(scope="module")
def iq_path(tmp_path_factory):
    return write_tiny_gguf(tmp_path_factory.mktemp("iq") / "tiny-iq.gguf", IQ_SPEC)


@pytest.fixture(scope="module")
def iq_model(iq_path):
    return load_model(iq_path, iq_path.parent / "cache")


@pytest.mark.parametrize("qtype", IQ_TYPES, ids=IDS)
def test_numpy_dequantizes_as_ggml(matrix, qtype) -> None:
    blocks = iq_blocks.quantize(matrix, qtype)
    got = quants.dequantize(blocks, qtype)  # what model/weights.py builds the image with
    assert got.shape == SHAPE and got.dtype == np.float32
    np.testing.assert_array_equal(got, iq_blocks.to_float(blocks, qtype, SHAPE))
    np.testing.assert_array_equal(got, iq_blocks.get_rows(blocks, qtype, SHAPE))
    # Real weights, not zeros: even IQ1_S's 1.56 bits follow the matrix.
    assert np.corrcoef(got.ravel(), matrix.ravel())[0, 1] > 0.8


@pytest.mark.parametrize("qtype", IQ_TYPES, ids=IDS)
def test_ggml_products_match_numpys(matrix, qtype) -> None:
    blocks = iq_blocks.quantize(matrix, qtype)
    x = np.random.default_rng(8).standard_normal((4, SHAPE[1])).astype(np.float32)
    want = x @ quants.dequantize(blocks, qtype).T
    got = iq_blocks.mul_mat(blocks, qtype, SHAPE, x)
    assert np.abs(got - want).max() <= REL_PRODUCT * np.abs(want).max()


def test_an_all_iq_model_loads_with_its_types(iq_model) -> None:
    cfg = iq_model.config
    assert cfg.tensor_types == tuple(sorted(["F32", *IDS]))
    assert {type_feature(name) for name in IDS} <= cfg.features


def test_a_metadata_cache_without_tensor_types_is_rebuilt(iq_path, iq_model) -> None:
    """A record of the version before tensor_types (6) would ask nothing of a backend."""
    meta_path = iq_path.parent / "cache" / "weights" / f"{iq_model.fingerprint}.meta.json"
    meta = json.loads(meta_path.read_text())
    del meta["config"]["tensor_types"]
    meta_path.write_text(json.dumps({**meta, "version": 6}))
    again = load_model(iq_path, iq_path.parent / "cache")
    assert again.config.tensor_types == iq_model.config.tensor_types
    assert json.loads(meta_path.read_text())["version"] == META_VERSION == 7


def test_the_numpy_image_is_ggmls_dequantization(iq_path, iq_model) -> None:
    """Every matrix of the numpy backend's f32 image, against ggml's own reading of the same
    GGUF tensors: equal to the bit."""
    reader = GGUFReader(iq_path)
    tensors = {t.name: t for t in reader.tensors}
    cfg, w = iq_model.config, iq_model.weights
    seen = set()
    for name in image_plan(cfg):
        role = name.rpartition(".")[2]
        image = w.token_embd if name == "token_embd" else \
            getattr(w.layers[int(name.split(".")[1])], role) if name.startswith("blk.") else None
        if image is None or image.ndim != 2:
            continue
        parts = []
        for source in image_sources(cfg, name):
            t = tensors[source]
            shape = tuple(int(n) for n in reversed(t.shape))
            parts.append(iq_blocks.to_float(t.data, t.tensor_type, shape))
            seen.add(t.tensor_type)
        np.testing.assert_array_equal(image, np.concatenate(arranged(cfg, name, parts)))
    assert seen == set(IQ_TYPES)


def test_an_all_iq_model_runs_alike_on_numpy_and_ggml(iq_model) -> None:
    from engine.backends.ggml.backend import GgmlBackend

    want, _ = run_steps(iq_model, None, TOKENS)
    got, _ = run_steps(iq_model, GgmlBackend(), TOKENS)
    assert np.abs(got - want).max() <= REL_MODEL * np.abs(want).max()
    assert list(got.argmax(axis=1)) == list(want.argmax(axis=1))


def _retyped(path, tmp_path, old: QT, new: QT):
    """A copy of the GGUF at `path` whose first `old` tensor says it is `new` (same block
    bytes: the data still fits), and that tensor's name."""
    data = bytearray(path.read_bytes())
    name = next(t.name for t in GGUFReader(path).tensors if t.tensor_type == old)
    at = data.index(name.encode()) + len(name)  # u32 n_dims, u64 dims[n_dims], u32 type
    at += 4 + 8 * int.from_bytes(data[at : at + 4], "little")
    assert int.from_bytes(data[at : at + 4], "little") == int(old)
    data[at : at + 4] = int(new).to_bytes(4, "little")
    bad = tmp_path / f"{new.name}.gguf"
    bad.write_bytes(bytes(data))
    return bad, name


def test_a_type_channel_does_not_read_is_refused_in_one_line(iq_path, tmp_path) -> None:
    # TQ2_0 (ternary) blocks are 66 bytes per 256 weights, as IQ2_XXS's are.
    bad, name = _retyped(iq_path, tmp_path, QT.IQ2_XXS, QT.TQ2_0)
    with pytest.raises(UnsupportedTensorTypeError) as exc:
        open_model(bad)
    assert str(exc.value) == (f"tensor {name} has unsupported type TQ2_0 (supported: "
                              f"{', '.join(READ_TYPE_NAMES)}): {bad}")
    assert describe(Found("folder", bad)).problem == f"tensor {name} has unsupported type TQ2_0"


def test_the_catalog_lists_an_iq_file_as_supported(iq_path) -> None:
    entry = describe(Found("folder", iq_path))
    assert entry.supported, entry.problem
    assert {type_feature(name) for name in IDS} <= set(entry.features)
    backends = problems_running(entry.features, "llama")  # what `channel models` shows
    assert backends["numpy"] is None and backends["ggml"] is None
    assert backends["vulkan"] == (
        f"the Vulkan backend does not read {', '.join(n for n in READ_TYPE_NAMES if n in IDS)} "
        f"weights (it reads {VULKAN_READS})")


def test_vulkan_refuses_types_its_shaders_lack_and_auto_takes_a_cpu(iq_model, tmp_path) -> None:
    """Before, `auto` kept Vulkan for any llama model and its upload then failed on a tensor
    type its shaders lack (BF16, IQ, Q2_K); now the refusal comes first and the model
    runs on a CPU. A Q4_K model stays on the GPU (tests/test_vulkan_kquant.py)."""
    gpu = Choice(GpuBackendStandIn(VULKAN_FEATURES), None)
    bf16 = open_model(write_tiny_gguf(tmp_path / "bf16.gguf", TinySpec(
        tensor_type=QT.BF16))).config
    q4_0 = open_model(write_tiny_gguf(tmp_path / "q40.gguf", TinySpec(
        tensor_type=QT.Q4_0))).config
    k_quant = open_model(write_tiny_gguf(tmp_path / "q4k.gguf", TinySpec(
        d_model=256, ffn_dim=256, tensor_type=QT.Q4_K))).config
    assert problems_running(bf16.features, "llama")["vulkan"] == (
        f"the Vulkan backend does not read BF16 weights (it reads {VULKAN_READS})")
    for cfg in (iq_model.config, bf16):
        assert fit_to_model(gpu, "auto", cfg, tmp_path).backend.name == "ggml"
        assert fit_to_model(gpu, "vulkan", cfg, tmp_path) is gpu  # asked for: it refuses
    for cfg in (q4_0, k_quant):
        assert fit_to_model(gpu, "auto", cfg, tmp_path) is gpu


def test_vulkans_declared_types_are_those_its_upload_encodes() -> None:
    try:
        from engine.backends.vulkan.encodings import SOURCES
    except ImportError as exc:  # the `vulkan` package: not every machine has it
        pytest.skip(f"the Vulkan backend does not import here: {exc}")
    assert {int(t) for t in VULKAN_READ_TYPES} == set(SOURCES)
