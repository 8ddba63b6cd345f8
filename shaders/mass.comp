#version 450
// Attention mass per slot: mass[s] (+)= sum over probability rows r of p[r, s] / sum[r].
// Rows come in groups of per_t for one query token t, which saw slots [0, n0 + t] only.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

void main() {
    uint s = gl_GlobalInvocationID.x;
    if (s >= prm.N) return;
    float total = 0.0;
    for (uint r = 0; r < pc.count; r++) {
        uint row = pc.p_row0 + r, t = r / pc.per_t;
        // Rows of tokens past this pass's C hold stale numbers from an earlier, longer pass.
        if (t < prm.C && s <= prm.n0 + t) total += probs[row * S + s] * probs[PROWS * S + row];
    }
    mass[s] = (pc.flags & 1u) != 0u ? mass[s] + total : total;
}
