#version 450
// A DELTA layer's gated delta rule (Qwen3.5; engine/backends/numpy/delta.py is the reference),
// after shortconv.comp (CONV_SILU) left silu(conv(q | k | v)) in act[in + t*CD], and before
// ssm_out. One workgroup a value head h. Its state S^T (S[:, j] at row j: the arena's
// delta_state [planes, NVH, DK, DK], value index first) stays in registers for the whole pass,
// row j held by LANES adjacent invocations, a quarter (LANES = 4) of the row each. Token by
// token, as numpy:
//   q, k of key head h % NKH L2-normalised (q also times 1/sqrt(DK));
//   S *= exp(a * softplus(alpha + dt)); S += k (sigmoid(beta) (v - k.S)); o = q.S;
//   out = rmsnorm(o) * ssm_norm * silu(z),
// into act[out + t*INNER]. Inputs beside the convolution's: z at act[pc.p_row0 + t*INNER],
// beta | alpha at act[pc.per_t + t*2*NVH]; VEC pc.norm_off holds dt [NVH], a [NVH], then the
// norm's weights [DK].
//
// Why a row is split: with a whole row (DK = 128 floats) per invocation a token cost ~2 us a
// layer on the H100 (38 us for the one token of a decode step) whatever was done to its loads
// or its chains of adds, most likely because the row did not fit the registers beside the
// rest. A quarter row is 32 registers; the row's dots are summed across
// its LANES invocations by two shuffles.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"

layout(constant_id = 44) const uint DK = 16;   // head width (keys and values alike)
layout(constant_id = 45) const uint NKH = 2;   // key heads
layout(constant_id = 46) const uint NVH = 4;   // value heads
layout(std430, binding = 24) buffer DeltaState { float state[]; };

layout(constant_id = 55) const uint LANES = 4;  // invocations a row: 1, 2 or 4
layout(local_size_x_id = 0) in;  // WG == DK * LANES

const uint CD = (2 * NKH + NVH) * DK;  // q | k | v width
const uint INNER = NVH * DK;
const float L2_EPS = 1e-6;
const uint Q = DK / LANES;  // elements of a row one invocation holds: [lane * Q, lane * Q + Q)
// q and k in shared memory, each lane's quarter PAD floats after the last: the LANES
// invocations of a row read elements lane * Q + m at once, in distinct banks so.
const uint PAD = LANES > 1 ? 4 : 0;
const uint QS = LANES * (Q + PAD);
const uint WG_MAX_SUBGROUPS = DK * LANES / 4;  // subgroups have at least 4 invocations

// Per token, by its parity (so that the next token's writes need no barrier after this one's
// reads): q and k, then per subgroup its part of q.q and k.k and of o.o.
shared float qs[2][QS], ks[2][QS];
shared vec2 sums[2][WG_MAX_SUBGROUPS];
shared float osums[2][WG_MAX_SUBGROUPS];

// One token's inputs, loaded a token ahead: their global reads then overlap the token before.
struct TokenIn {
    float q, k, v, beta, alpha, z;
};

TokenIn load_token(uint t, uint i, uint j, uint h, uint kh) {
    uint base = pc.in_off + t * CD, gates = pc.per_t + t * 2 * NVH;
    TokenIn r;
    r.q = i < DK ? act[base + kh * DK + i] : 0.0;
    r.k = i < DK ? act[base + (NKH + kh) * DK + i] : 0.0;
    r.v = act[base + (2 * NKH + h) * DK + j];
    r.beta = act[gates + h];
    r.alpha = act[gates + NVH + h];
    r.z = act[pc.p_row0 + t * INNER + h * DK + j];
    return r;
}

// x summed over the LANES invocations of a row (adjacent lanes), in each of them.
float row_sum(float x) {
    if (LANES >= 2) x += subgroupShuffleXor(x, 1);
    if (LANES >= 4) x += subgroupShuffleXor(x, 2);
    return x;
}

void main() {
    uint lid = gl_LocalInvocationID.x, h = gl_WorkGroupID.x, kh = h % NKH;
    uint j = lid / LANES, lane = lid % LANES;  // row j, its elements lane * Q ..
    uint head = (pc.layer * NVH + h) * DK * DK;  // the head's state, row j at head + j * DK
    uint mine = head + j * DK + lane * Q, at = lane * (Q + PAD);
    // Element i = lid of q and k (invocations lid < DK load them) lands at qs[slot]
    uint slot = (lid / Q) * (Q + PAD) + lid % Q;
    float s[Q];
    [[unroll]] for (uint m = 0; m < Q; m++) s[m] = state[mine + m];
    float dt = vec[pc.norm_off + h], a = vec[pc.norm_off + NVH + h];
    float w = vec[pc.norm_off + 2 * NVH + j], qscale = 1.0 / sqrt(float(DK));
    TokenIn next = load_token(0, lid, j, h, kh);
    for (uint t = 0; t < prm.C; t++) {
        TokenIn cur = next;
        uint p = t % 2;
        if (lid < DK) {
            qs[p][slot] = cur.q;
            ks[p][slot] = cur.k;
        }
        vec2 part = subgroupAdd(vec2(cur.q * cur.q, cur.k * cur.k));  // 0 past DK
        if (subgroupElect()) sums[p][gl_SubgroupID] = part;
        next = load_token(min(t + 1, prm.C - 1), lid, j, h, kh);
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
        // of the sums, each sum in four independent chains.
        vec4 kdot = vec4(0.0);
        [[unroll]] for (uint m = 0; m < Q; m += 4)
            kdot += vec4(s[m], s[m + 1], s[m + 2], s[m + 3])
                  * vec4(ks[p][at + m], ks[p][at + m + 1], ks[p][at + m + 2], ks[p][at + m + 3]);
        float dot_k = row_sum((kdot.x + kdot.y) + (kdot.z + kdot.w));
        float mem = (cur.v - g * kn * dot_k) * b * kn;
        vec4 qdot = vec4(0.0);
        [[unroll]] for (uint m = 0; m < Q; m += 4) {
            vec4 k4 = vec4(ks[p][at + m], ks[p][at + m + 1], ks[p][at + m + 2], ks[p][at + m + 3]);
            vec4 s4 = vec4(s[m], s[m + 1], s[m + 2], s[m + 3]) * g + mem * k4;
            s[m] = s4.x;
            s[m + 1] = s4.y;
            s[m + 2] = s4.z;
            s[m + 3] = s4.w;
            qdot += s4 * vec4(qs[p][at + m], qs[p][at + m + 1], qs[p][at + m + 2], qs[p][at + m + 3]);
        }
        float o = row_sum((qdot.x + qdot.y) + (qdot.z + qdot.w)) * qn;
        float opart = subgroupAdd(lane == 0 ? o * o : 0.0);
        if (subgroupElect()) osums[p][gl_SubgroupID] = opart;
        barrier();
        float ss = 0.0;
        for (uint i = 0; i < gl_NumSubgroups; i++) ss += osums[p][i];
        float inv = 1.0 / sqrt(ss * (1.0 / float(DK)) + EPS);
        if (lane == 0)
            act[pc.out_off + t * INNER + h * DK + j] = o * inv * w * (cur.z / (1.0 + exp(-cur.z)));
    }
    [[unroll]] for (uint m = 0; m < Q; m++) state[mine + m] = s[m];
}
