// Greedy sampling support: the index of the largest logit (the first one on ties, as
// np.argmax) into outw[0], its bits into outw[1], so a greedy decode reads 8 bytes instead of
// the logits row. One workgroup of any size: lanes stride over the vocabulary, subgroups
// reduce with subgroup arithmetic, and (for several subgroups) meet in shared memory.
// Call from uniform control flow; needs GL_KHR_shader_subgroup_arithmetic.

shared float am_best[WG];  // [subgroups] (WG bounds their count)
shared uint am_at[WG];

void argmax_logits() {
    uint lid = gl_LocalInvocationID.x;
    float best = -1.0 / 0.0;
    uint at = 0xFFFFFFFFu;
    // AU independent loads in flight per lane: one at a time, a 128-lane workgroup spent
    // ~25 us on a 49152-word vocabulary on an H200 (a chain of dependent L2 round trips).
    const uint AU = 32;
    for (uint base = 0; base < V; base += AU * WG) {
        float x[AU];
        [[unroll]] for (uint u = 0; u < AU; u++) {
            uint i = base + u * WG + lid;
            x[u] = i < V ? logits[i] : -1.0 / 0.0;
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
    if (lid == 0) {
        outw[0] = first;
        outw[1] = floatBitsToUint(top);
    }
}
