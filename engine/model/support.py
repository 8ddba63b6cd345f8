"""Whether Channel can run a GGUF: `support_problem` reads its metadata and tensor names
against the architecture table (architecture.py) and names the first thing missing."""

from __future__ import annotations

from collections.abc import Collection

from .architecture import ARCHITECTURES, Metadata, metadata_layer_kinds
from .delta_net import delta_metadata_problem
from .layer_kinds import CONV, DELTA, FULL, WINDOW, layer_kv_heads, trunk_layers

# Architectures people will try, and what keeps each out, so the refusal says why.
NOT_YET: dict[str, str] = {
    "gemma": "Gemma 1's block is not checked against a reference (Gemma 3 is supported)",
    "gemma2": "logit soft-capping on attention and output is not implemented",
    "lfm2moe": "mixture-of-experts layers are not implemented",
    "mistral3": "the Mistral 3 vision-language layout is not implemented",
    "phi2": "partial rotary and biased LayerNorm are not implemented",
    "qwen2moe": "mixture-of-experts layers are not implemented",
    "qwen3moe": "mixture-of-experts layers are not implemented",
    "qwen35moe": "mixture-of-experts layers are not implemented; dense qwen35 is supported",
    "qwen3next": "mixture-of-experts layers are not implemented; dense qwen35 is supported",
}

# RoPE scaling types (`<arch>.rope.scaling.type`) the forward passes implement. "linear"
# divides positions by the factor; Llama 3's scaling comes as a rope_freqs tensor instead.
ROPE_SCALING_TYPES = ("none", "linear")
# A window at least this long never slides inside a default ring (RingPolicy's max_slots);
# a longer ring asked for is capped at the window (RingPolicy.for_model).
SLIDING_WINDOW_IGNORED_FROM = 4096


def supported_names() -> str:
    return ", ".join(ARCHITECTURES)


def support_problem(get: Metadata, tensor_names: Collection[str]) -> str | None:
    """Why Channel cannot run a GGUF with this metadata and these tensors, or None.

    Reads metadata and tensor names only, so the model catalog can call it on headers.
    """
    name = get("general.architecture")
    if name not in ARCHITECTURES:
        why = NOT_YET.get(str(name), f"supported: {supported_names()}")
        return f"architecture {name!r} is not supported ({why})"
    arch = ARCHITECTURES[name]
    numbers = {}
    for key, default in (("expert_count", 0), ("rope.scaling.factor", 0.0),
                         ("rope.scaling.attn_factor", 1.0), ("attention.sliding_window", 0),
                         ("block_count", 0), ("attn_logit_softcapping", 0.0),
                         ("final_logit_softcapping", 0.0)):
        value = get(f"{name}.{key}")
        if value is not None and (isinstance(value, bool) or
                                  not isinstance(value, (int, float))):
            return f"{name}: metadata '{name}.{key}' is not a number ({value!r:.40})"
        numbers[key] = default if value is None else value
    if numbers["expert_count"] > 0:
        return f"{name}: mixture-of-experts layers are not implemented"
    scaling = get(f"{name}.rope.scaling.type") or "none"
    if scaling not in ROPE_SCALING_TYPES and numbers["rope.scaling.factor"] not in (0.0, 1.0):
        return f"{name}: RoPE scaling {scaling!r} is not implemented"
    if numbers["rope.scaling.attn_factor"] != 1.0:
        return (f"{name}: RoPE attention factor {numbers['rope.scaling.attn_factor']} "
                f"is not implemented")
    if numbers["attn_logit_softcapping"] or numbers["final_logit_softcapping"]:
        return f"{name}: logit soft-capping is not implemented"
    window = numbers["attention.sliding_window"]
    # Architectures with a sliding-window pattern (or LFM2's) run windows as WINDOW layers.
    runs_windows = arch.ignores_sliding_window or arch.swa_pattern > 0 or arch.conv_layers
    if 0 < window < SLIDING_WINDOW_IGNORED_FROM and not runs_windows:
        # Rebase keeps every position in the ring within the ring's length of the newest.
        return f"{name}: sliding-window attention ({window} tokens) is not implemented"
    names = set(tensor_names)
    if any(n.startswith("rope_factors_") or ".rope_factors_" in n for n in names):
        return f"{name}: LongRoPE (rope_factors_long/short) is not implemented"
    if "rope_freqs.weight" in names and not arch.rope_freq_factors:
        return f"{name}: per-frequency RoPE factors are not implemented for this architecture"
    n_layers = trunk_layers(get)
    if n_layers <= 0:
        return f"{name}: metadata lacks '{name}.block_count'"
    try:
        kv_heads = layer_kv_heads(get, n_layers)
    except ValueError as exc:
        return f"{name}: {exc}"
    if len(set(kv_heads) - {0}) > 1:
        return (f"{name}: attention layers with different K/V head counts "
                f"({', '.join(map(str, sorted(set(kv_heads) - {0})))}) are not implemented")
    if 0 in kv_heads and not arch.conv_layers:
        return f"{name}: layers without K/V heads are not implemented"
    kinds = metadata_layer_kinds(get, n_layers)
    if kinds and FULL not in kinds:  # the ring would hold no layer's keys
        others = [f"{kinds.count(kind)} {what} layers" for kind, what in (
            (WINDOW, "sliding-window"), (CONV, "short-convolution"), (DELTA, "delta-net"))
            if kind in kinds]
        return f"{name}: {', '.join(others)} and no global one are not implemented"
    kernel = get(f"{name}.shortconv.l_cache")
    if CONV in kinds and (not isinstance(kernel, int) or isinstance(kernel, bool) or kernel < 2):
        return f"{name}: metadata '{name}.shortconv.l_cache' is not a kernel length ({kernel!r})"
    if DELTA in kinds and (problem := delta_metadata_problem(get)):
        return problem
    # Blocks past the trunk (multi-token prediction: Qwen3.5's nextn) are not run or checked.
    if n_layers < numbers["block_count"]:
        names = {n for n in names if not n.startswith("blk.") or
                 not n.split(".", 2)[1].isdigit() or int(n.split(".", 2)[1]) < n_layers}
    expected = arch.model_tensors(n_layers, "output.weight" not in names,
                                  "rope_freqs.weight" in names, kinds)
    missing = [n for n in expected if n not in names]
    if missing:
        return f"{name}: missing tensor {missing[0]!r}" + (
            f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")
    unknown = sorted(names - set(expected))
    if unknown:
        return (f"{name}: tensor {unknown[0]!r} is not part of {name} as Channel implements "
                f"it (a feature the architecture table lacks)")
    return None
