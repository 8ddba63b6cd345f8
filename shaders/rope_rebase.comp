#version 450
// Rebase: rotate the cached keys of slots [0, count) by each slot's own angle, every layer.
// The ring computes the per-slot cos/sin (float64 angles, rounded once) into the arena's
// rebase_cos/rebase_sin [S, HALF], exactly as its numpy rebase does; RoPE composes, so rotating
// a key at position p by (p' - p) gives the key at p'. Invocation per (slot, pair). The bound
// K planes are pc.flags layers (all of them, or one group where they exceed one binding).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

void main() {
    uint id = gl_GlobalInvocationID.x;
    uint s = id / (KVD / 2), p = id % (KVD / 2);
    if (s >= pc.count) return;
    uint j = p % HALF;
    float c = rot_cos[s * HALF + j], sn = rot_sin[s * HALF + j];
    for (uint l = 0; l < pc.flags; l++) {
        uint k = (l * S + s) * KVD + 2 * p;
        float e = kc[k], o = kc[k + 1];
        kc[k] = e * c - o * sn;
        kc[k + 1] = o * c + e * sn;
    }
}
