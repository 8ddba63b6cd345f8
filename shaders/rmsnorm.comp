#version 450
// RMSNorm of act rows, one workgroup per token, in two uses by pc.flags:
// 0: final-normed hidden rows for on_hidden callbacks: hidden[t] = rmsnorm(act[in + t*D ..]);
// 1: a post-norm (Gemma's post_attention_norm, post_ffw_norm) before the residual add:
//    act[out + t*D ..] += rmsnorm(act[in + t*D ..]). The product before it stored its rows
//    (MODE_STORE): the norm spans the whole row, which spans the product's workgroups.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

shared float part[WG];  // per subgroup: its part of the sum of squares

void main() {
    uint lid = gl_LocalInvocationID.x, t = gl_WorkGroupID.x;
    if (t >= prm.C) return;
    uint base = pc.in_off + t * D;
    float ss = 0.0;
    for (uint i = lid; i < D; i += WG) ss += act[base + i] * act[base + i];
    // Summed by subgroups, then across the few subgroups: a sum over WG in each invocation
    // was a chain of WG dependent shared-memory reads, in a pass Gemma runs 36 times a step.
    ss = subgroupAdd(ss);
    if (subgroupElect()) part[gl_SubgroupID] = ss;
    barrier();
    ss = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; i++) ss += part[i];
    float inv = 1.0 / sqrt(ss / float(D) + EPS);
    if (pc.flags == 1u) {  // as numpy: the normed row (x * inv) * w, then the residual add
        uint out_base = pc.out_off + t * D;
        for (uint i = lid; i < D; i += WG) act[out_base + i] += act[base + i] * inv * vec[pc.norm_off + i];
        return;
    }
    for (uint i = lid; i < D; i += WG) hidden[t * D + i] = act[base + i] * inv * vec[pc.norm_off + i];
}
