#version 450
// A DELTA layer's gated delta rule (Qwen3.5; engine/backends/numpy/delta.py is the reference),
// after shortconv.comp (CONV_SILU) left silu(conv(q | k | v)) in act[in + t*CD], and before
// ssm_out. One workgroup a value head h, DK invocations: invocation j keeps row j of the
// head's state S^T (S[:, j], the arena's delta_state [planes, NVH, DK, DK], value index first)
// in registers for the whole pass. Token by token, as numpy:
//   q, k of key head h % NKH L2-normalised (q also times 1/sqrt(DK));
//   S *= exp(a * softplus(alpha + dt)); S += k (sigmoid(beta) (v - k.S)); o = q.S;
//   out = rmsnorm(o) * ssm_norm * silu(z),
// into act[out + t*INNER]. Inputs beside the convolution's: z at act[pc.p_row0 + t*INNER],
// beta | alpha at act[pc.per_t + t*2*NVH]; VEC pc.norm_off holds dt [NVH], a [NVH], then the
// norm's weights [DK].
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"

layout(constant_id = 44) const uint DK = 16;   // head width (keys and values alike)
layout(constant_id = 45) const uint NKH = 2;   // key heads
layout(constant_id = 46) const uint NVH = 4;   // value heads
layout(std430, binding = 24) buffer DeltaState { float state[]; };

layout(local_size_x_id = 0) in;  // WG == DK

const uint CD = (2 * NKH + NVH) * DK;  // q | k | v width
const uint INNER = NVH * DK;
const float L2_EPS = 1e-6;

// The state moves between the arena and registers through this tile, a quarter of the head's
// rows at a time: invocation j's row is DK contiguous floats, so reading it straight into
// registers has a subgroup's lanes touch DK/4 cache sectors per load, DK times over (the
// decode of a Qwen3.5 layer, one token, took 38 us on the H100: ~2 us a token in prefill).
// Through the tile every load and store is whole consecutive words across the lanes.
const uint PARTS = 4;
const uint CH = (DK + PARTS - 1) / PARTS;  // rows staged at once
const uint LDT = DK + 1;  // the tile's row stride: a column's reads fall in distinct banks
shared float tile[CH * LDT];

// Per token, by its parity (so the next token's writes need no barrier after this one's
// reads): q and k as vec4s (each invocation reads all DK of them, four a load), then per
// subgroup its part of q.q and k.k and of o.o (sums by subgroup, then across the few
// subgroups here: a sum over DK in one invocation was a chain of DK shared-memory reads).
shared vec4 qs[2][DK / 4], ks[2][DK / 4];
shared vec2 sums[2][DK];
shared float osums[2][DK];

// One token's inputs, loaded a token ahead: their global reads then overlap the token before.
struct TokenIn {
    float q, k, v, beta, alpha, z;
};

TokenIn load_token(uint t, uint j, uint h, uint kh) {
    uint base = pc.in_off + t * CD, gates = pc.per_t + t * 2 * NVH;
    TokenIn r;
    r.q = act[base + kh * DK + j];
    r.k = act[base + (NKH + kh) * DK + j];
    r.v = act[base + (2 * NKH + h) * DK + j];
    r.beta = act[gates + h];
    r.alpha = act[gates + NVH + h];
    r.z = act[pc.p_row0 + t * INNER + h * DK + j];
    return r;
}

void main() {
    uint j = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, kh = h % NKH;
    uint head = (pc.layer * NVH + h) * DK * DK;  // the head's state, row j at head + j * DK
    float s[DK];
    for (uint c = 0; c < PARTS; c++) {  // rows c * CH ..: loaded across the lanes, then taken
        for (uint m = 0; m < CH && c * CH + m < DK; m++)
            tile[m * LDT + j] = state[head + (c * CH + m) * DK + j];
        barrier();
        if (j / CH == c) {
            [[unroll]] for (uint i = 0; i < DK; i++) s[i] = tile[(j % CH) * LDT + i];
        }
        barrier();
    }
    float dt = vec[pc.norm_off + h], a = vec[pc.norm_off + NVH + h];
    float w = vec[pc.norm_off + 2 * NVH + j], qscale = 1.0 / sqrt(float(DK));
    TokenIn next = load_token(0, j, h, kh);
    for (uint t = 0; t < prm.C; t++) {
        TokenIn cur = next;
        uint p = t % 2;
        qs[p][j / 4][j % 4] = cur.q;
        ks[p][j / 4][j % 4] = cur.k;
        vec2 part = subgroupAdd(vec2(cur.q * cur.q, cur.k * cur.k));
        if (subgroupElect()) sums[p][gl_SubgroupID] = part;
        next = load_token(min(t + 1, prm.C - 1), j, h, kh);
        barrier();
        float qq = 0.0, kk = 0.0;
        for (uint i = 0; i < gl_NumSubgroups; i++) {
            qq += sums[p][i].x;
            kk += sums[p][i].y;
        }
        float qn = 1.0 / sqrt(qq + L2_EPS) * qscale, kn = 1.0 / sqrt(kk + L2_EPS);
        float x = cur.alpha + dt;
        float softplus = max(x, 0.0) + log(1.0 + exp(-abs(x)));
        float g = exp(softplus * a);
        float b = 1.0 / (1.0 + exp(-cur.beta));
        // numpy's S *= g; u = b (v - k.S); S += k u; o = q.S, with g and the norms taken out
        // of the sums, and each sum over DK in four independent chains (one chain of DK
        // dependent adds was most of a token's latency).
        vec4 kdot = vec4(0.0);
        [[unroll]] for (uint i = 0; i < DK / 4; i++)
            kdot += vec4(s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]) * ks[p][i];
        float mem = (cur.v - g * kn * (kdot.x + kdot.y + kdot.z + kdot.w)) * b * kn;
        vec4 qdot = vec4(0.0);
        [[unroll]] for (uint i = 0; i < DK / 4; i++) {
            vec4 k4 = ks[p][i];
            s[4 * i] = s[4 * i] * g + mem * k4.x;
            s[4 * i + 1] = s[4 * i + 1] * g + mem * k4.y;
            s[4 * i + 2] = s[4 * i + 2] * g + mem * k4.z;
            s[4 * i + 3] = s[4 * i + 3] * g + mem * k4.w;
            qdot += vec4(s[4 * i], s[4 * i + 1], s[4 * i + 2], s[4 * i + 3]) * qs[p][i];
        }
        float o = (qdot.x + qdot.y + qdot.z + qdot.w) * qn;
        float opart = subgroupAdd(o * o);
        if (subgroupElect()) osums[p][gl_SubgroupID] = opart;
        barrier();
        float ss = 0.0;
        for (uint i = 0; i < gl_NumSubgroups; i++) ss += osums[p][i];
        float inv = 1.0 / sqrt(ss * (1.0 / float(DK)) + EPS);
        act[pc.out_off + t * INNER + h * DK + j] = o * inv * w * (cur.z / (1.0 + exp(-cur.z)));
    }
    for (uint c = 0; c < PARTS; c++) {  // and back the same way
        if (j / CH == c) {
            [[unroll]] for (uint i = 0; i < DK; i++) tile[(j % CH) * LDT + i] = s[i];
        }
        barrier();
        for (uint m = 0; m < CH && c * CH + m < DK; m++)
            state[head + (c * CH + m) * DK + j] = tile[m * LDT + j];
        barrier();
    }
}
