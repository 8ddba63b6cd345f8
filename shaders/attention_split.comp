#version 450
// Decode attention, split over the live slots ("flash-decoding"): workgroup (sp, g) attends
// the G = NH/NKV query heads of K/V head g over the sp-th run of slots (split.glsl), so a long
// context fills the GPU's cores instead of NKV of them. The decoded token sees every live
// slot, its own included: prm.N of them. A workgroup is SPLIT_SUBGROUPS subgroups (WG = that
// many times the subgroup size), each over its own part of the run; they share the run's max
// before any exponential and add up their sums and outputs in shared memory, so that to the
// fold and mass.comp the run is one, whatever the number of subgroups.
//
// Each run writes its probabilities unnormalised (relative to its own max) to the probability
// rows, and per query head its max, sum and unnormalised output to `splits`. The last run of
// a query head to finish (an atomic counter per head says which) folds the partials into the
// output and writes the per-run mass factors mass.comp needs for exact salience. With one run
// (short contexts) the workgroup normalises directly, and its factor is its 1/sum.
//
// Decode is a chain of dependent memory round trips, so the GPU form cuts their number: where
// a subgroup's part fits one tile (TILE slots), the values are loaded before the scores
// (their loads overlap the keys'), the scores stay in registers, and the subgroups fold one
// query head each, with the outputs' loads in flight beside the maxima and sums.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
#include "common.glsl"
#include "split.glsl"

layout(local_size_x_id = 0) in;

layout(constant_id = 32) const uint SPLIT_SUBGROUPS = 1;
// The fold: runs whose outputs a lane loads at once (up to 63 of them wait on the last run
// of a head at long contexts).
layout(constant_id = 29) const uint FOLD_LOADS = 4;
// The one-tile form: slots whose values a lane loads before the scores.
layout(constant_id = 33) const uint VALUE_LOADS = 8;

const uint G = NH / NKV;
const uint H4 = HD / 4;
const uint SGS = WG / SPLIT_SUBGROUPS;  // lanes per subgroup
const uint NSUB = SPLIT_SUBGROUPS;
// Outputs live in lanes across a head's HD/4 vec4s (DL of them) and, where the subgroup is
// wider than that, SG groups of lanes over alternate slots (or runs, in the fold), summed
// into group 0 by shuffles.
const uint DL = SGS < H4 ? SGS : H4;
const uint SG = SGS / DL;
const uint DPL = (H4 + DL - 1) / DL;  // vec4s per lane per head
const uint PU = 4;  // slots whose loads a lane keeps in flight (pv_tiled)
const uint KPL = (MAX_SPLITS + SGS - 1) / SGS;  // runs' maxima per lane (the fold)
// One tile: VL slots per lane group, TILE per subgroup; LPS lanes share a slot's score, each
// over QPL of a head's vec4s (fewer query registers a lane), summed by shuffles.
const uint VL = VALUE_LOADS < DL ? VALUE_LOADS : DL;
const uint TILE = VL * SG;
const uint LPS = H4 % (SGS / TILE) == 0 ? SGS / TILE : 1;
const uint QPL = H4 / LPS;

shared float tile[PV_TILE != 0 ? NSUB * G * SGS : 1];  // [NSUB, G, SGS] pv_tiled's probabilities
// Every subgroup's maxima and sums [2, NSUB, G] and group 0's outputs [NSUB, G * DPL, DL].
shared float wg_ms[2 * NSUB * G];
shared vec4 wg_o[NSUB * G * DPL * DL];
uint sub;  // this invocation's subgroup (a global: the helpers index their slices with it)

// Globals, not parameters: passed to a function, arrays sized by specialization constants
// came back wrong (lavapipe, glslc).
vec4 o[G * DPL];     // this lane's outputs [G, DPL] (in the fold and the totals: one head's)
float sum[G];        // softmax sums
float mx[G];         // the run's max score per head
float sc[G];         // one tile: the score of slot s0 + lane (lanes under TILE)
vec4 vals[VL * DPL]; // one tile: [VL, DPL] values of slots s0 + grp + k * SG
vec4 fold_o[FOLD_LOADS * DPL];  // the fold: a batch of runs' outputs [FOLD_LOADS, DPL]
float fold_m[FOLD_LOADS];       // and their maxima
float km[KPL], ks[KPL];         // runs lane + q * SGS's maxima and sums

// Adds the other lane groups' o[0, count) into group 0's lanes.
void sum_groups(uint dl, uint grp, uint count) {
    [[unroll]] for (uint k = 1; k < SG; k++) {
        [[unroll]] for (uint i = 0; i < count; i++) {
            vec4 other = subgroupShuffle(o[i], dl + k * DL);
            if (grp == 0) o[i] += other;
        }
    }
}

// Group 0's lanes write o[c] / div (one head's vec4s dl + c * DL) at act[at0 + 4 * i].
void store_head(uint grp, uint dl, uint at0, float div) {
    if (grp != 0) return;
    [[unroll]] for (uint c = 0; c < DPL; c++) {
        uint i = dl + c * DL;
        if (i >= H4) break;
        vec4 r = o[c] / div;
        act[at0 + 4 * i] = r.x;
        act[at0 + 4 * i + 1] = r.y;
        act[at0 + 4 * i + 2] = r.z;
        act[at0 + 4 * i + 3] = r.w;
    }
}

// ---- scores: this subgroup's part [s0, s1) of the run; mx = its max per head -------------------

// General form: lanes stride over the slots, each a whole slot; raw scores to the probability
// rows, where the p * v pass reads them back.
void scores_strided(uint lane, uint s0, uint s1, uint qbase, uint kbase, uint row0) {
    float scale = query_scale();
    vec4 q[G * H4];  // [G, HD/4] scaled queries (the same in every lane)
    [[unroll]] for (uint i = 0; i < G * H4; i++) q[i] = scale * texelFetch(ACTT, int(qbase + i));
    [[unroll]] for (uint j = 0; j < G; j++) mx[j] = -1.0 / 0.0;
    for (uint s = s0 + lane; s < s1; s += SGS) {
        float dots[G];
        [[unroll]] for (uint j = 0; j < G; j++) dots[j] = 0.0;
        [[unroll]] for (uint i = 0; i < H4; i++) {
            vec4 k = texelFetch(KT, int(kbase + s * (KVD / 4) + i));
            [[unroll]] for (uint j = 0; j < G; j++) dots[j] += dot(q[j * H4 + i], k);
        }
        [[unroll]] for (uint j = 0; j < G; j++) {
            probs[(row0 + j) * S + s] = dots[j];
            mx[j] = max(mx[j], dots[j]);
        }
    }
}

// One tile: lane t + h * TILE takes vec4s [h * QPL, (h + 1) * QPL) of slot s0 + t; the score
// stays in lane t's registers (sc). `last` is a live slot of the run, loaded where the part
// is shorter than the tile (or empty) and not used.
void scores_one_tile(uint lane, uint s0, uint s1, uint last, uint qbase, uint kbase) {
    uint t = lane % TILE, h = min(lane / TILE, LPS - 1);
    uint s = min(s0 + t, last);
    float scale = query_scale();
    vec4 q[G * QPL];
    [[unroll]] for (uint j = 0; j < G; j++) {
        [[unroll]] for (uint i = 0; i < QPL; i++) {
            q[j * QPL + i] = scale * texelFetch(ACTT, int(qbase + j * H4 + h * QPL + i));
        }
    }
    float dots[G];
    [[unroll]] for (uint j = 0; j < G; j++) dots[j] = 0.0;
    [[unroll]] for (uint i = 0; i < QPL; i++) {
        vec4 k = texelFetch(KT, int(kbase + s * (KVD / 4) + h * QPL + i));
        [[unroll]] for (uint j = 0; j < G; j++) dots[j] += dot(q[j * QPL + i], k);
    }
    bool mine = lane < TILE && s0 + lane < s1;
    [[unroll]] for (uint j = 0; j < G; j++) {
        float total = dots[j];
        [[unroll]] for (uint x = 1; x < LPS; x++) total += subgroupShuffle(dots[j], t + x * TILE);
        sc[j] = total;
        mx[j] = mine ? total : -1.0 / 0.0;
    }
}

// One tile's values, lanes across dimensions (dl) and groups over alternate slots (grp).
void load_values(uint dl, uint grp, uint s0, uint last, uint kbase) {
    [[unroll]] for (uint k = 0; k < VL; k++) {
        uint s = min(s0 + grp + k * SG, last);
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint i = min(dl + c * DL, H4 - 1);
            vals[k * DPL + c] = texelFetch(VT, int(kbase + s * (KVD / 4) + i));
        }
    }
}

// ---- probabilities and p * v: sum and o (group 0's lanes, once sum_groups has run) -------------

// One tile: the score's lane exponentiates it and stores the probability; every lane takes
// the probabilities of its group's slots by shuffles and multiplies the values it loaded.
void pv_one_tile(uint lane, uint dl, uint grp, uint s0, uint s1, uint row0) {
    bool mine = lane < TILE && s0 + lane < s1;
    float p[G];
    [[unroll]] for (uint j = 0; j < G; j++) {
        p[j] = mine ? exp(sc[j] - mx[j]) : 0.0;
        if (mine) probs[(row0 + j) * S + s0 + lane] = p[j];
        sum[j] += p[j];
    }
    [[unroll]] for (uint k = 0; k < VL; k++) {
        uint u = min(grp + k * SG, SGS - 1);  // a slot past the part: its lane's p is 0
        [[unroll]] for (uint j = 0; j < G; j++) {
            float pu = subgroupShuffle(p[j], u);
            [[unroll]] for (uint c = 0; c < DPL; c++) o[j * DPL + c] += pu * vals[k * DPL + c];
        }
    }
}

// GPU form over several tiles of SGS slots: each lane exponentiates the scores it wrote
// itself (no memory barrier), shares them through `tile`, then lanes across the output
// dimensions sum p * v over the tile.
void pv_tiled(uint lane, uint dl, uint grp, uint s0, uint s1, uint row0, uint kbase) {
    uint t0 = sub * G * SGS;
    for (uint base = s0; base < s1; base += SGS) {
        uint s = base + lane;
        [[unroll]] for (uint j = 0; j < G; j++) {
            float p = 0.0;
            if (s < s1) {
                p = exp(probs[(row0 + j) * S + s] - mx[j]);
                probs[(row0 + j) * S + s] = p;
            }
            sum[j] += p;
            tile[t0 + j * SGS + lane] = p;
        }
        subgroupBarrier();
        uint count = min(SGS, s1 - base);
        // PU slots' values in flight per lane (the same order of sums as one at a time).
        for (uint u0 = grp; u0 < count && grp < SG; u0 += PU * SG) {
            [[unroll]] for (uint c = 0; c < DPL; c++) {
                uint i = dl + c * DL;
                if (i >= H4) break;
                vec4 v[PU];
                [[unroll]] for (uint k = 0; k < PU; k++) {
                    uint u = min(u0 + k * SG, count - 1);  // past the tile: loaded, not used
                    v[k] = texelFetch(VT, int(kbase + (base + u) * (KVD / 4) + i));
                }
                [[unroll]] for (uint k = 0; k < PU; k++) {
                    uint u = u0 + k * SG;
                    if (u >= count) break;
                    [[unroll]] for (uint j = 0; j < G; j++) o[j * DPL + c] += tile[t0 + j * SGS + u] * v[k];
                }
            }
        }
        subgroupBarrier();  // the next tile overwrites `tile`
    }
}

// CPU form: each lane sums p * v over its own slots for whole heads and the subgroup adds
// them up once. No barrier: on lavapipe each costs a coroutine switch.
void pv_by_slot(uint lane, uint dl, uint grp, uint s0, uint s1, uint row0, uint kbase) {
    vec4 acc[G * H4];
    [[unroll]] for (uint i = 0; i < G * H4; i++) acc[i] = vec4(0.0);
    for (uint s = s0 + lane; s < s1; s += SGS) {
        float p[G];
        [[unroll]] for (uint j = 0; j < G; j++) {
            p[j] = exp(probs[(row0 + j) * S + s] - mx[j]);
            probs[(row0 + j) * S + s] = p[j];
            sum[j] += p[j];
        }
        [[unroll]] for (uint i = 0; i < H4; i++) {
            vec4 v = texelFetch(VT, int(kbase + s * (KVD / 4) + i));
            [[unroll]] for (uint j = 0; j < G; j++) acc[j * H4 + i] += p[j] * v;
        }
    }
    // Group 0's lanes keep their vec4s of the sums, as the GPU forms leave them.
    [[unroll]] for (uint i = 0; i < G * H4; i++) {
        vec4 total = subgroupAdd(acc[i]);
        uint j = i / H4, d = i % H4;
        if (grp == 0 && d % DL == dl) o[j * DPL + d / DL] = total;
    }
}

#include "attention_split_fold.glsl"

void main() {
    uint lane = gl_SubgroupInvocationID;
    sub = gl_SubgroupID;
    uint sp = gl_WorkGroupID.x, g = gl_WorkGroupID.y;
    uint n = prm.N;
    uint len = split_len(n), nsplit = split_count(n);
    if (sp >= nsplit) return;  // the whole workgroup leaves together
    // The run [r0, r1), and this subgroup's part of it [s0, s1) (empty past the run's end).
    uint r0 = sp * len, r1 = min(n, r0 + len), part = (len + NSUB - 1) / NSUB;
    uint s0 = min(r1, r0 + sub * part), s1 = min(r1, s0 + part);
    uint qbase = (pc.in_off + g * G * HD) / 4;
    uint row0 = pc.p_row0 + g * G;  // probability row of head (g, 0)
    uint kbase = (pc.layer * S * KVD + g * HD) / 4;  // texel of slot 0, head g
    uint dl = lane % DL, grp = lane / DL;
    bool one_tile = PV_TILE != 0 && part <= TILE;  // the same in every subgroup of the run

    if (one_tile) {
        load_values(dl, grp, s0, r1 - 1, kbase);  // first: in flight beside the keys' loads
        scores_one_tile(lane, s0, s1, r1 - 1, qbase, kbase);
    } else {
        scores_strided(lane, s0, s1, qbase, kbase, row0);
    }
    [[unroll]] for (uint j = 0; j < G; j++) mx[j] = subgroupMax(mx[j]);
    if (NSUB > 1) {  // the run's max: every subgroup exponentiates against the same one
        if (lane == 0) {
            [[unroll]] for (uint j = 0; j < G; j++) wg_ms[sub * G + j] = mx[j];
        }
        barrier();
        [[unroll]] for (uint j = 0; j < G; j++) {
            for (uint k = 0; k < NSUB; k++) mx[j] = max(mx[j], wg_ms[k * G + j]);
        }
    }

    [[unroll]] for (uint j = 0; j < G; j++) sum[j] = 0.0;
    [[unroll]] for (uint i = 0; i < G * DPL; i++) o[i] = vec4(0.0);
    if (one_tile) {
        pv_one_tile(lane, dl, grp, s0, s1, row0);
    } else if (PV_TILE != 0) {
        pv_tiled(lane, dl, grp, s0, s1, row0, kbase);
    } else {
        pv_by_slot(lane, dl, grp, s0, s1, row0, kbase);
    }
    if (PV_TILE != 0) sum_groups(dl, grp, G * DPL);
    [[unroll]] for (uint j = 0; j < G; j++) sum[j] = subgroupAdd(sum[j]);
    finish_run(lane, dl, grp, g, sp, nsplit, row0);
}
