"""What state each layer of a model keeps, from its architecture and GGUF metadata.

Most models keep a K/V plane per layer in the ring (FULL). Hybrids mix in layers that keep
something else: Gemma 3's sliding-window layers a K/V plane of the newest `window` tokens
(WINDOW), LFM2's short-convolution layers the last conv_kernel - 1 inputs of their
convolution (CONV), Qwen3.5's gated delta-net layers a convolution carry and one delta-rule
matrix per value head (DELTA). architecture.py's support_problem and gguf_file.py's config read the
kinds here, so the catalog, the config and the tensor checks agree.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .architecture import Architecture

# What one layer's state is (docs/memory.md): a K/V plane in the ring (FULL), a K/V plane of
# the newest `window` tokens (WINDOW: Gemma 3's sliding-window layers), or a fixed-size
# recurrent carry (CONV: LFM2's short convolution, the last conv_kernel - 1 inputs), or a
# fixed-size recurrent state (DELTA: Qwen3.5's gated delta net, its convolution's carry and a
# head_k x head_v matrix per value head). Neither CONV nor DELTA state grows with the tokens.
FULL, WINDOW, CONV, DELTA = "full", "window", "conv", "delta"
LAYER_KINDS = (FULL, WINDOW, CONV, DELTA)

Metadata = Callable[[str], Any]  # key -> value or None


def swa_layer_kinds(arch: Architecture, n_layers: int, window: int) -> tuple[str, ...]:
    """Each layer's kind under the architecture's sliding-window pattern (llama.cpp's
    set_swa_pattern: layer i is global when i % n == n - 1); () when it has none."""
    if not arch.swa_pattern or window <= 0:
        return ()
    n = arch.swa_pattern
    return tuple(FULL if i % n == n - 1 else WINDOW for i in range(n_layers))


def layer_kinds(arch: Architecture, n_layers: int, window: int,
                kv_heads: Sequence[int] = (), interval: int = 0) -> tuple[str, ...]:
    """Each layer's kind (() when all are FULL). Where the architecture has conv layers, a
    layer without K/V heads (kv_heads: per layer) is CONV, and a window makes every attention
    layer slide (llama.cpp's LFM2: is_swa = !is_recurrent); where it has delta layers, every
    `interval`-th layer (the GGUF's full_attention_interval, else the architecture's) attends
    (FULL) and the others are DELTA (llama.cpp's qwen35: recurrent unless
    (i + 1) % full_attention_interval == 0); else the sliding-window pattern."""
    if arch.delta_interval:
        n = interval if interval > 0 else arch.delta_interval
        return tuple(FULL if (i + 1) % n == 0 else DELTA for i in range(n_layers))
    if not arch.conv_layers or not kv_heads:
        return swa_layer_kinds(arch, n_layers, window)
    attention = WINDOW if window > 0 else FULL
    kinds = tuple(CONV if n == 0 else attention for n in kv_heads)
    return kinds if set(kinds) != {FULL} else ()


def trunk_layers(get: Metadata) -> int:
    """The layers a forward pass runs: `block_count` less the multi-token-prediction blocks
    appended after them (`nextn_predict_layers`, Qwen3.5's MTP head), which are ignored."""
    name = get("general.architecture")
    blocks, nextn = get(f"{name}.block_count"), get(f"{name}.nextn_predict_layers")
    if not isinstance(blocks, int) or isinstance(blocks, bool):
        return 0
    if isinstance(nextn, int) and not isinstance(nextn, bool) and 0 < nextn < blocks:
        return blocks - nextn
    return blocks


def layer_kv_heads(get: Metadata, n_layers: int) -> tuple[int, ...]:
    """Each layer's `attention.head_count_kv`: LFM2's GGUFs give one per layer (0 for a conv
    layer), others one for all; () when absent. ValueError when it is neither."""
    name = get("general.architecture")
    value = get(f"{name}.attention.head_count_kv")
    if value is None:
        return ()
    counts = list(value) if isinstance(value, (list, tuple)) else [value] * n_layers
    if len(counts) != n_layers or not all(
            isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
        raise ValueError(f"metadata '{name}.attention.head_count_kv' is neither a count nor "
                         f"one per layer ({value!r:.40})")
    return tuple(counts)


def layer_summary(kinds: Sequence[str], window: int) -> str:
    """What a hybrid's layers keep, in words (`channel models`, `channel doctor`): e.g.
    `3 global layers in the ring, 15 with 512-token windows`; "" when every layer is FULL."""
    if not kinds or set(kinds) == {FULL}:
        return ""
    full = kinds.count(FULL)
    parts = [f"{full} global layer{'' if full == 1 else 's'} in the ring"]
    if WINDOW in kinds:
        parts.append(f"{kinds.count(WINDOW)} with {window:,}-token windows")
    if CONV in kinds:
        parts.append(f"{kinds.count(CONV)} with conv carries")
    if DELTA in kinds:
        parts.append(f"{kinds.count(DELTA)} with delta-rule states")
    return ", ".join(parts)
