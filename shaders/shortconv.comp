#version 450
// A CONV layer's short convolution (LFM2; engine/backends/numpy/shortconv.py), between its
// in_proj (MODE_STORE: act[in + t*3D] holds B | C | x) and its out_proj (MODE_RESID from
// act[out + t*D]): y = C * conv(B * x), the convolution causal and depthwise, CONV_K taps a
// channel (VEC pc.norm_off, [D, CONV_K], oldest first). Its carry, the last CONV_K - 1 rows of
// B*x, is the arena's conv_state plane pc.layer, oldest first.
// One invocation a channel walks the pass's tokens in order, holding the window in
// registers: channels never share data, so the carry is read once and written once.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(constant_id = 37) const uint CONV_K = 3;  // taps: the carry's CONV_K - 1 rows, the token
layout(std430, binding = 21) buffer ConvState { float carry[]; };  // arena conv_state [n_conv, CONV_K - 1, D]

layout(local_size_x_id = 0) in;

const uint KC = CONV_K - 1;

void main() {
    uint c = gl_GlobalInvocationID.x;
    if (c >= D) return;
    uint kept = pc.layer * KC * D + c, taps = pc.norm_off + c * CONV_K;
    float win[CONV_K];
    [[unroll]] for (uint j = 0; j < KC; j++) win[j] = carry[kept + j * D];
    for (uint t = 0; t < prm.C; t++) {
        uint row = pc.in_off + t * 3 * D;
        win[KC] = act[row + c] * act[row + 2 * D + c];
        // Tap by tap, as numpy sums them.
        float y = win[0] * vec[taps];
        [[unroll]] for (uint j = 1; j < CONV_K; j++) y += win[j] * vec[taps + j];
        act[pc.out_off + t * D + c] = y * act[row + D + c];
        [[unroll]] for (uint j = 0; j < KC; j++) win[j] = win[j + 1];
    }
    [[unroll]] for (uint j = 0; j < KC; j++) carry[kept + j * D] = win[j];
}
