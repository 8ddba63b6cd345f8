#version 450
// Gated queries (Qwen3.5's attention layers): the attention output times sigmoid(gate), in
// place, act[out + i] /= 1 + exp(-act[in + i]) over the pass's C * QD values, as numpy's
// sigmoid_mul. The q|k|v|gate product (GATED_Q) left the gates at act[in].
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= prm.C * QD) return;
    act[pc.out_off + i] = act[pc.out_off + i] / (1.0 + exp(-act[pc.in_off + i]));
}
