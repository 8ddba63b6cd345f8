#version 450
// Causal attention of one query token over the ring's live slots, for the G = NH/NKV query
// heads that share one K/V head. Workgroup (g, t) is one subgroup (WG = subgroup size): K/V
// head g, the pass's token t, which sees slots [0, n0 + t]. Lanes stride over slots and meet
// through subgroup reductions, never a barrier (each costs a coroutine switch per lane on
// lavapipe). Probabilities go to the probability rows, unnormalised, with 1/sum beside them,
// so mass.comp can turn them into salience; outputs go to act[out + t*QD ..].
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

const uint G = NH / NKV;
const uint H4 = HD / 4;

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint g = gl_WorkGroupID.x, t = gl_WorkGroupID.y;
    if (t >= prm.C) return;  // the whole workgroup leaves together
    uint len = prm.n0 + t + 1;
    float scale = query_scale();
    vec4 q[G * H4];  // [G, HD/4] scaled queries (the same in every lane)
    uint qbase = (pc.in_off + t * QD + g * G * HD) / 4;
    [[unroll]] for (uint i = 0; i < G * H4; i++) q[i] = scale * texelFetch(ACTT, int(qbase + i));

    uint row0 = pc.p_row0 + t * NH + g * G;  // probability row of head (g, 0)
    uint kbase = (pc.layer * S * KVD + g * HD) / 4;  // texel of slot 0, head g
    float mx[G];
    [[unroll]] for (uint j = 0; j < G; j++) mx[j] = -1.0 / 0.0;
    for (uint s = lane; s < len; s += WG) {
        float sc[G];
        [[unroll]] for (uint j = 0; j < G; j++) sc[j] = 0.0;
        [[unroll]] for (uint i = 0; i < H4; i++) {
            vec4 k = texelFetch(KT, int(kbase + s * (KVD / 4) + i));
            [[unroll]] for (uint j = 0; j < G; j++) sc[j] += dot(q[j * H4 + i], k);
        }
        [[unroll]] for (uint j = 0; j < G; j++) {
            probs[(row0 + j) * S + s] = sc[j];
            mx[j] = max(mx[j], sc[j]);
        }
    }
    [[unroll]] for (uint j = 0; j < G; j++) mx[j] = subgroupMax(mx[j]);

    // Each lane rereads only the scores it wrote itself: no memory barrier needed.
    float sum[G];
    vec4 o[G * H4];
    [[unroll]] for (uint j = 0; j < G; j++) sum[j] = 0.0;
    [[unroll]] for (uint i = 0; i < G * H4; i++) o[i] = vec4(0.0);
    for (uint s = lane; s < len; s += WG) {
        float p[G];
        [[unroll]] for (uint j = 0; j < G; j++) {
            p[j] = exp(probs[(row0 + j) * S + s] - mx[j]);
            probs[(row0 + j) * S + s] = p[j];
            sum[j] += p[j];
        }
        [[unroll]] for (uint i = 0; i < H4; i++) {
            vec4 v = texelFetch(VT, int(kbase + s * (KVD / 4) + i));
            [[unroll]] for (uint j = 0; j < G; j++) o[j * H4 + i] += p[j] * v;
        }
    }
    [[unroll]] for (uint j = 0; j < G; j++) sum[j] = subgroupAdd(sum[j]);
    [[unroll]] for (uint i = 0; i < G * H4; i++) o[i] = subgroupAdd(o[i]);

    // Lanes share the stores: lane l writes output vec4s l, l + WG, ...
    [[unroll]] for (uint i = 0; i < G * H4; i++) {
        if (i % WG != lane) continue;
        uint j = i / H4;
        vec4 r = o[i] / sum[j];
        uint out_i = pc.out_off + t * QD + g * G * HD + 4 * i;
        act[out_i] = r.x;
        act[out_i + 1] = r.y;
        act[out_i + 2] = r.z;
        act[out_i + 3] = r.w;
    }
    [[unroll]] for (uint j = 0; j < G; j++) {
        if (j % WG == lane) probs[PROWS * S + row0 + j] = 1.0 / sum[j];
    }
}
