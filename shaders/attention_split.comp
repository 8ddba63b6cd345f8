#version 450
// Decode attention, split over the live slots ("flash-decoding"): workgroup (sp, g) attends
// the G = NH/NKV query heads of K/V head g over the sp-th run of slots (split.glsl), so a long
// context fills the GPU's cores instead of NKV of them. The decoded token sees every live
// slot, its own included: prm.N of them. A workgroup is SPLIT_SUBGROUPS subgroups (WG = that
// many times the subgroup size), each over its own part of the run; they share the run's max
// before any exponential and add up their sums and outputs in shared memory, so that to the
// fold and mass.comp the run is one, whatever the number of subgroups.
//
// Each split writes its probabilities unnormalised (relative to its own max) to the
// probability rows, and its max, sum and unnormalised output to `splits`. The last split of a
// K/V head to finish (an atomic counter says which) folds the partials into the output and
// writes the per-split mass factors mass.comp needs for exact salience. With one split (short
// contexts) the workgroup normalises directly, and its factor is its 1/sum.
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"
#include "split.glsl"

layout(local_size_x_id = 0) in;

layout(constant_id = 32) const uint SPLIT_SUBGROUPS = 1;

const uint G = NH / NKV;
const uint H4 = HD / 4;
const uint SGS = WG / SPLIT_SUBGROUPS;  // lanes per subgroup
// Outputs live in lanes across a head's HD/4 vec4s (DL of them) and, where the subgroup is
// wider than that, SG groups of lanes over alternate slots (or splits, in the fold), summed
// into group 0 through shared memory.
const uint DL = SGS < H4 ? SGS : H4;
const uint SG = SGS / DL;
const uint DPL = (H4 + DL - 1) / DL;  // vec4s per lane per head
const uint PU = 4;  // slots whose loads a lane keeps in flight
// The fold: splits whose outputs a lane loads at once (up to 63 of them wait on one
// workgroup per K/V head at long contexts), and split maxima per lane per head.
layout(constant_id = 29) const uint FOLD_LOADS = 4;
const uint KPL = (MAX_SPLITS + SGS - 1) / SGS;
const uint NSUB = SPLIT_SUBGROUPS;

// Per subgroup (each its own slice, synchronised by subgroup barriers only):
shared float tile[PV_TILE != 0 ? NSUB * G * SGS : 1];  // [NSUB, G, SGS] a tile's probabilities
shared vec4 red[SG > 1 ? NSUB * G * DPL * SGS : 1];     // [NSUB, SGS, G * DPL] groups' outputs
// Across the workgroup's subgroups: their maxima and sums [2, NSUB, G] and group 0's outputs
// [NSUB, G * DPL, DL].
shared float wg_ms[NSUB > 1 ? 2 * NSUB * G : 1];
shared vec4 wg_o[NSUB > 1 ? NSUB * G * DPL * DL : 1];
uint sub;  // this invocation's subgroup (a global: the helpers index their slices with it)

// This lane's outputs ([G, DPL] vec4s) and softmax sums ([G]). Globals, not parameters: passed
// to a function, arrays sized by specialization constants came back wrong (lavapipe, glslc).
vec4 o[G * DPL];
float sum[G];
float mx[G];  // the split's max score per head

// Adds the other slot groups' partial outputs into group 0's lanes (shared memory).
void sum_groups(uint grp, uint dl) {
    if (SG == 1) return;
    uint r0 = sub * SGS * G * DPL;
    [[unroll]] for (uint i = 0; i < G * DPL; i++) red[r0 + (grp * DL + dl) * G * DPL + i] = o[i];
    subgroupBarrier();
    if (grp == 0) {
        for (uint k = 1; k < SG; k++) {
            [[unroll]] for (uint i = 0; i < G * DPL; i++) o[i] += red[r0 + (k * DL + dl) * G * DPL + i];
        }
    }
    subgroupBarrier();  // `red` is reused by the next call
}

// Group 0's lanes write o / sum: vec4 dl + c * DL of each head j to act[out0 + j * HD ..].
void store_outputs(uint grp, uint dl, uint out0) {
    if (grp != 0) return;
    [[unroll]] for (uint c = 0; c < DPL; c++) {
        uint i = dl + c * DL;
        if (i >= H4) break;
        [[unroll]] for (uint j = 0; j < G; j++) {
            vec4 r = o[j * DPL + c] / sum[j];
            uint at = out0 + j * HD + 4 * i;
            act[at] = r.x;
            act[at + 1] = r.y;
            act[at + 2] = r.z;
            act[at + 3] = r.w;
        }
    }
}

// Probabilities and outputs, GPU form (PV_TILE): one tile of SGS slots at a time, each lane
// exponentiates the scores it wrote itself (no memory barrier), shares them through `tile`,
// then lanes across the output dimensions sum p * v over the tile. Few registers per lane and
// no cross-lane sums of whole heads; two barriers per tile.
void pv_tiled(uint lane, uint s0, uint s1, uint row0, uint kbase) {
    uint dl = lane % DL, grp = lane / DL, t0 = sub * G * SGS;
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
        // PU slots' values in flight per lane (the same order of sums as one at a time): a
        // loop of single loads waited out a memory round trip per slot (H200: most of a
        // layer's 17 us at 16 slots).
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

// The same, CPU form: each lane sums p * v over its own slots for whole heads and the
// subgroup adds them up once. No barrier: on lavapipe each costs a coroutine switch.
void pv_by_slot(uint lane, uint s0, uint s1, uint row0, uint kbase) {
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
    // Group 0's lanes keep their vec4s of the sums, as pv_tiled leaves them.
    uint dl = lane % DL, grp = lane / DL;
    [[unroll]] for (uint i = 0; i < G * H4; i++) {
        vec4 total = subgroupAdd(acc[i]);
        uint j = i / H4, d = i % H4;
        if (grp == 0 && d % DL == dl) o[j * DPL + d / DL] = total;
    }
}

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

    float scale = 1.0 / sqrt(float(HD));
    vec4 q[G * H4];  // [G, HD/4] scaled queries (the same in every lane)
    uint qbase = (pc.in_off + g * G * HD) / 4;
    [[unroll]] for (uint i = 0; i < G * H4; i++) q[i] = scale * texelFetch(ACTT, int(qbase + i));
    uint row0 = pc.p_row0 + g * G;  // probability row of head (g, 0)
    uint kbase = (pc.layer * S * KVD + g * HD) / 4;  // texel of slot 0, head g

    // Scores: lanes stride over the run's slots.
    [[unroll]] for (uint j = 0; j < G; j++) mx[j] = -1.0 / 0.0;
    for (uint s = s0 + lane; s < s1; s += SGS) {
        float sc[G];
        [[unroll]] for (uint j = 0; j < G; j++) sc[j] = 0.0;
        [[unroll]] for (uint i = 0; i < H4; i++) {
            vec4 k = texelFetch(KT, int(kbase + s * (KVD / 4) + i));
            [[unroll]] for (uint j = 0; j < G; j++) sc[j] += dot(q[j * H4 + i], k);
        }
        [[unroll]] for (uint j = 0; j < G; j++) {
            probs[(row0 + j) * S + s] = sc[j];
            mx[j] = max(mx[j], sc[j]);
        }
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

    uint dl = lane % DL, grp = lane / DL;
    [[unroll]] for (uint j = 0; j < G; j++) sum[j] = 0.0;
    [[unroll]] for (uint i = 0; i < G * DPL; i++) o[i] = vec4(0.0);
    if (PV_TILE != 0) {
        pv_tiled(lane, s0, s1, row0, kbase);
        sum_groups(grp, dl);
    } else {
        pv_by_slot(lane, s0, s1, row0, kbase);
    }
    [[unroll]] for (uint j = 0; j < G; j++) sum[j] = subgroupAdd(sum[j]);
    if (NSUB > 1) {  // subgroup 0 adds the others' sums and outputs; it alone goes on
        if (grp == 0) {
            [[unroll]] for (uint i = 0; i < G * DPL; i++) wg_o[(sub * G * DPL + i) * DL + dl] = o[i];
        }
        if (lane == 0) {
            [[unroll]] for (uint j = 0; j < G; j++) wg_ms[(NSUB + sub) * G + j] = sum[j];
        }
        barrier();
        if (sub != 0) return;
        for (uint k = 1; k < NSUB; k++) {
            if (grp == 0) {
                [[unroll]] for (uint i = 0; i < G * DPL; i++) o[i] += wg_o[(k * G * DPL + i) * DL + dl];
            }
            [[unroll]] for (uint j = 0; j < G; j++) sum[j] += wg_ms[(NSUB + k) * G + j];
        }
    }

    uint out0 = pc.out_off + g * G * HD;
    if (nsplit == 1) {
        store_outputs(grp, dl, out0);
        if (lane == 0) {
            [[unroll]] for (uint j = 0; j < G; j++) splits[SP_FAC + (row0 + j) * MAX_SPLITS] = 1.0 / sum[j];
        }
        return;
    }

    // This split's partials; then the last split of head g to finish folds them all.
    uint head0 = g * G;  // query head of (g, 0)
    if (grp == 0) {
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint i = dl + c * DL;
            if (i >= H4) break;
            [[unroll]] for (uint j = 0; j < G; j++) {
                vec4 r = o[j * DPL + c];
                uint at = SP_OUT + ((head0 + j) * MAX_SPLITS + sp) * HD + 4 * i;
                splits[at] = r.x;
                splits[at + 1] = r.y;
                splits[at + 2] = r.z;
                splits[at + 3] = r.w;
            }
        }
    }
    if (lane == 0) {
        [[unroll]] for (uint j = 0; j < G; j++) {
            splits[SP_MAX + (head0 + j) * MAX_SPLITS + sp] = mx[j];
            splits[SP_SUM + (head0 + j) * MAX_SPLITS + sp] = sum[j];
        }
    }
    memoryBarrierBuffer();  // release: the partials before the count
    subgroupBarrier();
    uint done = 0;
    if (lane == 0) done = atomicAdd(counters[g], 1u) + 1;
    done = subgroupMax(done);
    if (done != nsplit) return;
    memoryBarrierBuffer();  // acquire: the other splits' partials after the count
    if (lane == 0) atomicExchange(counters[g], 0u);  // ready for the next layer

    // Mass factors: every head's split maxima and sums loaded at once (lanes over splits, KPL
    // each), then per head the global max and 1/sum. Summed in the order a loop over k = lane,
    // lane + SGS, .. would (a split past the last adds exactly 0).
    float km[G * KPL], ks[G * KPL], fold_max[G], fold_inv[G];
    [[unroll]] for (uint j = 0; j < G; j++) {
        [[unroll]] for (uint q = 0; q < KPL; q++) {
            uint k = lane + q * SGS, at = (head0 + j) * MAX_SPLITS + min(k, nsplit - 1);
            km[j * KPL + q] = k < nsplit ? splits[SP_MAX + at] : -1.0 / 0.0;
            ks[j * KPL + q] = k < nsplit ? splits[SP_SUM + at] : 0.0;
        }
    }
    [[unroll]] for (uint j = 0; j < G; j++) {
        float m = -1.0 / 0.0;
        [[unroll]] for (uint q = 0; q < KPL; q++) m = max(m, km[j * KPL + q]);
        m = subgroupMax(m);
        float l = 0.0;
        [[unroll]] for (uint q = 0; q < KPL; q++) l += ks[j * KPL + q] * exp(km[j * KPL + q] - m);
        fold_max[j] = m;
        fold_inv[j] = 1.0 / subgroupAdd(l);
        [[unroll]] for (uint q = 0; q < KPL; q++) {
            uint k = lane + q * SGS;
            if (k < nsplit) {
                splits[SP_FAC + (row0 + j) * MAX_SPLITS + k] = exp(km[j * KPL + q] - m) * fold_inv[j];
            }
        }
    }
    // The output: lanes across dimensions and groups over splits, as in the tile loop, sum the
    // splits' outputs times their factors, recomputed from the maxima (the value just written
    // to SP_FAC, without waiting for those writes), FOLD_LOADS splits' loads in flight.
    [[unroll]] for (uint i = 0; i < G * DPL; i++) o[i] = vec4(0.0);
    for (uint k0 = grp; k0 < nsplit && grp < SG; k0 += FOLD_LOADS * SG) {
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint i = dl + c * DL;
            if (i >= H4) break;
            [[unroll]] for (uint j = 0; j < G; j++) {
                vec4 r[FOLD_LOADS];
                float f[FOLD_LOADS];
                [[unroll]] for (uint u = 0; u < FOLD_LOADS; u++) {
                    uint k = min(k0 + u * SG, nsplit - 1);  // past the last: loaded, not used
                    uint at = SP_OUT + ((head0 + j) * MAX_SPLITS + k) * HD + 4 * i;
                    r[u] = vec4(splits[at], splits[at + 1], splits[at + 2], splits[at + 3]);
                    f[u] = splits[SP_MAX + (head0 + j) * MAX_SPLITS + k];
                }
                [[unroll]] for (uint u = 0; u < FOLD_LOADS; u++) {
                    if (k0 + u * SG >= nsplit) break;
                    o[j * DPL + c] += r[u] * (exp(f[u] - fold_max[j]) * fold_inv[j]);
                }
            }
        }
    }
    sum_groups(grp, dl);
    [[unroll]] for (uint j = 0; j < G; j++) sum[j] = 1.0;
    store_outputs(grp, dl, out0);
}
