#version 450
// Prefill matrix-matrix product on cooperative matrices (VK_KHR_cooperative_matrix: tensor
// cores on NVIDIA), 16x16x16 f16 x f16 -> f32, for devices that offer that shape (context.py
// checks). matmul_tiled.glsl has the tiling, the prologue and the epilogues; this file only
// replaces the inner product. BM = 64 rows, BT = 64 or 32 tokens (Tuning.coopmat_tokens),
// WG = 4 subgroups in a 2 x 2 grid, each a (BT / 2) x 32 part of the output tile as
// (BT / 32) x 2 accumulators. 32-token tiles double a chunk's workgroups: in 64 x 64 tiles its
// 576-row products launch only 36-60, on a GPU of 132 SMs (16-token tiles, 16 x 16 parts,
// were slower again on the H200: each block's staging then feeds too few products).
//
// Precision: one f16 operand keeps 11 bits, far from the f32 the parity tests hold every
// backend to (plain f16 inputs measured ~5e-4 off numpy's logits on the H200). Each operand is
// split as v = hi + lo / 2048 (hi: v's top 11 bits, lo = f16((v - hi) * 2048), ~22 bits
// together) and the three products hi*hi + (hi*lo + lo*hi) / 2048 are summed in f32; the
// lo*lo term (~2^-22 relative) is dropped. Scaling lo keeps it out of f16's subnormal range.
// Inputs beyond f16's range (|v| > 65504) would overflow to infinity.
// Built with glslangValidator >= 13 (glslc 2023.2 lacks the extension): see compile.py.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

shared float out_tile[64 * 64];  // [BT, BM] f32 results for the epilogue
#define OUT_TILE out_tile
#include "matmul_tiled.glsl"

// The f16 tiles hold f16vec4s, so that staging a block takes 4 stores of 8 bytes per 8 values
// rather than 16 of 2; coopMatLoad counts their offsets and strides in f16vec4s.
const uint LD = 40;  // row stride of the f16 tiles: 32 + 8 halves, 80 bytes, off the banks' period
const uint LD4 = LD / 4;  // the same in f16vec4s
shared f16vec4 xh[64 * LD4], xl[64 * LD4];  // [BT, 32] X tile, hi and scaled lo, token-major
shared f16vec4 wh[64 * LD4], wl[64 * LD4];  // [BM, 32] W tile, hi and scaled lo, row-major
const float LO_SCALE = 2048.0;

#define ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define MAT_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define MAT_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>

// v as hi and scaled lo halves. hi keeps v's top 11 significant bits by masking, so it converts
// to f16 exactly and v - hi is an honest f32 subtraction (a compiler may treat
// float(float16_t(v)) as v and fold lo to 0).
void split4(vec4 v, out f16vec4 hi, out f16vec4 lo) {
    vec4 top = uintBitsToFloat(floatBitsToUint(v) & 0xFFFFE000u);
    hi = f16vec4(top);
    lo = f16vec4((v - top) * LO_SCALE);
}

// Store 8 values at halves [at ..] (a multiple of 8) of the X (is_x) or W tiles.
void split8(uint at, bool is_x, vec4 lo4, vec4 hi4) {
    uint i = at / 4;
    f16vec4 h0, l0, h1, l1;
    split4(lo4, h0, l0);
    split4(hi4, h1, l1);
    if (is_x) {
        xh[i] = h0;
        xh[i + 1] = h1;
        xl[i] = l0;
        xl[i + 1] = l1;
    } else {
        wh[i] = h0;
        wh[i + 1] = h1;
        wl[i] = l0;
        wl[i + 1] = l1;
    }
}

// The next block's W and X words, fetched into registers while the current block's products
// run, and dequantized only when staged: without it each block waited out its global loads,
// then its products (a 64 x 64 tile and 4 subgroups leave an SM nothing else to run
// meanwhile). Globals, as attention_split's.
const uint IW = (4 * BM + WG - 1) / WG, IX = (4 * BT + WG - 1) / WG;  // 8-element items each
RawW8 w_raw[IW];
RawX8 x_raw[IX];

void fetch(uint b, uint row0, uint tok0) {
    uint lid = gl_LocalInvocationID.x;
    [[unroll]] for (uint k = 0; k < IW; k++) {
        uint i = min(lid + k * WG, 4 * BM - 1);  // past the tile: fetched, not staged
        w_raw[k] = fetch_w8(weight_row(row0, i / 4), b, i % 4);
    }
    [[unroll]] for (uint k = 0; k < IX; k++) {
        uint i = min(lid + k * WG, 4 * BT - 1);
        x_raw[k] = fetch_x8(tok0, i / 4, b, i % 4);
    }
}

// The fetched block, dequantized, into the f16 tiles.
void stage() {
    uint lid = gl_LocalInvocationID.x;
    [[unroll]] for (uint k = 0; k < IW; k++) {
        uint i = lid + k * WG;
        vec4 lo, hi;
        decode_w8(w_raw[k], i % 4, lo, hi);
        if (i < 4 * BM) split8((i / 4) * LD + 8 * (i % 4), false, lo, hi);
    }
    [[unroll]] for (uint k = 0; k < IX; k++) {
        uint i = lid + k * WG;
        vec4 lo, hi;
        decode_x8(x_raw[k], min(i / 4, BT - 1), lo, hi);
        if (i < 4 * BT) split8((i / 4) * LD + 8 * (i % 4), true, lo, hi);
    }
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint tok0 = gl_WorkGroupID.y * BT, row0 = gl_WorkGroupID.x * OUT_ROWS;
    if (tok0 >= prm.C) return;  // the whole workgroup leaves together
    norm_scales(tok0);

    uint sg = gl_SubgroupID;
    const bool TWO_I = BT == 64;  // accumulators of token block i = 1 (else BT = 32)
    uint tq = (sg / 2) * (BT / 2), rq = (sg % 2) * 32;  // this subgroup's part: tokens, rows
    // Accumulators per (token block i, row block j): hi*hi, and hi*lo + lo*hi. One
    // declarator per declaration: glslang 13.1 drops the matrix use from later ones.
    ACC hh00 = ACC(0.0);
    ACC hh01 = ACC(0.0);
    ACC hh10 = ACC(0.0);
    ACC hh11 = ACC(0.0);
    ACC mx00 = ACC(0.0);
    ACC mx01 = ACC(0.0);
    ACC mx10 = ACC(0.0);
    ACC mx11 = ACC(0.0);
    fetch(0, row0, tok0);
    for (uint b = 0; b < NB; b++) {
        stage();
        barrier();
        fetch(min(b + 1, NB - 1), row0, tok0);  // unconditional: no branch before the products
        [[unroll]] for (uint k = 0; k < 32; k += 16) {
            MAT_A ah0;
            MAT_A ah1;
            MAT_A al0;
            MAT_A al1;
            MAT_B bh0;
            MAT_B bh1;
            MAT_B bl0;
            MAT_B bl1;
            uint xa = tq * LD4 + k / 4, wa = rq * LD4 + k / 4;  // in f16vec4s
            coopMatLoad(ah0, xh, xa, LD4, gl_CooperativeMatrixLayoutRowMajor);
            coopMatLoad(al0, xl, xa, LD4, gl_CooperativeMatrixLayoutRowMajor);
            if (TWO_I) {
                coopMatLoad(ah1, xh, xa + 16 * LD4, LD4, gl_CooperativeMatrixLayoutRowMajor);
                coopMatLoad(al1, xl, xa + 16 * LD4, LD4, gl_CooperativeMatrixLayoutRowMajor);
            }
            // B[k][row] = W[row][k]: the row-major W tile read column-major
            coopMatLoad(bh0, wh, wa, LD4, gl_CooperativeMatrixLayoutColumnMajor);
            coopMatLoad(bh1, wh, wa + 16 * LD4, LD4, gl_CooperativeMatrixLayoutColumnMajor);
            coopMatLoad(bl0, wl, wa, LD4, gl_CooperativeMatrixLayoutColumnMajor);
            coopMatLoad(bl1, wl, wa + 16 * LD4, LD4, gl_CooperativeMatrixLayoutColumnMajor);
#define MMA3(i, j) \
            hh##i##j = coopMatMulAdd(ah##i, bh##j, hh##i##j); \
            mx##i##j = coopMatMulAdd(ah##i, bl##j, mx##i##j); \
            mx##i##j = coopMatMulAdd(al##i, bh##j, mx##i##j);
            MMA3(0, 0) MMA3(0, 1)
            if (TWO_I) {
                MMA3(1, 0) MMA3(1, 1)
            }
        }
        barrier();
    }
    // y = hh + mixed / 2048, added in scalar code rather than with cooperative-matrix
    // arithmetic: mixed goes through out_tile into registers (the elements lid + k * WG), then
    // hh is stored and the registers are added on.
    const uint PER = BT * BM / WG;
    float part[PER];
#define STORE(acc, i, j) coopMatStore(acc##i##j, out_tile, (tq + 16 * i) * BM + rq + 16 * j, BM, \
        gl_CooperativeMatrixLayoutRowMajor);
#define STORE_PART(acc) STORE(acc, 0, 0) STORE(acc, 0, 1) \
    if (TWO_I) { STORE(acc, 1, 0) STORE(acc, 1, 1) }
    STORE_PART(mx)
    barrier();
    [[unroll]] for (uint k = 0; k < PER; k++) part[k] = out_tile[lid + k * WG] * (1.0 / LO_SCALE);
    barrier();
    STORE_PART(hh)
    barrier();
    [[unroll]] for (uint k = 0; k < PER; k++) out_tile[lid + k * WG] += part[k];
    barrier();
    epilogue(tok0, row0);
}
