#version 450
// A causal depthwise convolution over time, CONV_K taps a channel (VEC pc.norm_off,
// [CONV_W, CONV_K], oldest first), whose carry (the last CONV_K - 1 inputs, oldest first) is
// plane pc.layer of the arena's conv carries (binding 21). Two layers use it:
// - LFM2's short convolution (CONV_SILU 0; engine/backends/numpy/shortconv.py), between its
//   in_proj (act[in + t*3D] holds B | C | x) and its out_proj: y = C * conv(B * x), into
//   act[out + t*D]; the carry is the conv_state plane;
// - Qwen3.5's gated delta net (CONV_SILU 1; numpy/delta.py), on its q | k | v rows
//   (act[in + t*CONV_W]): silu(conv(qkv)) into act[out + t*CONV_W]; the carry is delta_conv.
// One invocation a channel walks the pass's tokens in order, holding the window in
// registers: channels never share data, so the carry is read once and written once.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 37) const uint CONV_K = 3;     // taps: the carry's CONV_K - 1 rows, the token
layout(constant_id = 42) const uint CONV_W = 64;    // channels
layout(constant_id = 43) const uint CONV_SILU = 0;  // 0: LFM2's gated form; 1: the delta net's
layout(std430, binding = 21) buffer ConvCarry { float carry[]; };  // [planes, CONV_K - 1, CONV_W]

layout(local_size_x_id = 0) in;

const uint KC = CONV_K - 1;

void main() {
    uint c = gl_GlobalInvocationID.x;
    if (c >= CONV_W) return;
    uint kept = pc.layer * KC * CONV_W + c, taps = pc.norm_off + c * CONV_K;
    float win[CONV_K];
    [[unroll]] for (uint j = 0; j < KC; j++) win[j] = carry[kept + j * CONV_W];
    for (uint t = 0; t < prm.C; t++) {
        uint row = pc.in_off + t * (CONV_SILU != 0 ? CONV_W : 3 * D);
        win[KC] = CONV_SILU != 0 ? act[row + c] : act[row + c] * act[row + 2 * D + c];
        // Tap by tap, as numpy sums them.
        float y = win[0] * vec[taps];
        [[unroll]] for (uint j = 1; j < CONV_K; j++) y += win[j] * vec[taps + j];
        if (CONV_SILU != 0) {
            act[pc.out_off + t * CONV_W + c] = y / (1.0 + exp(-y));
        } else {
            act[pc.out_off + t * D + c] = y * act[row + D + c];
        }
        [[unroll]] for (uint j = 0; j < KC; j++) win[j] = win[j + 1];
    }
    [[unroll]] for (uint j = 0; j < KC; j++) carry[kept + j * CONV_W] = win[j];
}
