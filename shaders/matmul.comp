#version 450
// y = W x for T tokens at once (T = 1 is decode's matrix-vector product), reading W's GGUF
// blocks straight from texel buffers (or the same chunks as storage buffers, W_SSBO). A row group
// of R rows is shared by SPLIT invocations that stride over its blocks (SPLIT = 1 on CPUs, where
// invocations are SIMD lanes; more on GPUs). Inputs are read as RGBA32F texels (or vec4s of
// storage, INPUT_SSBO): on lavapipe a shared-memory load costs a scalar load per lane, a texel
// fetch one vector load. Optional RMSNorm of the inputs; epilogue by MODE.
//
// MODE_POSTNORM (decode, Gemma's post-norms): the product's rows go to splits[SP_POST ..]
// and the last workgroup to finish adds their RMSNorm, times the VEC weights at pc.norm_off,
// into the residual row act[pc.out_off ..], as rmsnorm.comp (flags 1) would in a dispatch of
// its own. That dispatch and its barrier were a quarter of a Gemma 3 decode step's (36 of
// 147), each a few microseconds of latency around a 640-float row.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "matmul_common.glsl"
#include "split.glsl"

layout(local_size_x_id = 0) in;

// 1: the inputs and the norm weights are read as vec4s of storage-buffer views of act and vec
// (bindings 3 and 2 again), through the load/store path rather than the texture units (GPU
// tuning's `ssbo_inputs`); 0: as RGBA32F texels, which lavapipe loads as one vector each.
layout(constant_id = 56) const uint INPUT_SSBO = 0;
layout(std430, binding = 3) readonly buffer Act4 { vec4 act4[]; };
layout(std430, binding = 2) readonly buffer Vec4 { vec4 vec4s[]; };

vec4 input4(uint texel) { return INPUT_SSBO != 0 ? act4[texel] : texelFetch(ACTT, int(texel)); }
vec4 norm4(uint texel) { return INPUT_SSBO != 0 ? vec4s[texel] : texelFetch(VECT, int(texel)); }

const uint NB = K / 32;                        // blocks per weight row
const uint BPL = (NB + SPLIT - 1) / SPLIT;     // blocks per invocation (the most)
const uint GROUPS = WG / SPLIT;                // row groups per workgroup
const uint NR = MODE == MODE_GATEUP ? 2 * R : R;  // weight rows per row group
// Blocks carry an additive m (K6, Q6_K's, has none).
const bool OFFSET = QTYPE == QT_Q4_1 || QTYPE == QT_Q4_0 || QTYPE == QT_Q8M
                 || (SBW != 0 && QTYPE != QT_K6);

const uint RED = NR * T + T;  // floats per invocation in `red`: partial dots, sums of squares
shared float red[SPLIT > 1 ? WG * RED : 1];  // [WG, RED] partials, where shuffles cannot sum them
shared float post_part[MODE == MODE_POSTNORM ? WG : 1];  // per subgroup: y's sum of squares

// The product's running state per invocation. Globals, not parameters: passed to a function,
// arrays sized by specialization constants came back wrong (lavapipe, glslc).
uint xrow[T];     // input row of each token (texel offset)
float acc[NR * T];  // [NR, T] partial dots
float ss[T];      // sums of squares of the inputs this invocation read, per token

// Adds block b of the row group's rows (starting at row0) to acc and ss, times `valid` (0 for
// the clamped blocks past the row that an unrolled loop reads, so their loads need no branch).
void add_block(uint b, uint row0, float valid) {
    vec4 nw[8];  // norm weights of this block
    if (NORM != 0) {
        [[unroll]] for (uint j = 0; j < 8; j++) nw[j] = norm4(pc.norm_off / 4 + b * 8 + j);
    }
    vec4 x[T * 8];
    float xs[T];  // block sums of the inputs, for the m offset
    [[unroll]] for (uint t = 0; t < T; t++) {
        vec4 s4 = vec4(0.0), q4 = vec4(0.0);
        [[unroll]] for (uint j = 0; j < 8; j++) {
            vec4 v = input4(xrow[t] + b * 8 + j);
            q4 += v * v;
            if (NORM != 0) v *= nw[j];
            x[t * 8 + j] = v;
            s4 += v;
        }
        xs[t] = s4.x + s4.y + s4.z + s4.w;
        ss[t] += valid * (q4.x + q4.y + q4.z + q4.w);
    }
    [[unroll]] for (uint r = 0; r < NR; r++) {
        uint wr = r < R ? row0 + r : M + row0 + r - R;  // gate|up: up rows follow gate's
        wr = min(wr, MROWS - 1);  // rows past M compute garbage that is never stored
        vec4 w[8];
        float d, m;
        load_block(wr * NB + b, w, d, m);
        [[unroll]] for (uint t = 0; t < T; t++) {
            vec4 s4 = w[0] * x[t * 8] + w[1] * x[t * 8 + 1] + w[2] * x[t * 8 + 2]
                    + w[3] * x[t * 8 + 3] + w[4] * x[t * 8 + 4] + w[5] * x[t * 8 + 5]
                    + w[6] * x[t * 8 + 6] + w[7] * x[t * 8 + 7];
            acc[r * T + t] += valid * (d * (s4.x + s4.y + s4.z + s4.w) + (OFFSET ? m * xs[t] : 0.0));
        }
    }
}

// The input norm's scale, then the stores by MODE: a row group's lane 0, its rows.
void epilogue(uint tok0, uint row0) {
    uint C = prm.C;
    // RMSNorm folded into the product: y = inv * W (nw * x) with inv = 1 / rms(x), and the SPLIT
    // lanes of a row group cover every block of the row between them, so the sums of squares
    // come from the same loads as the dots and inv scales the sums at the end: no pass over
    // the row before the product, no barrier (on an H200 the prologue and its barrier were
    // a dependent round trip in every q|k|v, gate|up and logits dispatch).
    if (NORM != 0) {
        [[unroll]] for (uint t = 0; t < T; t++) {
            float inv = 1.0 / sqrt(ss[t] / float(K) + EPS);
            [[unroll]] for (uint r = 0; r < NR; r++) acc[r * T + t] *= inv;
        }
    }

    for (uint t = 0; t < T; t++) {
        uint tok = tok0 + t;
        if (tok >= C) break;
        if (MODE == MODE_QKV) {
            [[unroll]] for (uint r = 0; r < R; r += 2) {
                uint row = row0 + r;
                if (row >= M) break;
                store_qkv_pair(tok, row, acc[r * T + t], acc[(r + 1) * T + t]);
            }
        } else if (MODE == MODE_POSTNORM) {
            [[unroll]] for (uint r = 0; r < R; r++) {
                if (row0 + r < M) splits[SP_POST + row0 + r] = acc[r];
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

// MODE_POSTNORM's fold, after every workgroup stored its rows to SP_POST (one token: T = 1).
void post_norm(uint lid) {
    if (!last_to_finish(0, gl_NumWorkGroups.x)) return;
    float sq = 0.0;
    for (uint i = lid; i < M; i += WG) sq += splits[SP_POST + i] * splits[SP_POST + i];
    sq = subgroupAdd(sq);
    if (subgroupElect()) post_part[gl_SubgroupID] = sq;
    barrier();
    sq = 0.0;
    for (uint i = 0; i < gl_NumSubgroups; i++) sq += post_part[i];
    float inv = 1.0 / sqrt(sq / float(M) + EPS);
    // As numpy and rmsnorm.comp: the normed row (y * inv) * w, then the residual add.
    for (uint i = lid; i < M; i += WG)
        act[pc.out_off + i] += splits[SP_POST + i] * inv * vec[pc.norm_off + i];
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint C = prm.C;
    uint tok0 = gl_WorkGroupID.y * T;
    if (MODE == MODE_LOGITS) tok0 = C - 1;  // logits read only the chunk's last row
    if (tok0 >= C) return;  // the whole workgroup leaves together

    // Input rows (texel offsets); tokens past the chunk re-read a valid row, never stored.
    [[unroll]] for (uint t = 0; t < T; t++) xrow[t] = (pc.in_off + min(tok0 + t, C - 1) * K) / 4;

    // Where every subgroup is full and holds whole row groups (NVIDIA: 32 lanes, SPLIT 32), a
    // row group is SPLIT lanes of one subgroup and sums by shuffles; elsewhere (lavapipe's 8
    // lanes under the GPU shapes) through shared memory, one barrier.
    bool shuffles = SPLIT > 1 && gl_SubgroupSize >= SPLIT && gl_NumSubgroups * gl_SubgroupSize == WG;
    uint g = shuffles ? gl_SubgroupID * (gl_SubgroupSize / SPLIT) + gl_SubgroupInvocationID / SPLIT
                      : lid / SPLIT;
    uint lane = shuffles ? gl_SubgroupInvocationID % SPLIT : lid % SPLIT;
    uint row0 = (gl_WorkGroupID.x * GROUPS + g) * R;
    [[unroll]] for (uint i = 0; i < NR * T; i++) acc[i] = 0.0;
    [[unroll]] for (uint t = 0; t < T; t++) ss[t] = 0.0;
    // GPU: every block a lane owns in one unrolled loop of branch-free loads (a lane past the
    // row re-reads its last block and adds 0), so all of them are in flight at once; a loop
    // that stopped at the row's end waited a memory round trip per block. CPU (SPLIT = 1):
    // one invocation walks the row, one block at a time.
    if (SPLIT > 1) {
        [[unroll]] for (uint i = 0; i < BPL; i++) {
            uint b = lane + i * SPLIT;
            add_block(min(b, NB - 1), row0, b < NB ? 1.0 : 0.0);
        }
    } else {
        for (uint b = 0; b < NB; b++) add_block(b, row0, 1.0);
    }
    // Lane 0 of each row group stores its rows; the others are done, but under
    // MODE_POSTNORM, whose fold needs the whole workgroup at its barriers.
    bool writes = true;
    if (shuffles) {
        [[unroll]] for (uint mask = SPLIT / 2; mask > 0; mask /= 2) {
            [[unroll]] for (uint i = 0; i < NR * T; i++) acc[i] += subgroupShuffleXor(acc[i], mask);
            if (NORM != 0) {
                [[unroll]] for (uint t = 0; t < T; t++) ss[t] += subgroupShuffleXor(ss[t], mask);
            }
        }
        writes = lane == 0;
    } else if (SPLIT > 1) {
        [[unroll]] for (uint i = 0; i < NR * T; i++) red[lid * RED + i] = acc[i];
        if (NORM != 0) {
            [[unroll]] for (uint t = 0; t < T; t++) red[lid * RED + NR * T + t] = ss[t];
        }
        barrier();
        writes = lane == 0;
        if (writes) {
            for (uint l = 1; l < SPLIT; l++) {
                [[unroll]] for (uint i = 0; i < NR * T; i++) acc[i] += red[(lid + l) * RED + i];
                if (NORM != 0) {
                    [[unroll]] for (uint t = 0; t < T; t++) ss[t] += red[(lid + l) * RED + NR * T + t];
                }
            }
        }
    }
    if (!writes && MODE != MODE_POSTNORM) return;
    if (writes) epilogue(tok0, row0);
    if (MODE == MODE_POSTNORM) post_norm(lid);
}
