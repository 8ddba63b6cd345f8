#version 450
// Rebase: rotate the cached keys of slots [0, count) by each slot's own angle, every layer.
// The ring computes the per-slot cos/sin (float64 angles, rounded once) into the arena's
// rebase_cos/rebase_sin [S, HALF], exactly as its numpy rebase does; RoPE composes, so rotating
// a key at position p by (p' - p) gives the key at p'. Invocation per (slot, pair). The bound
// K planes are pc.flags layers (all of them, or one group where they exceed one binding).
// Pairs as the keys were rotated (matmul_common.glsl): adjacent dims, or with ROPE_SPLIT
// dims (j, j + RH) of a head (partial rotary: only the first RH pairs turn).
// WINDOW (Gemma 3): the window planes (binding 22, pc.flags of them, WINDOW rows each) turn
// instead, every row by the tables' row 0: a window keeps its tokens' distances.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(std430, binding = 22) buffer KWin { float kw[]; };  // arena kw_cache [planes, WINDOW, KVD]

layout(local_size_x_id = 0) in;

const uint ROWS = WINDOW != 0 ? WINDOW : S;  // rows of a plane

void main() {
    uint id = gl_GlobalInvocationID.x;
    uint s = id / (KVD / 2), p = id % (KVD / 2);
    if (s >= pc.count) return;
    uint j = p % HALF;
    if (j >= RH) return;  // a dim partial rotary leaves alone
    uint angle = WINDOW != 0 ? 0 : s;
    float c = rot_cos[angle * HALF + j], sn = rot_sin[angle * HALF + j];
    for (uint l = 0; l < pc.flags; l++) {
        uint k = (l * ROWS + s) * KVD + (ROPE_SPLIT != 0 ? (p / HALF) * HD + j : 2 * p);
        uint ko = k + (ROPE_SPLIT != 0 ? RH : 1);
        if (WINDOW != 0) {
            float e = kw[k], o = kw[ko];
            kw[k] = e * c - o * sn;
            kw[ko] = o * c + e * sn;
        } else {
            float e = kc[k], o = kc[ko];
            kc[k] = e * c - o * sn;
            kc[ko] = o * c + e * sn;
        }
    }
}
