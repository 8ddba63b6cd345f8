#version 450
// RMSNorm of act rows, one workgroup per token, in two uses by pc.flags:
// 0: final-normed hidden rows for on_hidden callbacks: hidden[t] = rmsnorm(act[in + t*D ..]);
// 1: a post-norm (Gemma's post_attention_norm, post_ffw_norm) before the residual add:
//    act[out + t*D ..] += rmsnorm(act[in + t*D ..]). The product before it stored its rows
//    (MODE_STORE): the norm spans the whole row, which spans the product's workgroups.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

shared float part[WG];

void main() {
    uint lid = gl_LocalInvocationID.x, t = gl_WorkGroupID.x;
    if (t >= prm.C) return;
    uint base = pc.in_off + t * D;
    float ss = 0.0;
    for (uint i = lid; i < D; i += WG) ss += act[base + i] * act[base + i];
    part[lid] = ss;
    barrier();
    ss = 0.0;
    for (uint i = 0; i < WG; i++) ss += part[i];
    float inv = 1.0 / sqrt(ss / float(D) + EPS);
    if (pc.flags == 1u) {  // as numpy: the normed row (x * inv) * w, then the residual add
        uint out_base = pc.out_off + t * D;
        for (uint i = lid; i < D; i += WG) act[out_base + i] += act[base + i] * inv * vec[pc.norm_off + i];
        return;
    }
    for (uint i = lid; i < D; i += WG) hidden[t * D + i] = act[base + i] * inv * vec[pc.norm_off + i];
}
