#version 450
// Greedy sampling support: the index of the largest logit (the first one on ties, as
// np.argmax), so a greedy decode can read 8 bytes instead of the whole logits row.
// One workgroup of one subgroup; lanes stride over the vocabulary.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

void main() {
    uint lane = gl_LocalInvocationID.x;
    float best = -1.0 / 0.0;
    uint at = 0xFFFFFFFFu;
    for (uint i = lane; i < V; i += WG) {
        float x = logits[i];
        if (x > best) {  // strict: a lane keeps its first maximum
            best = x;
            at = i;
        }
    }
    float top = subgroupMax(best);
    uint first = subgroupMin(best == top ? at : 0xFFFFFFFFu);
    if (lane == 0) {
        outw[0] = first;
        outw[1] = floatBitsToUint(top);
    }
}
