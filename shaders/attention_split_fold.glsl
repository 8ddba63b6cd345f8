// attention_split.comp's end of a run: its totals per query head, its partials, and the fold
// of every run's partials by the last run of a query head to finish. Included by that shader
// only (it uses its globals and helpers).

// Loads runs k0, k0 + SG, .. (FOLD_LOADS of them) of query head `head`: their maxima and this
// lane's vec4s of their outputs.
void load_fold_batch(uint head, uint dl, uint k0, uint nsplit) {
    [[unroll]] for (uint u = 0; u < FOLD_LOADS; u++) {
        uint k = min(k0 + u * SG, nsplit - 1);  // past the last: loaded, not used
        fold_m[u] = splits[SP_MAX + head * MAX_SPLITS + k];
        [[unroll]] for (uint c = 0; c < DPL; c++) {
            uint at = SP_OUT + (head * MAX_SPLITS + k) * HD + 4 * min(dl + c * DL, H4 - 1);
            fold_o[u * DPL + c] = vec4(splits[at], splits[at + 1], splits[at + 2], splits[at + 3]);
        }
    }
}

// Folds query head `head`'s runs into its output (at act[at0]). The runs' maxima and sums
// (lanes over runs, KPL each) and the first batch of outputs (lanes across dimensions, groups
// over runs) are loaded together, one round trip; then the global max and 1/sum, the mass
// factors exp(run max - max) / sum to SP_FAC row `row`, and the outputs times their factors,
// recomputed from the maxima rather than read back. The sums run in the order a loop over
// k = lane, lane + SGS, .. would (a run past the last adds exactly 0).
void fold_head(uint lane, uint dl, uint grp, uint head, uint row, uint nsplit, uint at0) {
    [[unroll]] for (uint q = 0; q < KPL; q++) {
        uint k = lane + q * SGS, at = head * MAX_SPLITS + min(k, nsplit - 1);
        km[q] = k < nsplit ? splits[SP_MAX + at] : -1.0 / 0.0;
        ks[q] = k < nsplit ? splits[SP_SUM + at] : 0.0;
    }
    load_fold_batch(head, dl, grp, nsplit);
    float m = -1.0 / 0.0;
    [[unroll]] for (uint q = 0; q < KPL; q++) m = max(m, km[q]);
    m = subgroupMax(m);
    float l = 0.0;
    [[unroll]] for (uint q = 0; q < KPL; q++) l += ks[q] * exp(km[q] - m);
    float inv = 1.0 / subgroupAdd(l);
    [[unroll]] for (uint q = 0; q < KPL; q++) {
        uint k = lane + q * SGS;
        if (k < nsplit) splits[SP_FAC + row * MAX_SPLITS + k] = exp(km[q] - m) * inv;
    }
    [[unroll]] for (uint c = 0; c < DPL; c++) o[c] = vec4(0.0);
    for (uint k0 = grp; k0 < nsplit && grp < SG; k0 += FOLD_LOADS * SG) {
        if (k0 != grp) load_fold_batch(head, dl, k0, nsplit);
        [[unroll]] for (uint u = 0; u < FOLD_LOADS; u++) {
            if (k0 + u * SG >= nsplit) break;
            float f = exp(fold_m[u] - m) * inv;
            [[unroll]] for (uint c = 0; c < DPL; c++) o[c] += fold_o[u * DPL + c] * f;
        }
    }
    sum_groups(dl, grp, DPL);
    store_head(grp, dl, at0, 1.0);
}

// The run's totals per query head: every subgroup's sums and group 0's outputs meet in shared
// memory, and subgroup j (j + NSUB, ..) takes query head j. With one run it stores the
// normalised output and the mass factor 1/sum; otherwise the head's partials, and the last
// run of the head to finish (its atomic counter says which) folds them all.
void finish_run(uint lane, uint dl, uint grp, uint g, uint sp, uint nsplit, uint row0) {
    if (lane == 0) {
        [[unroll]] for (uint j = 0; j < G; j++) wg_ms[(NSUB + sub) * G + j] = sum[j];
    }
    if (grp == 0) {
        [[unroll]] for (uint i = 0; i < G * DPL; i++) wg_o[(sub * G * DPL + i) * DL + dl] = o[i];
    }
    if (NSUB > 1) {
        barrier();
    } else {
        subgroupBarrier();
    }
    for (uint j = sub; j < G; j += NSUB) {
        uint head = g * G + j, at0 = pc.out_off + head * HD;
        float total = 0.0;
        [[unroll]] for (uint c = 0; c < DPL; c++) o[c] = vec4(0.0);
        for (uint k = 0; k < NSUB; k++) {
            total += wg_ms[(NSUB + k) * G + j];
            [[unroll]] for (uint c = 0; c < DPL; c++) o[c] += wg_o[(k * G * DPL + j * DPL + c) * DL + dl];
        }
        if (nsplit == 1) {
            store_head(grp, dl, at0, total);
            if (lane == 0) splits[SP_FAC + (row0 + j) * MAX_SPLITS] = 1.0 / total;
            continue;
        }
        if (grp == 0) {
            [[unroll]] for (uint c = 0; c < DPL; c++) {
                uint i = dl + c * DL;
                if (i >= H4) break;
                uint at = SP_OUT + (head * MAX_SPLITS + sp) * HD + 4 * i;
                splits[at] = o[c].x;
                splits[at + 1] = o[c].y;
                splits[at + 2] = o[c].z;
                splits[at + 3] = o[c].w;
            }
        }
        if (lane == 0) {
            splits[SP_MAX + head * MAX_SPLITS + sp] = mx[j];
            splits[SP_SUM + head * MAX_SPLITS + sp] = total;
        }
        memoryBarrierBuffer();  // release: the partials before the count
        subgroupBarrier();
        uint done = 0;
        if (lane == 0) done = atomicAdd(counters[head], 1u) + 1;
        if (subgroupMax(done) != nsplit) continue;
        memoryBarrierBuffer();  // acquire: the other runs' partials after the count
        if (lane == 0) atomicExchange(counters[head], 0u);  // ready for the next layer
        fold_head(lane, dl, grp, head, row0 + j, nsplit, at0);
    }
}
