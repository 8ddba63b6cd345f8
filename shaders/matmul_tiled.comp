#version 450
// Prefill matrix-matrix product in shared-memory tiles (matmul_tiled.glsl has the tiling, the
// prologue and the epilogues); the fallback where the device has no cooperative matrices.
// WG = (BM / 4) * (BT / 4): each invocation accumulates a 4 x 4 block of outputs, rows
// r + 16j and tokens c + (BT/4)j, so a subgroup reads the tiles without bank conflicts.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

// One shared array, reused: [32, BM] W tile then [32, BT] X tile (k-major) inside the K loop,
// the [BT, BM] output tile for the epilogue after it.
shared float tile[32 * (R + T) > R * T ? 32 * (R + T) : R * T];
#define OUT_TILE tile
#include "matmul_tiled.glsl"

const uint RT = BM / 4;  // invocations along rows

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint tok0 = gl_WorkGroupID.y * BT, row0 = gl_WorkGroupID.x * OUT_ROWS;
    if (tok0 >= prm.C) return;  // the whole workgroup leaves together
    norm_scales(tok0);

    uint r = lid % RT, c = lid / RT;
    float acc[16];  // [4 rows, 4 tokens]
    [[unroll]] for (uint i = 0; i < 16; i++) acc[i] = 0.0;
    for (uint b = 0; b < NB; b++) {
        for (uint i = lid; i < 4 * BM; i += WG) {
            uint row = i % BM, p = i / BM;
            vec4 lo, hi;
            load_w8(weight_row(row0, row), b, p, lo, hi);
            [[unroll]] for (uint e = 0; e < 4; e++) {
                tile[(8 * p + e) * BM + row] = lo[e];
                tile[(8 * p + 4 + e) * BM + row] = hi[e];
            }
        }
        for (uint i = lid; i < 4 * BT; i += WG) {
            uint t = i % BT, p = i / BT;
            vec4 lo, hi;
            load_x8(tok0, t, b, p, lo, hi);
            [[unroll]] for (uint e = 0; e < 4; e++) {
                tile[32 * BM + (8 * p + e) * BT + t] = lo[e];
                tile[32 * BM + (8 * p + 4 + e) * BT + t] = hi[e];
            }
        }
        barrier();
        for (uint k = 0; k < 32; k++) {
            float w[4], x[4];
            [[unroll]] for (uint j = 0; j < 4; j++) {
                w[j] = tile[k * BM + r + RT * j];
                x[j] = tile[32 * BM + k * BT + c + (BT / 4) * j];
            }
            [[unroll]] for (uint i = 0; i < 4; i++) {
                [[unroll]] for (uint j = 0; j < 4; j++) acc[i * 4 + j] += w[i] * x[j];
            }
        }
        barrier();
    }
    [[unroll]] for (uint i = 0; i < 4; i++) {
        [[unroll]] for (uint j = 0; j < 4; j++) tile[(c + (BT / 4) * j) * BM + r + RT * i] = acc[i * 4 + j];
    }
    barrier();
    epilogue(tok0, row0);
}
