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
    for (uint i = lid; i < V; i += WG) {
        float x = logits[i];
        if (x > best) {  // strict: a lane keeps its first maximum
            best = x;
            at = i;
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
