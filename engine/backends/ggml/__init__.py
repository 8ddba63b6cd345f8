"""The ggml backend: the GGUF's own quantized blocks through ggml's CPU kernels (the quantized
CPU default), the arena in ordinary memory."""

from ...model.tensor_types import ALL_TYPE_FEATURES

# The architecture FEATURES its graph implements (engine/model/architecture.py), and every
# tensor type Channel reads (model/tensor_types.py): ggml's CPU kernels compute on each
# type's own blocks (mul_mat, and get_rows for embeddings and expanded batches).
FEATURES = frozenset({"split_half_rope", "qkv_bias", "qk_norm", "fused_qkv", "fused_gate_up",
                      "wide_heads", "window_layers", "post_norms", "geglu", "embed_scale",
                      "conv_layers", "gated_query", "partial_rotary",
                      "delta_layers"}) | ALL_TYPE_FEATURES
