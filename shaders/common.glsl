// Shared declarations of every Channel compute shader: one descriptor set, one push-constant
// block and one list of specialization constants, so a single pipeline layout serves them all.
// A shader declares what it uses; the host passes every constant to every pipeline.
// Beyond 0-20, shaders that need them declare more (pipelines.py SPEC_IDS lists them all):
// split.glsl 21-24 and 28 with bindings 18-19, mass.comp 25 and 27 with binding 20,
// attention_split.comp 29 and 32, argmax.glsl 30-31, shortconv.comp 37 and 42-43 with binding
// 21, window_attention.comp and window_store.comp bindings 22-23 (WINDOW, 38, is declared
// here), delta_rule.comp 44-46 with binding 24, matmul.comp 56; W_SSBO, 57, and its
// bindings 25-26 are declared here.

#extension GL_EXT_control_flow_attributes : require

// ---- specialization constants (ids match engine/backends/vulkan/pipelines.py SPEC_IDS) --------
layout(constant_id = 0) const uint WG = 64;      // invocations per workgroup
layout(constant_id = 1) const uint R = 4;        // matmul: output rows per row group
layout(constant_id = 2) const uint T = 1;        // matmul: tokens per workgroup
layout(constant_id = 3) const uint SPLIT = 1;    // matmul: invocations sharing one row group
layout(constant_id = 4) const uint QTYPE = 2;    // weight encoding, see QT_* below
layout(constant_id = 5) const uint MODE = 0;     // matmul epilogue, see MODE_* below
layout(constant_id = 6) const uint NORM = 0;     // matmul: 1 = RMSNorm the input rows first
layout(constant_id = 7) const uint K = 32;       // matmul: input width
layout(constant_id = 8) const uint M = 32;       // matmul: output rows (per half for gate|up)
layout(constant_id = 9) const uint D = 64;       // d_model
layout(constant_id = 10) const uint HD = 16;     // head_dim
layout(constant_id = 11) const uint NH = 4;      // query heads
layout(constant_id = 12) const uint NKV = 2;     // K/V heads
layout(constant_id = 13) const uint F = 128;     // ffn_dim
layout(constant_id = 14) const uint S = 64;      // ring slots
layout(constant_id = 15) const uint PROWS = 8;   // rows of the probability scratch
layout(constant_id = 16) const float EPS = 1e-5; // RMSNorm epsilon
layout(constant_id = 17) const uint COS_OFF = 0; // prm.tokens index of the pass's cos rows
layout(constant_id = 18) const uint SIN_OFF = 0; // prm.tokens index of its sin rows
layout(constant_id = 19) const uint NL = 2;      // layers
layout(constant_id = 20) const uint V = 256;     // vocabulary (logits)
// The architecture's layout (architecture.py's features), 0 for llama's: a model that does
// not need one compiles its code out, so it costs the llama pass nothing.
layout(constant_id = 34) const uint ROPE_SPLIT = 0;  // 1: RoPE pairs (i, i + HD/2) of a head
layout(constant_id = 35) const uint QKV_BIAS = 0;    // 1: q|k|v bias at VEC pc.count (qkv matmul)
layout(constant_id = 36) const uint QK_NORM = 0;     // 1: q|k|v leaves RoPE to qk_norm.comp
// >0: RoPE pairs a head (partial rotary: Qwen3.5, a QK-norm model, so qk_norm.comp rotates).
layout(constant_id = 47) const uint ROT_HALF = 0;
layout(constant_id = 52) const uint GATED_Q = 0;     // 1: q|k|v|gate rows; gates to act pc.per_t
// Gemma 3's: a WINDOW layer's pipelines get its window's rows (and its own RoPE rows at
// COS_OFF/SIN_OFF); every other pipeline 0.
layout(constant_id = 38) const uint WINDOW = 0;      // >0: q|k|v rows stay in act (QKVD wide)
layout(constant_id = 39) const uint GEGLU = 0;       // 1: gate|up's gate is GELU (tanh), not SiLU
layout(constant_id = 40) const float EMBED_SCALE = 1.0;  // embeddings times this (sqrt(D))
layout(constant_id = 41) const float Q_SCALE = 0.0;  // queries' scale; 0: 1/sqrt(HD)

const uint QD = NH * HD;     // query width
const uint KVD = NKV * HD;   // key (and value) width
const uint HALF = HD / 2;    // RoPE pairs (cos/sin columns) of a position
// RoPE pairs per head: all HALF, or with partial rotary (Qwen3.5) the first ROT_HALF, split
// half within the first 2 * ROT_HALF dims; the dims past those pass through unrotated.
const uint RH = ROT_HALF == 0 ? HALF : ROT_HALF;
const uint QKVD = QD + 2 * KVD;  // a WINDOW layer's q|k|v row in act

// What queries are multiplied by before q.k: 1/sqrt(HD) unless the model says otherwise
// (Gemma 3 27B's 1/sqrt(D/NH)). The default keeps the expression every model had, so the
// models that do not set Q_SCALE compute the very same scale.
float query_scale() {
    return Q_SCALE != 0.0 ? Q_SCALE : 1.0 / sqrt(float(HD));
}

// Weight encodings (engine/backends/vulkan/encodings.py): every matrix is stored as 32-element
// blocks, a block's payload as TPB RGBA32UI texels in WQ and its scales in WS (scale_words).
// The first five are the GGUF's own blocks (one word a block: the f16 d, or half2 d, m); Q8M
// and K4-K6X are the exact re-encodings of Q5_1 and the K-quants (Q5_0 is written as Q8_0):
// codes c with value = d * s * c + dmin * o, s = s0 for elements 0-15 and s1 for 16-31.
const uint QT_F32 = 0;
const uint QT_F16 = 1;
const uint QT_Q4_0 = 2;
const uint QT_Q4_1 = 3;
const uint QT_Q8_0 = 8;
const uint QT_Q8M = 64;  // Q5_1: int8 codes, one word half2(d, m)
const uint QT_K4 = 65;   // Q4_K: 4-bit codes in Q4_1's nibble order
const uint QT_K6X = 66;  // Q3_K, fused K-quants of different encodings: K6's codes, wide words
const uint QT_K5 = 67;   // Q5_K: K4's nibbles, then a plane of 5th bits
const uint QT_K6 = 68;   // Q6_K: K4's nibbles of q = c + 32, then a plane of q's top 2 bits

const bool INT8_CODES = QTYPE == QT_Q8_0 || QTYPE == QT_Q8M;
const bool SIX_BITS = QTYPE == QT_K6 || QTYPE == QT_K6X;
const bool PLANES = QTYPE == QT_K5 || SIX_BITS;  // nibbles + high bits
// Payload texels a block (K5, K6, K6X: its nibbles; high_words has the rest).
const uint TPB = QTYPE == QT_F32 ? 8 : (QTYPE == QT_F16 ? 4 : (INT8_CODES ? 2 : 1));
// K4-K6X store per super-block of 8 blocks (a K-quant's 256 weights, whose d and dmin they
// share) TPG payload texels: the blocks' nibbles, then K5/K6/K6X's high bits; and SBW scale
// words: half2(d, dmin), then K4/K5's (s, o) or K6's (s0, s1) int8 pairs two a word, or
// K6X's (s0, s1, o) one a block. SBW 0: one word a block.
const uint SBW = QTYPE == QT_K6X ? 9 : (QTYPE == QT_K4 || PLANES ? 5 : 0);
const uint GROUP = SBW == 0 ? 1 : 8;
const uint TPG = QTYPE == QT_K5 ? 10 : (SIX_BITS ? 12 : GROUP * TPB);

// Matmul epilogues.
const uint MODE_STORE = 0;   // act[out + t*M + row] = y
const uint MODE_QKV = 1;     // RoPE q and k; q -> act, k/v -> the arena's K/V planes
const uint MODE_RESID = 2;   // act[out + t*D + row] += y (residual add)
const uint MODE_GATEUP = 3;  // act[out + t*F + row] = silu(gate) * up
const uint MODE_LOGITS = 4;  // logits[row] = y, for the chunk's last token only
const uint MODE_POSTNORM = 5;  // decode, matmul.comp: act[out + row] += rmsnorm(y) * w (Gemma)

// ---- resources ---------------------------------------------------------------------------------
layout(binding = 0) uniform usamplerBuffer WQ;        // weight payload texels, all matrices
layout(binding = 1) uniform usamplerBuffer WS;        // one scale word per weight block
layout(std430, binding = 2) readonly buffer Vec { float vec[]; };   // norms, biases, taps
layout(std430, binding = 3) buffer Act { float act[]; };            // activations scratch
layout(std430, binding = 4) buffer KW { float kc[]; };              // arena k_cache [NL,S,KVD]
layout(binding = 5) uniform samplerBuffer KT;         // the same k_cache, as RGBA32F texels
layout(std430, binding = 6) buffer VW { float vc[]; };              // arena v_cache [NL,S,KVD]
layout(binding = 7) uniform samplerBuffer VT;         // the same v_cache, as RGBA32F texels
layout(std430, binding = 8) buffer Mass { float mass[]; };          // arena mass [S]
layout(std430, binding = 9) buffer Logits { float logits[]; };      // arena logits [V]
layout(std430, binding = 10) readonly buffer Params {
    uint C;      // tokens in this pass
    uint n0;     // first slot the pass writes
    uint pos0;   // RoPE position of that slot
    uint N;      // slots live once the pass is done (n0 + C)
    float decay_c;  // the ring policy's salience decay ** C, as numpy rounds it (mass.comp)
    float inv_c;    // 1 / C, likewise
    // The window planes (WINDOW layers): the row the pass's first token writes, which is
    // (clock before the pass) % WINDOW, and the rows written so far, min(that clock, WINDOW).
    uint wrow, wfill;
    // [cmax] token ids, then each RoPE's (HD/2)-wide cos rows and sin rows of the pass's
    // positions, [cmax] each, as float bits (resources.py; rope_cos below reads them).
    int tokens[];
} prm;

// RoPE pair j of the pass's token `tok` (at position pos0 + tok).
float rope_cos(uint tok, uint j) { return intBitsToFloat(prm.tokens[COS_OFF + tok * HALF + j]); }
float rope_sin(uint tok, uint j) { return intBitsToFloat(prm.tokens[SIN_OFF + tok * HALF + j]); }
layout(std430, binding = 11) buffer Probs { float probs[]; };   // [PROWS, S] then [PROWS] 1/sum
layout(std430, binding = 12) buffer Hidden { float hidden[]; }; // [C, D] final-normed rows
layout(std430, binding = 13) readonly buffer RotCos { float rot_cos[]; };  // arena [S, HALF]
layout(std430, binding = 14) readonly buffer RotSin { float rot_sin[]; };  // arena [S, HALF]
layout(binding = 15) uniform samplerBuffer ACTT;     // the act buffer, as RGBA32F texels
layout(binding = 16) uniform samplerBuffer VECT;     // the vec buffer, as RGBA32F texels
layout(std430, binding = 17) buffer Out { uint outw[]; };  // [4] argmax index, its logit bits

// The same weight chunks as WQ and WS, as storage buffers (matmul.comp's decode products on
// GPUs, W_SSBO 1: through the load/store path rather than the texture units). Bound clipped
// to maxStorageBufferRange; the host sets W_SSBO only where every chunk fits it.
layout(constant_id = 57) const uint W_SSBO = 0;
layout(std430, binding = 25) readonly buffer WQS { uvec4 wq_words[]; };
layout(std430, binding = 26) readonly buffer WSS { uint ws_words[]; };

uvec4 payload_texel(uint i) { return W_SSBO != 0 ? wq_words[i] : texelFetch(WQ, int(i)); }
uint scale_word(uint i) { return W_SSBO != 0 ? ws_words[i] : texelFetch(WS, int(i)).x; }

layout(push_constant) uniform Push {
    uint w_texel;   // matmul, embed: first WQ texel of the matrix
    uint w_block;   // matmul, embed: first WS word of the matrix
    uint norm_off;  // matmul, rmsnorm: VEC offset of the norm weights
    uint in_off;    // act offset of the input rows
    uint out_off;   // act offset of the output rows; logits: the first row of W's piece
    uint layer;     // K/V plane, within the bound group of layers' planes
    uint p_row0;    // first probability row of this pass; embed: first row of W's piece
    uint count;     // mass: rows to sum; rebase: live slots; embed: rows of W's piece;
                    // q|k|v matmul with QKV_BIAS: VEC offset of the layer's q|k|v bias
    uint flags;     // mass: 1 = add to mass instead of overwriting it; rebase: layers bound
    uint per_t;     // mass: probability rows per query token
} pc;

// First payload texel of the matrix's block blk (pc.w_texel the matrix's first).
uint block_texel(uint blk) {
    return pc.w_texel + (blk / GROUP) * TPG + (blk % GROUP) * TPB;
}

// K5, K6, K6X: block blk's high bits, after its super-block's 8 nibble texels: K5 one word
// (bit i for element i), K6/K6X two (elements 0-15, then 16-31, 2 bits each).
uvec2 high_words(uint blk) {
    uint j = blk % 8, first = pc.w_texel + (blk / 8) * TPG + 8;
    uvec4 t = payload_texel(first + (QTYPE == QT_K5 ? j / 4 : j / 2));
    if (QTYPE == QT_K5) return uvec2(t[j % 4], 0u);
    return j % 2 == 0 ? t.xy : t.zw;
}

// The scale words of the matrix's block blk (pc.w_block its first word): (its word, 0), or
// K4-K6X's (half2(d, dmin), the int8s s0, s1, o in bytes 0-2).
uvec2 scale_words(uint blk) {
    if (SBW == 0) return uvec2(scale_word(pc.w_block + blk), 0u);
    uint base = pc.w_block + (blk / 8) * SBW, j = blk % 8;
    uint head = scale_word(base);
    if (QTYPE == QT_K6X) return uvec2(head, scale_word(base + 1 + j));
    uint pair = (scale_word(base + 1 + j / 2) >> (16 * (j % 2))) & 0xFFFFu;
    if (QTYPE == QT_K6) return uvec2(head, pair);  // (s0, s1, 0)
    return uvec2(head, (pair & 0xFFu) * 0x101u | ((pair >> 8) << 16));  // (s, s, o)
}

// K5, K6, K6X: the high bits of elements 4c .. 4c + 3 of a half of a block: bits k, k + 1,
// ... (K5) or k, k + 2, ... (K6, K6X) of word h, as the value they add to the nibbles (less
// 32 for the 6-bit ones: the code c = q - 32).
vec4 high_part(uint h, uint k) {
    if (QTYPE == QT_K5) return vec4((uvec4(h) >> (k + uvec4(0, 1, 2, 3))) & 1u) * 16.0;
    return vec4((uvec4(h) >> (k + uvec4(0, 2, 4, 6))) & 3u) * 16.0 - 32.0;
}

// K4-K6X's scale words -> d, the sub-scales s0 and s1, and the additive m = dmin * o.
void k_scales(uvec2 words, out float d, out vec2 s, out float m) {
    vec2 dd = unpackHalf2x16(words.x);
    ivec3 i = ivec3(uvec3(words.y) << uvec3(24, 16, 8)) >> 24;  // sign-extended bytes 0-2
    d = dd.x;
    s = vec2(i.xy);
    m = dd.y * float(i.z);
}

// The one-word encodings' d and m (F32, F16: unused).
void plain_scales(uint word, out float d, out float m) {
    vec2 dm = unpackHalf2x16(word);
    d = dm.x;
    m = QTYPE == QT_Q4_1 || QTYPE == QT_Q8M ? dm.y : (QTYPE == QT_Q4_0 ? -8.0 * dm.x : 0.0);
}

// Block blk of the matrix (pc.w_texel, pc.w_block its first texel and scale word) as
// w[i] * d + m: w holds the integer codes (times K4-K6X's sub-scale, still an exact integer),
// or the exact values for float encodings, with d = 1 and m = 0, so a dot product can apply
// d and m once per block.
void load_block(uint blk, out vec4 w[8], out float d, out float m) {
    uint first = block_texel(blk);
    if (QTYPE == QT_F32) {
        [[unroll]] for (uint i = 0; i < 8; i++) w[i] = uintBitsToFloat(payload_texel(first + i));
        d = 1.0;
        m = 0.0;
        return;
    } else if (QTYPE == QT_F16) {
        [[unroll]] for (uint i = 0; i < 4; i++) {
            uvec4 h = payload_texel(first + i);
            w[2 * i] = vec4(unpackHalf2x16(h.x), unpackHalf2x16(h.y));
            w[2 * i + 1] = vec4(unpackHalf2x16(h.z), unpackHalf2x16(h.w));
        }
        d = 1.0;
        m = 0.0;
        return;
    } else if (INT8_CODES) {
        [[unroll]] for (uint i = 0; i < 2; i++) {
            uvec4 q = payload_texel(first + i);
            [[unroll]] for (uint c = 0; c < 4; c++) {
                w[4 * i + c] = vec4(ivec4(uvec4(q[c]) << uvec4(24, 16, 8, 0)) >> 24);  // int8s
            }
        }
    } else {  // Q4_0, Q4_1, K4-K6X: byte j holds element j (low nibble) and j + 16 (high)
        uvec4 q = payload_texel(first);
        [[unroll]] for (uint c = 0; c < 4; c++) {
            w[c] = vec4((uvec4(q[c]) >> uvec4(0, 8, 16, 24)) & 15u);
            w[c + 4] = vec4((uvec4(q[c]) >> uvec4(4, 12, 20, 28)) & 15u);
        }
        if (PLANES) {
            uvec2 h = high_words(blk);
            [[unroll]] for (uint c = 0; c < 4; c++) {
                w[c] += QTYPE == QT_K5 ? high_part(h.x, 4 * c) : high_part(h.x, 8 * c);
                w[c + 4] += QTYPE == QT_K5 ? high_part(h.x, 16 + 4 * c) : high_part(h.y, 8 * c);
            }
        }
    }
    uvec2 words = scale_words(blk);
    if (SBW != 0) {  // K4-K6X: w[0..3] are elements 0-15, w[4..7] 16-31
        vec2 s;
        k_scales(words, d, s, m);
        [[unroll]] for (uint i = 0; i < 8; i++) w[i] *= i < 4 ? s.x : s.y;
    } else {
        plain_scales(words.x, d, m);
    }
}
