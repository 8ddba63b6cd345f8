#version 450
// A prefill pass's WINDOW-layer rows into the layer's circular planes (kw_cache, vw_cache:
// [n_window, WINDOW, KVD], plane pc.layer), after window_attention.comp has read the rows
// they overwrite: token t of the pass (stamped clock + 1 + t) goes to row (wrow + t) % WINDOW.
// Only the newest WINDOW tokens are kept, so that no row is written twice in one dispatch.
// One invocation per (token, element of k|v); the pass's k|v are in act beside q (QKVD rows).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(std430, binding = 22) buffer KWin { float kw[]; };  // arena kw_cache
layout(std430, binding = 23) buffer VWin { float vw[]; };  // arena vw_cache

void main() {
    uint id = gl_GlobalInvocationID.x, t = id / (2 * KVD), e = id % (2 * KVD);
    if (t >= prm.C || t + WINDOW < prm.C) return;
    uint at = (pc.layer * WINDOW + (prm.wrow + t) % WINDOW) * KVD;
    float x = act[pc.in_off + t * QKVD + QD + e];
    if (e < KVD) {
        kw[at + e] = x;
    } else {
        vw[at + e - KVD] = x;
    }
}
