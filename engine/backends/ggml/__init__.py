"""The ggml backend: the GGUF's own quantized blocks through ggml's CPU kernels (the quantized
CPU default), the arena in ordinary memory."""

# The architecture FEATURES its graph implements (engine/model/architecture.py).
FEATURES = frozenset({"split_half_rope", "qkv_bias", "qk_norm", "fused_qkv", "fused_gate_up",
                      "wide_heads", "window_layers", "post_norms", "geglu", "embed_scale",
                      "conv_layers", "gated_query", "partial_rotary", "delta_layers"})
