#version 450
// A WINDOW layer's attention (Gemma 3's sliding-window layers; engine/backends/numpy/window.py
// has the rules). The layer's keys and values sit in the arena's circular planes (kw_cache,
// vw_cache: [n_window, WINDOW, KVD], plane pc.layer), the token the ring's clock stamped c in
// row (c - 1) % WINDOW, and add nothing to the ring's attention mass. The pass's own q|k|v
// rows are in act (QKVD wide, from pc.in_off): its queries must see the window as it was
// before the pass overwrites it, so each attends over the plane's old rows, masked by their
// age, and over the pass's own keys, causal and windowed; window_store.comp then writes the
// new rows (decode, pc.flags 1: this dispatch writes its one token's row itself).
//
// Workgroup (g, t) is one subgroup (WG = subgroup size): the G query heads of K/V head g for
// the pass's token t. Lanes split a head's dimensions (few registers, however wide the head;
// a key's score is one subgroup sum), walking the candidate keys in order, once: the softmax
// is kept online (flash-attention's running maximum), each key's key and value read once.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

layout(std430, binding = 22) buffer KWin { vec4 kw[]; };  // arena kw_cache, as vec4s
layout(std430, binding = 23) buffer VWin { vec4 vw[]; };  // arena vw_cache, as vec4s

const uint G = NH / NKV;
const uint H4 = HD / 4;
const uint KV4 = KVD / 4;
const uint DPL = (H4 + WG - 1) / WG;  // a head's vec4s per lane: i = lane + c * WG

// Globals, not parameters (attention_split.comp: arrays sized by specialization constants
// came back wrong as parameters on lavapipe).
vec4 q[G * DPL];  // [G, DPL] this lane's vec4s of the scaled queries
vec4 o[G * DPL];  // and of the outputs
float sc[G];      // the current key's score per query head

// Whether token t sees candidate s: the plane's row s (s < WINDOW), whose token is `age`
// tokens older than the pass's first token's predecessor and was written if age < wfill;
// or the pass's token s - WINDOW <= t. A query sees the WINDOW newest tokens, itself included.
bool visible(uint s, uint t) {
    if (s < WINDOW) {
        uint age = (prm.wrow + WINDOW - 1 - s) % WINDOW;
        return age < prm.wfill && t + 1 + age < WINDOW;
    }
    return t - (s - WINDOW) < WINDOW;
}

// vec4 i of candidate s's key (or value) of K/V head g.
vec4 key_or_value(bool key, uint s, uint g, uint i) {
    if (s < WINDOW) {
        uint at = (pc.layer * WINDOW + s) * KV4 + g * H4 + i;
        return key ? kw[at] : vw[at];
    }
    uint row = pc.in_off + (s - WINDOW) * QKVD + QD + (key ? 0 : KVD) + g * HD;
    return texelFetch(ACTT, int(row / 4 + i));
}

// sc = every query head's score against candidate s (the same in every lane).
void scores(uint lane, uint s, uint g) {
    float part[G];
    [[unroll]] for (uint j = 0; j < G; j++) part[j] = 0.0;
    [[unroll]] for (uint c = 0; c < DPL; c++) {
        uint i = lane + c * WG;
        if (i >= H4) break;
        vec4 k = key_or_value(true, s, g, i);
        [[unroll]] for (uint j = 0; j < G; j++) part[j] += dot(q[j * DPL + c], k);
    }
    [[unroll]] for (uint j = 0; j < G; j++) sc[j] = subgroupAdd(part[j]);
}

void main() {
    uint lane = gl_LocalInvocationID.x, g = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
    if (t >= prm.C) return;  // the whole workgroup leaves together
    float scale = query_scale();
    uint qbase = (pc.in_off + t * QKVD + g * G * HD) / 4;
    [[unroll]] for (uint j = 0; j < G; j++) {
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint i = lane + c * WG;
            q[j * DPL + c] = i < H4 ? scale * texelFetch(ACTT, int(qbase + j * H4 + i)) : vec4(0.0);
            o[j * DPL + c] = vec4(0.0);
        }
    }
    uint n = WINDOW + t + 1;  // candidates: the plane's rows, then the pass's tokens up to t
    float mx[G], sum[G];
    [[unroll]] for (uint j = 0; j < G; j++) {
        mx[j] = -1.0 / 0.0;
        sum[j] = 0.0;
    }
    // One pass, the softmax online: where a key raises a head's maximum, the sum and the
    // outputs so far are rescaled to it (the first key's factor is exp(-inf) = 0). Token t's
    // own key is always seen, so every sum is at least 1.
    for (uint s = 0; s < n; s++) {  // visible() is uniform: the subgroup sums stay in step
        if (!visible(s, t)) continue;
        scores(lane, s, g);
        float p[G], rescale[G];
        [[unroll]] for (uint j = 0; j < G; j++) {
            float m = max(mx[j], sc[j]);
            rescale[j] = exp(mx[j] - m);
            p[j] = exp(sc[j] - m);
            sum[j] = sum[j] * rescale[j] + p[j];
            mx[j] = m;
        }
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint i = lane + c * WG;
            if (i >= H4) break;
            vec4 v = key_or_value(false, s, g, i);
            [[unroll]] for (uint j = 0; j < G; j++) o[j * DPL + c] = o[j * DPL + c] * rescale[j] + p[j] * v;
        }
    }
    [[unroll]] for (uint j = 0; j < G; j++) {
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint i = lane + c * WG;
            if (i >= H4) break;
            vec4 r = o[j * DPL + c] / sum[j];
            uint at = pc.out_off + t * QD + (g * G + j) * HD + 4 * i;
            act[at] = r.x;
            act[at + 1] = r.y;
            act[at + 2] = r.z;
            act[at + 3] = r.w;
        }
    }
    // Decode: the token's own row into plane row wrow. It held the token WINDOW steps older,
    // which no query of this pass sees (age WINDOW - 1), and only this workgroup reads head g.
    if (pc.flags == 1u) {
        uint at = (pc.layer * WINDOW + prm.wrow) * KV4 + g * H4;
        uint row = (pc.in_off + QD + g * HD) / 4;
        for (uint i = lane; i < H4; i += WG) {
            kw[at + i] = texelFetch(ACTT, int(row + i));
            vw[at + i] = texelFetch(ACTT, int(row + KVD / 4 + i));
        }
    }
}
