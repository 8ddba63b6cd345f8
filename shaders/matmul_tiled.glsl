// Shared by the prefill matrix-matrix products (matmul_tiled.comp, matmul_coopmat.comp):
// Y[T, M] = X[T, K] * W^T for a chunk of tokens, one workgroup per tile of BM weight rows x BT
// tokens, K walked one 32-element block at a time. Each W block is dequantized once per tile
// and reused by all BT tokens (matmul.comp re-reads it for every T <= 4 tokens).
// The including shader declares OUT_TILE, a float [BT, BM] shared array, before this file.
//
// gate|up: a tile's first BM/2 rows are gate rows, the other BM/2 the matching up rows, so the
// SiLU epilogue finds both halves in one tile. The prologue (RMSNorm) computes what
// matmul.comp's does; the epilogues are matmul_common.glsl's, as there.

#include "matmul_common.glsl"

const uint BM = R;                                      // weight rows per tile
const uint BT = T;                                      // tokens per tile
const uint NB = K / 32;                                 // blocks per weight row
const uint OUT_ROWS = MODE == MODE_GATEUP ? BM / 2 : BM;  // output rows per tile

shared float norm_part[4 * BT];  // [BT, 4] partial sums of squares
shared float norm_inv[BT];       // [BT] RMSNorm scale per token (1 without NORM)

// Weight row behind tile row i of the tile whose first output row is row0. Rows past the
// matrix re-read its last row: they compute garbage that is never stored.
uint weight_row(uint row0, uint i) {
    uint wr = row0 + i;
    if (MODE == MODE_GATEUP) wr = i < BM / 2 ? row0 + i : M + row0 + i - BM / 2;
    return min(wr, MROWS - 1);
}

// Elements [8p, 8p + 8) of block b of weight row wr, in two steps: fetch_w8 loads the words
// (texels and the block's scale words) and decode_w8 dequantizes them (code * d + m), so that a
// shader can keep the loads in flight while it works on the previous block.
struct RawW8 {
    uvec4 a, b;  // payload texels (F32: both; K5-K6X: a, and b.x the high bits; others: a)
    uvec2 s;     // the block's scale words (common.glsl's scale_words)
};

RawW8 fetch_w8(uint wr, uint b, uint p) {
    uint blk = wr * NB + b, first = block_texel(blk);
    RawW8 r;
    r.b = uvec4(0u);
    r.s = uvec2(0u);
    if (QTYPE == QT_F32) {
        r.a = texelFetch(WQ, int(first + 2 * p));
        r.b = texelFetch(WQ, int(first + 2 * p + 1));
    } else if (QTYPE == QT_F16) {
        r.a = texelFetch(WQ, int(first + p));
    } else {
        r.a = texelFetch(WQ, int(first + (INT8_CODES ? p / 2 : 0)));
        r.s = scale_words(blk);
        if (PLANES) {  // the word holding elements 8p .. 8p + 7's high bits
            uvec2 h = high_words(blk);
            r.b.x = SIX_BITS && p >= 2 ? h.y : h.x;
        }
    }
    return r;
}

void decode_w8(RawW8 r, uint p, out vec4 lo, out vec4 hi) {
    if (QTYPE == QT_F32) {
        lo = uintBitsToFloat(r.a);
        hi = uintBitsToFloat(r.b);
        return;
    }
    if (QTYPE == QT_F16) {
        lo = vec4(unpackHalf2x16(r.a.x), unpackHalf2x16(r.a.y));
        hi = vec4(unpackHalf2x16(r.a.z), unpackHalf2x16(r.a.w));
        return;
    }
    float d, m;
    uint a = (p % 2) * 2;
    if (INT8_CODES) {  // texel i holds int8 elements 16i .. 16i + 15
        lo = vec4(ivec4(uvec4(r.a[a]) << uvec4(24, 16, 8, 0)) >> 24);
        hi = vec4(ivec4(uvec4(r.a[a + 1]) << uvec4(24, 16, 8, 0)) >> 24);
    } else {  // Q4_0, Q4_1, K4-K6X: byte j holds element j (low nibble) and j + 16 (high)
        uvec4 shift = uvec4(0, 8, 16, 24) + (p / 2) * 4;
        lo = vec4((uvec4(r.a[a]) >> shift) & 15u);
        hi = vec4((uvec4(r.a[a + 1]) >> shift) & 15u);
        if (PLANES) {  // K5: element e at bit e; K6, K6X: at bits 2(e % 16) of its half's word
            uint k = QTYPE == QT_K5 ? 8 * p : 16 * (p % 2);
            lo += high_part(r.b.x, k);
            hi += high_part(r.b.x, k + (QTYPE == QT_K5 ? 4 : 8));
        }
    }
    if (SBW != 0) {  // K4-K6X: elements 0-15 (p 0, 1) take s0, 16-31 s1
        vec2 s;
        k_scales(r.s, d, s, m);
        d *= p < 2 ? s.x : s.y;
    } else {
        plain_scales(r.s.x, d, m);
    }
    lo = lo * d + m;
    hi = hi * d + m;
}

void load_w8(uint wr, uint b, uint p, out vec4 lo, out vec4 hi) {
    decode_w8(fetch_w8(wr, b, p), p, lo, hi);
}

// Elements [8p, 8p + 8) of block b of the input row of tile token t, RMSNormed under NORM,
// in the same two steps. Tokens past the chunk re-read its last row (never stored).
struct RawX8 {
    vec4 lo, hi;    // the input
    vec4 nlo, nhi;  // the RMSNorm weights (NORM)
};

RawX8 fetch_x8(uint tok0, uint t, uint b, uint p) {
    uint tok = min(tok0 + t, prm.C - 1);
    int base = int((pc.in_off + tok * K) / 4 + b * 8 + 2 * p);
    RawX8 r;
    r.lo = texelFetch(ACTT, base);
    r.hi = texelFetch(ACTT, base + 1);
    r.nlo = vec4(1.0);
    r.nhi = vec4(1.0);
    if (NORM != 0) {
        int nw = int(pc.norm_off / 4 + b * 8 + 2 * p);
        r.nlo = texelFetch(VECT, nw);
        r.nhi = texelFetch(VECT, nw + 1);
    }
    return r;
}

void decode_x8(RawX8 r, uint t, out vec4 lo, out vec4 hi) {
    lo = r.lo;
    hi = r.hi;
    if (NORM != 0) {
        lo *= norm_inv[t] * r.nlo;
        hi *= norm_inv[t] * r.nhi;
    }
}

void load_x8(uint tok0, uint t, uint b, uint p, out vec4 lo, out vec4 hi) {
    decode_x8(fetch_x8(tok0, t, b, p), t, lo, hi);
}

// RMSNorm prologue: norm_inv[t] for the tile's tokens, four invocations per row.
void norm_scales(uint tok0) {
    if (NORM == 0) return;  // a specialization constant: uniform, so no barrier is skipped
    uint lid = gl_LocalInvocationID.x;
    for (uint i = lid; i < 4 * BT; i += WG) {
        uint tok = min(tok0 + i / 4, prm.C - 1);
        int base = int((pc.in_off + tok * K) / 4);
        vec4 ss = vec4(0.0);
        for (uint j = i % 4; j < K / 4; j += 4) {
            vec4 x = texelFetch(ACTT, base + int(j));
            ss += x * x;
        }
        norm_part[i] = ss.x + ss.y + ss.z + ss.w;
    }
    barrier();
    for (uint t = lid; t < BT; t += WG) {
        float ss = norm_part[4 * t] + norm_part[4 * t + 1] + norm_part[4 * t + 2] + norm_part[4 * t + 3];
        norm_inv[t] = 1.0 / sqrt(ss / float(K) + EPS);
    }
    barrier();
}

// Epilogue over OUT_TILE [BT, BM] (after a barrier): what matmul.comp's MODE does per value.
void epilogue(uint tok0, uint row0) {
    const uint units = MODE == MODE_QKV || MODE == MODE_GATEUP ? BM / 2 : BM;  // per token
    for (uint u = gl_LocalInvocationID.x; u < BT * units; u += WG) {
        uint t = u / units, i = u % units, tok = tok0 + t;
        if (tok >= prm.C) break;  // u only grows
        if (MODE == MODE_QKV) {  // a RoPE pair (row, row + 1) per unit
            uint row = row0 + 2 * i;
            if (row >= M) continue;
            store_qkv_pair(tok, row, OUT_TILE[t * BM + 2 * i], OUT_TILE[t * BM + 2 * i + 1]);
        } else {  // never MODE_LOGITS: the logits row takes matmul.comp
            uint row = row0 + i;
            if (row >= M) continue;
            store_value(tok, row, OUT_TILE[t * BM + i],
                        MODE == MODE_GATEUP ? OUT_TILE[t * BM + BM / 2 + i] : 0.0);
        }
    }
}
