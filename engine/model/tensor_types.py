"""The GGML tensor types Channel reads, and the backend feature each one needs.

One table for loading (gguf_file.py refuses a tensor of any other type), the catalog (which
lists such a file as unsupported, in the same words) and the backends, which declare the
types they read as features (`<type>_weights`) beside the architecture FEATURES, so that
`backend_problem` refuses a model whose tensors a backend cannot read (Vulkan reads the floats,
the 32-weight types and Q3_K-Q6_K, not BF16, Q2_K or the IQ types) and `--backend auto`
moves it to a CPU backend.

Every type here is one gguf-py dequantizes in numpy (`gguf.quants.dequantize`: the numpy
backend's f32 image, model/weights.py) and ggml runs natively (the ggml backend computes on
the GGUF's own blocks). Types gguf-py can also write are round-tripped by the tests; the
K-quants and the IQ types are dequantize-only in gguf-py, and tests/iq_blocks.py makes IQ
blocks with ggml's quantizer to hold gguf-py's dequantizers to ggml's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable

from gguf import GGMLQuantizationType

# In groups: floats; the legacy 32-weight blocks; the K-quants' 256-weight super-blocks; the
# IQ ("importance") types, whose codes index ggml's lattice grids (IQ4_NL/IQ4_XS: a
# non-linear 16-value table). Left out, though gguf-py and ggml both know them: Q8_1 (an
# activation type, never a stored weight), TQ1_0/TQ2_0 (ternary BitNet/TriLM weights) and
# MXFP4/NVFP4 (gpt-oss's MoE experts), for which no supported model is published.
READ_TYPE_NAMES = (
    "F32", "F16", "BF16",
    "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
    "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K",
    "IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ4_NL", "IQ4_XS",
)
READ_TYPES: frozenset[GGMLQuantizationType] = frozenset(
    GGMLQuantizationType[name] for name in READ_TYPE_NAMES)
IQ_TYPES: tuple[GGMLQuantizationType, ...] = tuple(
    GGMLQuantizationType[name] for name in READ_TYPE_NAMES if name.startswith("IQ"))


def type_feature(name: str) -> str:
    """The backend feature reading tensors of type `name` (F32 -> f32_weights)."""
    return f"{name.lower()}_weights"


# Feature -> the words a refusal uses, in READ_TYPE_NAMES order.
TYPE_FEATURES: dict[str, str] = {type_feature(name): name for name in READ_TYPE_NAMES}
ALL_TYPE_FEATURES = frozenset(TYPE_FEATURES)


def type_features(names: Iterable[str]) -> frozenset[str]:
    """The features a model whose tensors are of these types (names) needs."""
    return frozenset(type_feature(name) for name in names)


def features_of(types: Iterable[GGMLQuantizationType]) -> frozenset[str]:
    """type_features of GGMLQuantizationType members (a backend's declaration)."""
    return type_features(t.name for t in types)


def type_names(codes: Iterable[int]) -> tuple[str, ...]:
    """The sorted names of these ggml type codes (ModelConfig.tensor_types); a code gguf-py
    does not know is left out (loading refuses it first: tensor_type_problem)."""
    names = set()
    for code in codes:
        with contextlib.suppress(ValueError):
            names.add(GGMLQuantizationType(code).name)
    return tuple(sorted(names))


def tensor_type_problem(tensor: str, code: int, *, listing: bool = False) -> str | None:
    """Why Channel cannot read tensor `tensor` of ggml type `code`, or None. `listing` adds
    the types it reads (the loader's error; the catalog's status column stays short)."""
    try:
        kind = GGMLQuantizationType(code)
    except ValueError:
        return f"tensor {tensor} has unknown type code {code}"
    if kind in READ_TYPES:
        return None
    reads = f" (supported: {', '.join(READ_TYPE_NAMES)})" if listing else ""
    return f"tensor {tensor} has unsupported type {kind.name}{reads}"
