#version 450
// y = W x for T tokens at once (T = 1 is decode's matrix-vector product), reading W's GGUF
// blocks straight from texel buffers. A row group of R rows is shared by SPLIT invocations that
// stride over its blocks (SPLIT = 1 on CPUs, where invocations are SIMD lanes; more on GPUs).
// Inputs are read as RGBA32F texels: on lavapipe a shared-memory load costs a scalar load per
// lane, a texel fetch one vector load. Optional RMSNorm of the inputs; epilogue by MODE.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"
#include "matmul_common.glsl"

layout(local_size_x_id = 0) in;

const uint NB = K / 32;                        // blocks per weight row
const uint KV4 = K / 4;                        // texels per input row
const uint GROUPS = WG / SPLIT;                // row groups per workgroup
const uint NR = MODE == MODE_GATEUP ? 2 * R : R;  // weight rows per row group
const bool OFFSET = QTYPE == QT_Q4_1 || QTYPE == QT_Q4_0;  // blocks carry an additive m

shared float red[SPLIT > 1 ? WG * NR * T : 1];  // [WG, NR, T] partial dots when SPLIT > 1
shared float ssq[SPLIT > 1 && NORM != 0 ? WG * T : 1];  // [T, subgroups] sums of squares

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint C = prm.C;
    uint tok0 = gl_WorkGroupID.y * T;
    if (MODE == MODE_LOGITS) tok0 = C - 1;  // logits read only the chunk's last row
    if (tok0 >= C) return;  // the whole workgroup leaves together

    // Input rows (texel offsets); tokens past the chunk re-read a valid row, never stored.
    uint xrow[T];
    float inv[T];  // RMSNorm scale per token (1 without NORM)
    [[unroll]] for (uint t = 0; t < T; t++) {
        xrow[t] = (pc.in_off + min(tok0 + t, C - 1) * K) / 4;
        inv[t] = 1.0;
        if (NORM != 0 && SPLIT == 1) {
            // CPU: every invocation sums the row itself (lanes of one SIMD thread): no
            // shared memory, no barrier.
            vec4 ss = vec4(0.0);
            for (uint i = 0; i < KV4; i++) {
                vec4 x = texelFetch(ACTT, int(xrow[t] + i));
                ss += x * x;
            }
            inv[t] = 1.0 / sqrt((ss.x + ss.y + ss.z + ss.w) / float(K) + EPS);
        }
    }
    if (NORM != 0 && SPLIT > 1) {
        // GPU: the workgroup shares the sum of squares, one barrier. Each invocation summing
        // the whole row cost the logits product (3072 workgroups) 90 us on an H200.
        [[unroll]] for (uint t = 0; t < T; t++) {
            vec4 ss = vec4(0.0);
            for (uint i = lid; i < KV4; i += WG) {
                vec4 x = texelFetch(ACTT, int(xrow[t] + i));
                ss += x * x;
            }
            float part = subgroupAdd(ss.x + ss.y + ss.z + ss.w);
            if (subgroupElect()) ssq[t * WG + gl_SubgroupID] = part;
        }
        barrier();
        [[unroll]] for (uint t = 0; t < T; t++) {
            float total = 0.0;
            for (uint k = 0; k < gl_NumSubgroups; k++) total += ssq[t * WG + k];
            inv[t] = 1.0 / sqrt(total / float(K) + EPS);
        }
    }

    uint g = lid / SPLIT, lane = lid % SPLIT;
    uint row0 = (gl_WorkGroupID.x * GROUPS + g) * R;
    float acc[NR * T];
    [[unroll]] for (uint i = 0; i < NR * T; i++) acc[i] = 0.0;
    for (uint b = lane; b < NB; b += SPLIT) {
        vec4 nw[8];  // norm weights of this block
        if (NORM != 0) {
            [[unroll]] for (uint j = 0; j < 8; j++) nw[j] = texelFetch(VECT, int(pc.norm_off / 4 + b * 8 + j));
        }
        vec4 x[T * 8];
        float xs[T];  // block sums of the inputs, for the m offset
        [[unroll]] for (uint t = 0; t < T; t++) {
            vec4 s4 = vec4(0.0);
            [[unroll]] for (uint j = 0; j < 8; j++) {
                vec4 v = texelFetch(ACTT, int(xrow[t] + b * 8 + j));
                if (NORM != 0) v *= inv[t] * nw[j];
                x[t * 8 + j] = v;
                s4 += v;
            }
            xs[t] = s4.x + s4.y + s4.z + s4.w;
        }
        [[unroll]] for (uint r = 0; r < NR; r++) {
            uint wr = r < R ? row0 + r : M + row0 + r - R;  // gate|up: up rows follow gate's
            wr = min(wr, MROWS - 1);  // rows past M compute garbage that is never stored
            vec4 w[8];
            float d, m;
            load_block(pc.w_texel + (wr * NB + b) * TPB, pc.w_block + wr * NB + b, w, d, m);
            [[unroll]] for (uint t = 0; t < T; t++) {
                vec4 s4 = w[0] * x[t * 8] + w[1] * x[t * 8 + 1] + w[2] * x[t * 8 + 2]
                        + w[3] * x[t * 8 + 3] + w[4] * x[t * 8 + 4] + w[5] * x[t * 8 + 5]
                        + w[6] * x[t * 8 + 6] + w[7] * x[t * 8 + 7];
                acc[r * T + t] += d * (s4.x + s4.y + s4.z + s4.w) + (OFFSET ? m * xs[t] : 0.0);
            }
        }
    }
    if (SPLIT > 1) {
        [[unroll]] for (uint i = 0; i < NR * T; i++) red[lid * NR * T + i] = acc[i];
        barrier();
        if (lane != 0) return;
        for (uint l = 1; l < SPLIT; l++) {
            [[unroll]] for (uint i = 0; i < NR * T; i++) acc[i] += red[(lid + l) * NR * T + i];
        }
    }

    // Epilogue.
    for (uint t = 0; t < T; t++) {
        uint tok = tok0 + t;
        if (tok >= C) break;
        if (MODE == MODE_QKV) {
            [[unroll]] for (uint r = 0; r < R; r += 2) {
                uint row = row0 + r;
                if (row >= M) break;
                store_qkv_pair(tok, row, acc[r * T + t], acc[(r + 1) * T + t]);
            }
        } else {
            [[unroll]] for (uint r = 0; r < R; r++) {
                uint row = row0 + r;
                if (row >= M) break;
                store_value(tok, row, acc[r * T + t],
                            MODE == MODE_GATEUP ? acc[(R + r) * T + t] : 0.0);
            }
        }
    }
}
