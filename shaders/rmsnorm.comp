#version 450
// Final-normed hidden rows for on_hidden callbacks: hidden[t] = rmsnorm(act[in + t*D ..]).
// One workgroup per token.
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
    for (uint i = lid; i < D; i += WG) hidden[t * D + i] = act[base + i] * inv * vec[pc.norm_off + i];
}
