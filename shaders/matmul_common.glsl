// What every matrix product (matmul.comp, and through matmul_tiled.glsl matmul_tiled.comp and
// matmul_coopmat.comp) shares beyond common.glsl (which has the encodings' block sizes): the
// weight rows a gate|up matrix stores, and the epilogues by MODE, one output value at a time,
// so that every product writes exactly the same numbers. Include after common.glsl.

const uint MROWS = MODE == MODE_GATEUP ? 2 * M : M;  // weight rows: gate rows, then up rows

// MODE_QKV: rows (row, row + 1) of token tok are one pair. The q|k|v bias (QKV_BIAS), RoPE
// on q and k, then q to act, k and v into the arena's K/V planes. RoPE's pairs are adjacent
// rows (llama.cpp permutes llama's Q/K rows so); a split-half model's pairs are (i, i + HD/2)
// of a head, so weights.py stores its Q/K rows interleaved (row 2i from i, 2i + 1 from
// i + HD/2) and this writes each pair back to its own dims: K/V and q keep numpy's layout.
// With QK_NORM the pairs are stored unrotated, for qk_norm.comp. With GATED_Q the rows past
// v are the queries' gates (Qwen3.5), stored to act[pc.per_t + tok*QD] for sigmoid_gate.comp.
// A WINDOW layer's keys and values go to act beside q (a row of QKVD): its window plane takes
// them only once the chunk's queries have read the rows they overwrite (window_store.comp).
void store_qkv_pair(uint tok, uint row, float e, float o) {
    uint slot = prm.n0 + tok;
    uint re = row, ro = row + 1;  // the pair's dims in q|k|v
    if (ROPE_SPLIT != 0 && row < QD + KVD) {
        re = row - row % HD + (row % HD) / 2;
        ro = re + HALF;
    }
    if (QKV_BIAS != 0) {
        e += vec[pc.count + re];
        o += vec[pc.count + ro];
    }
    if (QK_NORM == 0 && row < QD + KVD) {  // QK-norm: qk_norm.comp norms, then rotates
        uint j = (row % HD) / 2;
        float c = rope_cos(tok, j), s = rope_sin(tok, j);
        float ne = e * c - o * s;
        o = o * c + e * s;
        e = ne;
    }
    if (WINDOW != 0) {  // a WINDOW layer: q|k|v rows stay in act for window_attention.comp
        uint at = pc.out_off + tok * QKVD;
        act[at + re] = e;
        act[at + ro] = o;
    } else if (row < QD) {
        act[pc.out_off + tok * QD + re] = e;
        act[pc.out_off + tok * QD + ro] = o;
    } else if (row < QD + KVD) {
        uint k = (pc.layer * S + slot) * KVD;
        kc[k + re - QD] = e;
        kc[k + ro - QD] = o;
    } else if (GATED_Q == 0 || row < QD + 2 * KVD) {
        uint k = (pc.layer * S + slot) * KVD;
        vc[k + re - QD - KVD] = e;
        vc[k + ro - QD - KVD] = o;
    } else {
        act[pc.per_t + tok * QD + re - QD - 2 * KVD] = e;
        act[pc.per_t + tok * QD + ro - QD - 2 * KVD] = o;
    }
}

// GeGLU's gate (Gemma): GELU's tanh approximation, in numpy's gelu_mul order of operations:
// g/2 * (1 + tanh(sqrt(2/pi) * g * (1 + 0.044715 g^2))). tanh's argument is clamped where
// tanh is already 1.0 in f32, so that no driver's exp-based tanh overflows to NaN.
float gelu_tanh(float g) {
    float u = (g * g * 0.044715 + 1.0) * g * 0.7978845608028654;
    return (tanh(clamp(u, -15.0, 15.0)) + 1.0) * g * 0.5;
}

// The other modes: y is output row `row` of token tok (for gate|up the gate row, with its up
// row's value in `up`).
void store_value(uint tok, uint row, float y, float up) {
    if (MODE == MODE_STORE) {
        act[pc.out_off + tok * M + row] = y;
    } else if (MODE == MODE_RESID) {
        act[pc.out_off + tok * M + row] += y;
    } else if (MODE == MODE_GATEUP && GEGLU != 0) {
        act[pc.out_off + tok * M + row] = gelu_tanh(y) * up;
    } else if (MODE == MODE_GATEUP) {
        act[pc.out_off + tok * M + row] = y / (1.0 + exp(-y)) * up;
    } else {
        logits[pc.out_off + row] = y;  // out_off: a piece of the output matrix's first row
    }
}
