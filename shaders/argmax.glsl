// Greedy sampling support: the index of the largest logit (the first one on ties, as
// np.argmax) into outw[0], its bits into outw[1], so a greedy decode reads 8 bytes instead of
// the logits row. ARGMAX_GROUPS workgroups of any size each take a contiguous range of the
// vocabulary: lanes stride over it, subgroups reduce with subgroup arithmetic, and (for several
// subgroups) meet in shared memory. With several workgroups each leaves its range's best in
// `counters` and the last to finish (an atomic count, as split attention's fold) picks among
// them: one workgroup alone waits out a dozen rounds of loads over 49,152 logits.
// Call from uniform control flow with `group` < ARGMAX_GROUPS; needs
// GL_KHR_shader_subgroup_arithmetic and split.glsl's `counters`.

layout(constant_id = 30) const uint ARGMAX_GROUPS = 1;
layout(constant_id = 31) const uint ARGMAX_BASE = 0;  // counters: [count, (bits, index) x groups]

shared float am_best[WG];  // [subgroups] (WG bounds their count)
shared uint am_at[WG];

void argmax_logits(uint group) {
    uint lid = gl_LocalInvocationID.x;
    float best = -1.0 / 0.0;
    uint at = 0xFFFFFFFFu;
    const uint RANGE = (V + ARGMAX_GROUPS - 1) / ARGMAX_GROUPS;
    uint first_i = group * RANGE, end = min(V, first_i + RANGE);
    // AU independent loads in flight per lane: one at a time, a 128-lane workgroup spent
    // ~25 us on a 49152-word vocabulary on an H200 (a chain of dependent L2 round trips).
    const uint AU = 32;
    for (uint base = first_i; base < end; base += AU * WG) {
        float x[AU];
        [[unroll]] for (uint u = 0; u < AU; u++) {
            uint i = base + u * WG + lid;
            x[u] = i < end ? logits[i] : -1.0 / 0.0;
        }
        [[unroll]] for (uint u = 0; u < AU; u++) {
            if (x[u] > best) {  // strict, in index order: a lane keeps its first maximum
                best = x[u];
                at = base + u * WG + lid;
            }
        }
    }
    float top = subgroupMax(best);
    uint first = subgroupMin(best == top ? at : 0xFFFFFFFFu);
    if (gl_NumSubgroups > 1) {
        if (subgroupElect()) {
            am_best[gl_SubgroupID] = top;
            am_at[gl_SubgroupID] = first;
        }
        barrier();
        if (lid != 0) return;
        for (uint k = 1; k < gl_NumSubgroups; k++) {
            // Subgroups own interleaved lanes' indices: on a tie the smaller index wins.
            if (am_best[k] > top || (am_best[k] == top && am_at[k] < first)) {
                top = am_best[k];
                first = am_at[k];
            }
        }
    }
    if (ARGMAX_GROUPS > 1) {  // lane 0 alone from here (the others have left, or do now)
        if (lid != 0) return;
        counters[ARGMAX_BASE + 1 + 2 * group] = floatBitsToUint(top);
        counters[ARGMAX_BASE + 2 + 2 * group] = first;
        memoryBarrierBuffer();  // release: the range's best before the count
        if (atomicAdd(counters[ARGMAX_BASE], 1u) + 1u != ARGMAX_GROUPS) return;
        memoryBarrierBuffer();  // acquire: the other ranges' best after the count
        counters[ARGMAX_BASE] = 0u;  // ready for the next pass
        // Ranges in index order, strictly greater: a tie keeps the earlier range's index.
        top = uintBitsToFloat(counters[ARGMAX_BASE + 1]);
        first = counters[ARGMAX_BASE + 2];
        for (uint k = 1; k < ARGMAX_GROUPS; k++) {
            float v = uintBitsToFloat(counters[ARGMAX_BASE + 1 + 2 * k]);
            if (v > top) {
                top = v;
                first = counters[ARGMAX_BASE + 2 + 2 * k];
            }
        }
    }
    if (lid == 0) {
        outw[0] = first;
        outw[1] = floatBitsToUint(top);
    }
}
