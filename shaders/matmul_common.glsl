// What every matrix product (matmul.comp, and through matmul_tiled.glsl matmul_tiled.comp and
// matmul_coopmat.comp) shares beyond common.glsl: the block size of the weight encoding, the
// weight rows a gate|up matrix stores, and the epilogues by MODE, one output value at a time,
// so that every product writes exactly the same numbers. Include after common.glsl.

const uint TPB = QTYPE == QT_F32 ? 8 : (QTYPE == QT_F16 ? 4 : (QTYPE == QT_Q8_0 ? 2 : 1));
const uint MROWS = MODE == MODE_GATEUP ? 2 * M : M;  // weight rows: gate rows, then up rows

// MODE_QKV: rows (row, row + 1) of token tok are one pair. RoPE on q and k (interleaved
// pairs, as engine/model/rope.py), then q to act, k and v into the arena's K/V planes.
void store_qkv_pair(uint tok, uint row, float e, float o) {
    uint pos = prm.pos0 + tok, slot = prm.n0 + tok;
    if (row < QD + KVD) {
        uint j = (row % HD) / 2;
        float c = vec[COS_OFF + pos * HALF + j], s = vec[SIN_OFF + pos * HALF + j];
        float ne = e * c - o * s;
        o = o * c + e * s;
        e = ne;
    }
    if (row < QD) {
        act[pc.out_off + tok * QD + row] = e;
        act[pc.out_off + tok * QD + row + 1] = o;
    } else if (row < QD + KVD) {
        uint k = (pc.layer * S + slot) * KVD + row - QD;
        kc[k] = e;
        kc[k + 1] = o;
    } else {
        uint k = (pc.layer * S + slot) * KVD + row - QD - KVD;
        vc[k] = e;
        vc[k + 1] = o;
    }
}

// The other modes: y is output row `row` of token tok (for gate|up the gate row, with its up
// row's value in `up`).
void store_value(uint tok, uint row, float y, float up) {
    if (MODE == MODE_STORE) {
        act[pc.out_off + tok * M + row] = y;
    } else if (MODE == MODE_RESID) {
        act[pc.out_off + tok * M + row] += y;
    } else if (MODE == MODE_GATEUP) {
        act[pc.out_off + tok * M + row] = y / (1.0 + exp(-y)) * up;
    } else {
        logits[pc.out_off + row] = y;  // out_off: a piece of the output matrix's first row
    }
}
