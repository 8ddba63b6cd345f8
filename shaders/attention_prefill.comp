#version 450
// Causal attention of a prefill chunk in tiles: workgroup (h, qt) is query head h for the
// chunk's tokens [qt*BQ, qt*BQ + BQ); token t sees slots [0, n0 + t]. Key and value tiles of
// BS slots are staged in shared memory once and used by all BQ queries (attention.comp reads
// every slot again for every token).
//
// Two passes keep the probabilities exact for salience, as attention.comp does: pass 1 writes
// the scores and finds each row's maximum; pass 2 rewrites them as p = exp(score - max), sums
// them and accumulates p * v. The probability rows (unnormalised) and their 1/sum land where
// attention.comp puts them, so mass.comp reads them unchanged.
//
// Split over slots (PREFILL_SPLITS > 1, split.glsl): workgroup (h, qt, run) takes one run of
// the slots only, so a long context spreads over more workgroups than heads x tiles. Each run
// keeps its probabilities relative to its own row maxima and writes its maxima, sums and
// unnormalised outputs to `splits`; the last run of the tile to finish (an atomic counter, as
// in attention_split.comp) folds them into the outputs and the mass factors PF_FAC that
// mass.comp multiplies in, so salience stays exact. A tile with one run writes as before.
// WG must be a multiple of BS, and BQ * BS a multiple of WG.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#include "split.glsl"

layout(local_size_x_id = 0) in;

const uint BQ = T;              // queries per workgroup
const uint BS = PF_TILE;        // slots per key/value tile
const uint G = NH / NKV;        // query heads per K/V head
const uint H4 = HD / 4;
const uint KS = H4 + 1;         // vec4 stride of a staged slot (+1: subgroups read off the banks)
const uint RPT = BQ * BS / WG;  // score rows per invocation
const uint RSTEP = WG / BS;     // rows between an invocation's score rows
const uint OPT = (BQ * H4 + WG - 1) / WG;  // output vec4s per invocation

shared vec4 q_sh[BQ * H4];   // [BQ, HD/4] scaled queries
shared vec4 kv_sh[BS * KS];  // [BS, HD/4 + 1] the key tile, then the value tile
shared float p_sh[BQ * BS];  // [BQ, BS] partial maxima, the tile's probabilities, partial sums
shared float row_sh[BQ];     // [BQ] row maxima, then row sums

// The next tile's keys or values, fetched into registers while this tile is used: each tile
// otherwise waited out its loads' round trip before any work (H200: most of a 2048-token
// prompt's attention). Invocation lid holds vec4s lid + k * WG of the [BS, HD/4] tile.
const uint SPT = (BS * H4 + WG - 1) / WG;
vec4 tile_next[SPT];

// Fetch slots [s0, s0 + BS) of this K/V head's keys (KT) or values (VT); zero past len.
void fetch_tile(bool keys, uint s0, uint len, uint base) {
    [[unroll]] for (uint k = 0; k < SPT; k++) {
        uint i = gl_LocalInvocationID.x + k * WG, slot = s0 + i / H4;
        vec4 x = vec4(0.0);
        if (i < BS * H4 && slot < len) {
            int at = int(base + slot * (KVD / 4) + i % H4);
            x = keys ? texelFetch(KT, at) : texelFetch(VT, at);
        }
        tile_next[k] = x;
    }
}

// The fetched tile into kv_sh.
void stage_fetched() {
    [[unroll]] for (uint k = 0; k < SPT; k++) {
        uint i = gl_LocalInvocationID.x + k * WG;
        if (i < BS * H4) kv_sh[(i / H4) * KS + i % H4] = tile_next[k];
    }
}

// row_sh[r] = op over p_sh[r, :], where each invocation first put its own value per row.
void reduce_rows(bool is_max) {
    barrier();
    for (uint r = gl_LocalInvocationID.x; r < BQ; r += WG) {
        float acc = p_sh[r * BS];
        for (uint s = 1; s < BS; s++) acc = is_max ? max(acc, p_sh[r * BS + s]) : acc + p_sh[r * BS + s];
        row_sh[r] = acc;
    }
    barrier();
}

// Output vec4 i of the tile (row i / H4, columns 4 * (i % H4) ..) for its token t.
void store_row(uint i, uint t, vec4 y) {
    uint at = pc.out_off + t * QD + gl_WorkGroupID.x * HD + 4 * (i % H4);
    act[at] = y.x;
    act[at + 1] = y.y;
    act[at + 2] = y.z;
    act[at + 3] = y.w;
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BQ, C = prm.C, n0 = prm.n0;
    if (t0 >= C) return;  // the whole workgroup leaves together
    uint len = n0 + min(t0 + BQ, C);  // slots the tile's last token sees
    uint run = gl_WorkGroupID.z, run_len = prefill_run_len(prm.N);
    uint runs = (len + run_len - 1) / run_len;  // this tile's runs (fewer for early tiles)
    if (run >= runs) return;
    uint r0 = run * run_len, r1 = min(len, r0 + run_len);  // this run's slots
    uint kvbase = (pc.layer * S * KVD + (h / G) * HD) / 4;  // texel of slot 0, this K/V head
    float scale = query_scale();
    for (uint i = lid; i < BQ * H4; i += WG) {
        uint t = min(t0 + i / H4, C - 1);
        q_sh[i] = scale * texelFetch(ACTT, int((pc.in_off + t * QD + h * HD) / 4 + i % H4));
    }

    // Invocation lid owns score column s = lid % BS of rows r_j = lid / BS + j * RSTEP.
    uint s_own = lid % BS, r_own = lid / BS;
    float mx[RPT];
    [[unroll]] for (uint j = 0; j < RPT; j++) mx[j] = -1.0 / 0.0;
    fetch_tile(true, r0, len, kvbase);
    for (uint s0 = r0; s0 < r1; s0 += BS) {
        barrier();  // the previous tile is consumed (and q_sh is written, the first time)
        stage_fetched();
        if (s0 + BS < r1) fetch_tile(true, s0 + BS, len, kvbase);
        barrier();
        uint slot = s0 + s_own;
        float sc[RPT];  // every row's score, masked below: each key vec4 is loaded once
        [[unroll]] for (uint j = 0; j < RPT; j++) sc[j] = 0.0;
        for (uint d = 0; d < H4; d++) {
            vec4 key = kv_sh[s_own * KS + d];
            [[unroll]] for (uint j = 0; j < RPT; j++) sc[j] += dot(q_sh[(r_own + j * RSTEP) * H4 + d], key);
        }
        [[unroll]] for (uint j = 0; j < RPT; j++) {
            uint t = t0 + r_own + j * RSTEP;
            if (t >= C || slot > n0 + t) continue;
            probs[(pc.p_row0 + t * NH + h) * S + slot] = sc[j];
            mx[j] = max(mx[j], sc[j]);
        }
    }
    [[unroll]] for (uint j = 0; j < RPT; j++) p_sh[(r_own + j * RSTEP) * BS + s_own] = mx[j];
    reduce_rows(true);
    [[unroll]] for (uint j = 0; j < RPT; j++) mx[j] = row_sh[r_own + j * RSTEP];
    uint row0 = pc.p_row0 + t0 * NH + h;  // probability row of the tile's first token
    if (runs > 1) {
        for (uint r = lid; r < BQ && t0 + r < C; r += WG) {
            splits[PF_MAX + (row0 + r * NH) * PREFILL_SPLITS + run] = row_sh[r];
        }
    }

    // Pass 2. Each invocation rereads only the scores it wrote itself: no memory barrier.
    float sum[RPT];
    [[unroll]] for (uint j = 0; j < RPT; j++) sum[j] = 0.0;
    vec4 o[OPT];  // output vec4 i = lid + k * WG: row i / H4, columns 4 * (i % H4) ..
    [[unroll]] for (uint k = 0; k < OPT; k++) o[k] = vec4(0.0);
    fetch_tile(false, r0, len, kvbase);
    for (uint s0 = r0; s0 < r1; s0 += BS) {
        barrier();  // the previous tile is consumed
        stage_fetched();
        if (s0 + BS < r1) fetch_tile(false, s0 + BS, len, kvbase);
        uint slot = s0 + s_own;
        [[unroll]] for (uint j = 0; j < RPT; j++) {
            uint r = r_own + j * RSTEP, t = t0 + r;
            float p = 0.0;
            if (t < C && slot <= n0 + t) {
                uint at = (pc.p_row0 + t * NH + h) * S + slot;
                p = exp(probs[at] - mx[j]);
                probs[at] = p;
                sum[j] += p;
            }
            p_sh[r * BS + s_own] = p;
        }
        barrier();
        // Slots outer: where WG is a multiple of H4 (heads of 64 or 128 dimensions) an
        // invocation's outputs share one column, i % H4 folds to lid % H4 once specialized, and
        // each value vec4 is loaded once for them all. Rows past the tile read p_sh's last row
        // and are never stored.
        for (uint s = 0; s < BS; s++) {
            [[unroll]] for (uint k = 0; k < OPT; k++) {
                uint i = lid + k * WG;
                o[k] += p_sh[min(i / H4, BQ - 1) * BS + s] * kv_sh[s * KS + i % H4];
            }
        }
    }
    barrier();  // p_sh is free again
    [[unroll]] for (uint j = 0; j < RPT; j++) p_sh[(r_own + j * RSTEP) * BS + s_own] = sum[j];
    reduce_rows(false);

    if (runs == 1) {
        [[unroll]] for (uint k = 0; k < OPT; k++) {
            uint i = lid + k * WG, t = t0 + i / H4;
            if (i >= BQ * H4 || t >= C) break;
            store_row(i, t, o[k] / row_sh[i / H4]);
        }
        for (uint r = lid; r < BQ && t0 + r < C; r += WG) {
            uint row = row0 + r * NH;
            probs[PROWS * S + row] = 1.0 / row_sh[r];
            if (PREFILL_SPLITS > 1) splits[PF_FAC + row * PREFILL_SPLITS] = 1.0 / row_sh[r];
        }
        return;
    }

    // This run's partials; then the last run of the tile to finish folds them all.
    [[unroll]] for (uint k = 0; k < OPT; k++) {
        uint i = lid + k * WG, r = i / H4, t = t0 + r;
        if (i >= BQ * H4 || t >= C) break;
        uint at = PF_OUT + ((row0 + r * NH) * PREFILL_SPLITS + run) * HD + 4 * (i % H4);
        splits[at] = o[k].x;
        splits[at + 1] = o[k].y;
        splits[at + 2] = o[k].z;
        splits[at + 3] = o[k].w;
    }
    for (uint r = lid; r < BQ && t0 + r < C; r += WG) {
        splits[PF_SUM + (row0 + r * NH) * PREFILL_SPLITS + run] = row_sh[r];
    }
    if (!last_to_finish(h * gl_NumWorkGroups.y + gl_WorkGroupID.y, runs)) return;

    // Mass factors, one invocation per row; then outputs as the runs' outputs times them.
    for (uint r = lid; r < BQ && t0 + r < C; r += WG) {
        uint at = (row0 + r * NH) * PREFILL_SPLITS;
        float m = -1.0 / 0.0;
        for (uint k = 0; k < runs; k++) m = max(m, splits[PF_MAX + at + k]);
        float l = 0.0;  // a run no token of the row sees has sum 0 and max -inf
        for (uint k = 0; k < runs; k++) l += splits[PF_SUM + at + k] * exp(splits[PF_MAX + at + k] - m);
        for (uint k = 0; k < runs; k++) splits[PF_FAC + at + k] = exp(splits[PF_MAX + at + k] - m) / l;
    }
    memoryBarrierBuffer();
    barrier();
    [[unroll]] for (uint k = 0; k < OPT; k++) {
        uint i = lid + k * WG, r = i / H4, t = t0 + r;
        if (i >= BQ * H4 || t >= C) break;
        uint row = row0 + r * NH;
        vec4 y = vec4(0.0);
        for (uint u = 0; u < runs; u++) {
            uint at = PF_OUT + (row * PREFILL_SPLITS + u) * HD + 4 * (i % H4);
            y += vec4(splits[at], splits[at + 1], splits[at + 2], splits[at + 3])
                 * splits[PF_FAC + row * PREFILL_SPLITS + u];
        }
        store_row(i, t, y);
    }
}
