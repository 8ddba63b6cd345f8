#version 450
// Embedding lookup: act[out + t*D ..] = dequantized row tokens[t] of the embedding matrix.
// One invocation per (token, 32-element block). Where the matrix is cut into pieces of rows
// (weights past one texel view: engine/backends/vulkan/chunks.py), one dispatch per piece, each
// writing the tokens whose rows it holds: rows [pc.p_row0, pc.p_row0 + pc.count).
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"

layout(local_size_x_id = 0) in;

const uint NBD = D / 32;  // blocks per embedding row

void main() {
    uint id = gl_GlobalInvocationID.x;
    uint t = id / NBD, b = id % NBD;
    if (t >= prm.C) return;
    uint row = uint(prm.tokens[t]) - pc.p_row0;  // wraps past count for rows before the piece
    if (row >= pc.count) return;
    uint blk = row * NBD + b;
    vec4 w[8];
    float d, m;
    load_block(blk, w, d, m);
    uint base = pc.out_off + t * D + b * 32;
    [[unroll]] for (uint i = 0; i < 8; i++) {
        // Element order inside a block: vec4 i holds elements 4i .. 4i+3.
        vec4 x = w[i] * d + m;
        if (EMBED_SCALE != 1.0) x *= EMBED_SCALE;  // Gemma: times sqrt(D), rounded to f32
        act[base + 4 * i] = x.x;
        act[base + 4 * i + 1] = x.y;
        act[base + 4 * i + 2] = x.z;
        act[base + 4 * i + 3] = x.w;
    }
}
