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
// Workgroup (g, t) is WINDOW_SUBGROUPS subgroups (WG = that many times the subgroup size),
// the G query heads of K/V head g for the pass's token t. Lanes split a head's dimensions
// (few registers, however wide the head; a key's score is one subgroup sum). Subgroup k
// walks candidates k, k + NSUB, ... KB at a time, their keys' and values' loads and the
// sums independent of one another, so up to NSUB * KB keys are in flight: one key after another was a chain of
// dependent memory round trips (1.2 ms a decode step's layer on an H200, for 512 keys). Each
// keeps its softmax online (flash-attention's running maximum); the subgroups then merge
// their maxima, sums and outputs in shared memory.
//
// Decode has one workgroup per K/V head, so a model with one K/V head (Gemma 3 270M) ran its
// window on one SM of 132 (54 us a layer on the H100). With WINDOW_SPLITS > 1 (decode only)
// workgroup (g, p) takes the p-th run of the token's candidates and leaves its maximum, sum
// and unnormalised outputs in split.glsl's regions; the last run of head g to finish (an
// atomic counter) folds them, as attention_split.comp does the ring's runs.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"
#include "split.glsl"

layout(local_size_x_id = 0) in;

layout(constant_id = 53) const uint WINDOW_SUBGROUPS = 1;
layout(constant_id = 54) const uint WINDOW_SPLITS = 1;  // decode's runs of candidates a head

layout(std430, binding = 22) buffer KWin { vec4 kw[]; };  // arena kw_cache, as vec4s
layout(std430, binding = 23) buffer VWin { vec4 vw[]; };  // arena vw_cache, as vec4s

const uint G = NH / NKV;
const uint H4 = HD / 4;
const uint KV4 = KVD / 4;
const uint NSUB = WINDOW_SUBGROUPS;
const uint SGS = WG / NSUB;  // lanes per subgroup
const uint DPL = (H4 + SGS - 1) / SGS;  // a head's vec4s per lane: i = lane + c * SGS
const uint KB = 4;  // candidates a subgroup takes at once

// Globals, not parameters (attention_split.comp: arrays sized by specialization constants
// came back wrong as parameters on lavapipe).
vec4 q[G * DPL];       // [G, DPL] this lane's vec4s of the scaled queries
vec4 o[G * DPL];       // and of the outputs
float sc[KB * G];      // [KB, G] the batch's scores per query head (the same in every lane)
vec4 ks[KB * DPL];     // [KB, DPL] the batch's keys
vec4 vs[KB * DPL];     // and values, loaded together: one memory round trip a batch
float total[G];        // [G] each query head's sum of exp(score - max), the max m_all's

shared float wg_ms[2 * NSUB * G];  // every subgroup's maxima, then sums [2, NSUB, G]
shared vec4 wg_o[G * H4];          // the merged outputs

// exp(m - to), 0 where m is -inf (a subgroup or a run that saw no key: to may be -inf too).
float weight_of(float m, float to) {
    return m == -1.0 / 0.0 ? 0.0 : exp(m - to);
}

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

// ks, vs = the keys and values of candidates s0, s0 + NSUB, ... (KB of them; past n: s0's).
void load(uint lane, uint s0, uint n, uint g) {
    [[unroll]] for (uint b = 0; b < KB; b++) {
        uint s = s0 + b * NSUB < n ? s0 + b * NSUB : s0;
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint i = min(lane + c * SGS, H4 - 1);
            ks[b * DPL + c] = key_or_value(true, s, g, i);
            vs[b * DPL + c] = key_or_value(false, s, g, i);
        }
    }
}

// The merged outputs in wg_o, divided by their heads' sums, into act's attn rows of token t.
void store_output(uint t, uint g) {
    for (uint x = gl_LocalInvocationID.x; x < G * H4; x += WG) {
        uint j = x / H4, i = x % H4;
        vec4 r = wg_o[x] / total[j];
        uint at = pc.out_off + t * QD + (g * G + j) * HD + 4 * i;
        act[at] = r.x;
        act[at + 1] = r.y;
        act[at + 2] = r.z;
        act[at + 3] = r.w;
    }
}

void main() {
    uint lane = gl_SubgroupInvocationID, sub = gl_SubgroupID;
    const bool RUNS = WINDOW_SPLITS > 1;  // decode's one token, its candidates in runs
    uint g = gl_WorkGroupID.x, t = RUNS ? 0 : gl_WorkGroupID.y;
    uint run = RUNS ? gl_WorkGroupID.y : 0;
    if (t >= prm.C) return;  // the whole workgroup leaves together
    float scale = query_scale();
    uint qbase = (pc.in_off + t * QKVD + g * G * HD) / 4;
    [[unroll]] for (uint j = 0; j < G; j++) {
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint i = lane + c * SGS;
            q[j * DPL + c] = i < H4 ? scale * texelFetch(ACTT, int(qbase + j * H4 + i)) : vec4(0.0);
            o[j * DPL + c] = vec4(0.0);
        }
    }
    uint n = WINDOW + t + 1;  // candidates: the plane's rows, then the pass's tokens up to t
    uint span = (n + WINDOW_SPLITS - 1) / WINDOW_SPLITS;
    uint lo = min(n, run * span), hi = min(n, lo + span);  // this workgroup's run: [lo, hi)
    float mx[G], sum[G];
    [[unroll]] for (uint j = 0; j < G; j++) {
        mx[j] = -1.0 / 0.0;
        sum[j] = 0.0;
    }
    // Where a batch raises a head's maximum, the sum and the outputs so far are rescaled to
    // it. visible() is uniform in a subgroup: its sums stay in step.
    for (uint s0 = lo + sub; s0 < hi; s0 += KB * NSUB) {
        bool vis[KB];
        bool any = false;
        [[unroll]] for (uint b = 0; b < KB; b++) {
            uint s = s0 + b * NSUB;
            vis[b] = s < hi && visible(s, t);
            any = any || vis[b];
        }
        if (!any) continue;
        load(lane, s0, hi, g);
        [[unroll]] for (uint b = 0; b < KB; b++) {
            float part[G];
            [[unroll]] for (uint j = 0; j < G; j++) part[j] = 0.0;
            [[unroll]] for (uint c = 0; c < DPL; c++) {
                if (lane + c * SGS >= H4) break;
                [[unroll]] for (uint j = 0; j < G; j++) part[j] += dot(q[j * DPL + c], ks[b * DPL + c]);
            }
            [[unroll]] for (uint j = 0; j < G; j++) sc[b * G + j] = subgroupAdd(part[j]);
        }
        [[unroll]] for (uint j = 0; j < G; j++) {
            float m = mx[j];
            [[unroll]] for (uint b = 0; b < KB; b++) m = vis[b] ? max(m, sc[b * G + j]) : m;
            float rescale = exp(mx[j] - m);  // 0 for the first visible batch (mx -inf)
            sum[j] *= rescale;
            [[unroll]] for (uint c = 0; c < DPL; c++) o[j * DPL + c] *= rescale;
            [[unroll]] for (uint b = 0; b < KB; b++) {
                if (!vis[b]) continue;  // a row not written yet may hold anything
                float p = exp(sc[b * G + j] - m);
                sum[j] += p;
                [[unroll]] for (uint c = 0; c < DPL; c++) o[j * DPL + c] += p * vs[b * DPL + c];
            }
            mx[j] = m;
        }
    }
    // Merge: every subgroup's outputs rescaled to the workgroup's maximum, added in turn.
    // Token t's own key is seen by one of them, so the maximum over the runs is finite and
    // the sum >= 1; a run (or a subgroup) may see none, and weighs 0.
    if (lane == 0) {
        [[unroll]] for (uint j = 0; j < G; j++) {
            wg_ms[sub * G + j] = mx[j];
            wg_ms[(NSUB + sub) * G + j] = sum[j];
        }
    }
    for (uint i = gl_LocalInvocationID.x; i < G * H4; i += WG) wg_o[i] = vec4(0.0);
    barrier();
    float m_all[G];
    [[unroll]] for (uint j = 0; j < G; j++) {
        m_all[j] = -1.0 / 0.0;
        for (uint k = 0; k < NSUB; k++) m_all[j] = max(m_all[j], wg_ms[k * G + j]);
        total[j] = 0.0;
        for (uint k = 0; k < NSUB; k++) {
            total[j] += wg_ms[(NSUB + k) * G + j] * weight_of(wg_ms[k * G + j], m_all[j]);
        }
    }
    for (uint k = 0; k < NSUB; k++) {
        if (sub == k) {
            [[unroll]] for (uint j = 0; j < G; j++) {
                float f = weight_of(mx[j], m_all[j]);  // 0 where this subgroup saw no key
                [[unroll]] for (uint c = 0; c < DPL; c++) {
                    uint i = lane + c * SGS;
                    if (i < H4) wg_o[j * H4 + i] += f * o[j * DPL + c];
                }
            }
        }
        barrier();
    }
    // Decode: the token's own row into plane row wrow. It held the token WINDOW steps older,
    // which no query of this pass sees (age WINDOW - 1): another run may load it, but never
    // weighs it. The first run stores it.
    if (pc.flags == 1u && run == 0) {
        uint at = (pc.layer * WINDOW + prm.wrow) * KV4 + g * H4;
        uint row = (pc.in_off + QD + g * HD) / 4;
        for (uint i = gl_LocalInvocationID.x; i < H4; i += WG) {
            kw[at + i] = texelFetch(ACTT, int(row + i));
            vw[at + i] = texelFetch(ACTT, int(row + KVD / 4 + i));
        }
    }
    if (!RUNS) {
        store_output(t, g);
        return;
    }
    // This run's partials, then the count; the last run folds them all.
    for (uint x = gl_LocalInvocationID.x; x < G * H4; x += WG) {
        uint j = x / H4, i = x % H4;
        vec4 r = wg_o[x];
        uint at = SP_OUT + ((g * G + j) * MAX_SPLITS + run) * HD + 4 * i;
        splits[at] = r.x;
        splits[at + 1] = r.y;
        splits[at + 2] = r.z;
        splits[at + 3] = r.w;
    }
    if (gl_LocalInvocationID.x == 0) {
        [[unroll]] for (uint j = 0; j < G; j++) {
            splits[SP_MAX + (g * G + j) * MAX_SPLITS + run] = m_all[j];
            splits[SP_SUM + (g * G + j) * MAX_SPLITS + run] = total[j];
        }
    }
    if (!last_to_finish(g, WINDOW_SPLITS)) return;
    float m_runs[G];
    [[unroll]] for (uint j = 0; j < G; j++) {
        uint head = (g * G + j) * MAX_SPLITS;
        m_runs[j] = -1.0 / 0.0;
        for (uint k = 0; k < WINDOW_SPLITS; k++) m_runs[j] = max(m_runs[j], splits[SP_MAX + head + k]);
        total[j] = 0.0;
        for (uint k = 0; k < WINDOW_SPLITS; k++) {
            total[j] += splits[SP_SUM + head + k] * weight_of(splits[SP_MAX + head + k], m_runs[j]);
        }
    }
    for (uint x = gl_LocalInvocationID.x; x < G * H4; x += WG) {
        uint j = x / H4, i = x % H4;
        vec4 r = vec4(0.0);
        for (uint k = 0; k < WINDOW_SPLITS; k++) {
            uint head = (g * G + j) * MAX_SPLITS + k, at = SP_OUT + head * HD + 4 * i;
            float f = weight_of(splits[SP_MAX + head], m_runs[j]);
            r += f * vec4(splits[at], splits[at + 1], splits[at + 2], splits[at + 3]);
        }
        wg_o[x] = r;
    }
    barrier();
    store_output(t, g);
}
