#version 450
// QK-norm (qwen3): RMSNorm of every q and k head with the layer's attn_q_norm / attn_k_norm
// weights, then RoPE, in place. The q|k|v product with QK_NORM stored q (act) and k (the K
// plane) unrotated, in their own dims: RoPE follows the norm, and a head spans workgroups of
// the product. One workgroup per (head of q then k, token); only QK-norm models dispatch it.
// VEC pc.norm_off holds the q weights (HD), then the k weights (HD). A WINDOW layer's k is
// in act beside its q (rows of QKVD: matmul_common.glsl), not in the ring's K plane.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

shared float part[WG];  // per subgroup: its part of the sum of squares

void main() {
    uint lid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, tok = gl_WorkGroupID.y;
    if (tok >= prm.C) return;  // the whole workgroup leaves together
    uint slot = prm.n0 + tok;
    bool is_q = h < NH, in_act = is_q || WINDOW != 0;  // else: the K plane
    uint base = pc.in_off + tok * (WINDOW != 0 ? QKVD : QD) + h * HD;  // q, or WINDOW's k
    uint kbase = in_act ? 0 : (pc.layer * S + slot) * KVD + (h - NH) * HD;
    uint wn = pc.norm_off + (is_q ? 0 : HD);
    float ss = 0.0;
    for (uint i = lid; i < HD; i += WG) {
        float x = in_act ? act[base + i] : kc[kbase + i];
        ss += x * x;
    }
    ss = subgroupAdd(ss);  // then across the subgroups, as rmsnorm.comp
    if (subgroupElect()) part[gl_SubgroupID] = ss;
    barrier();
    ss = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; i++) ss += part[i];
    float inv = 1.0 / sqrt(ss / float(HD) + EPS);
    // Pair j: dims (j, j + RH) split-half, else (2j, 2j + 1); frequency j either way.
    for (uint j = lid; j < RH; j += WG) {
        uint de = ROPE_SPLIT != 0 ? j : 2 * j, dof = ROPE_SPLIT != 0 ? j + RH : 2 * j + 1;
        float e = (in_act ? act[base + de] : kc[kbase + de]) * inv * vec[wn + de];
        float o = (in_act ? act[base + dof] : kc[kbase + dof]) * inv * vec[wn + dof];
        float c = rope_cos(tok, j), s = rope_sin(tok, j);
        float ne = e * c - o * s;
        o = o * c + e * s;
        if (in_act) {
            act[base + de] = ne;
            act[base + dof] = o;
        } else {
            kc[kbase + de] = ne;
            kc[kbase + dof] = o;
        }
    }
    // Partial rotary: the dims past the rotated ones are only normed.
    for (uint i = 2 * RH + lid; i < HD; i += WG) {
        if (in_act) {
            act[base + i] = act[base + i] * inv * vec[wn + i];
        } else {
            kc[kbase + i] = kc[kbase + i] * inv * vec[wn + i];
        }
    }
}
