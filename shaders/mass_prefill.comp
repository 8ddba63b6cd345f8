#version 450
// Attention mass per slot for a prefill chunk: mass.comp's sum, mass[s] (+)= sum over the
// probability rows r of p[r, s] / sum[r], with the rows of each slot split over RG invocations
// and added up in shared memory. mass.comp walks a chunk's bucket * NH rows in one invocation
// per slot, a long chain of dependent loads; here 32 slots share a workgroup of RG row groups
// (a subgroup's loads of one row stay contiguous). Rows come in groups of per_t for query
// token t, which saw slots [0, n0 + t]: slot s only takes rows of tokens t >= s - n0.
// After attention split over runs of slots (PREFILL_SPLITS > 1) a row's factor is its run's,
// PF_FAC[row, run of s] (split.glsl), instead of its 1/sum.
#extension GL_GOOGLE_include_directive : require
#include "common.glsl"
#define SPLIT_READONLY
#include "split.glsl"

layout(local_size_x_id = 0) in;

const uint SL = 32;       // slots per workgroup
const uint RG = WG / SL;  // invocations sharing one slot's rows

shared float part[WG];  // [RG, SL] partial sums

void main() {
    uint lid = gl_LocalInvocationID.x, sl = lid % SL, g = lid / SL;
    uint s = gl_WorkGroupID.x * SL + sl;
    float total = 0.0;
    if (s < prm.N) {
        uint first = s > prm.n0 ? (s - prm.n0) * pc.per_t : 0;  // rows of earlier tokens: no
        uint rows = min(pc.count, prm.C * pc.per_t);  // rows past C: stale, from a longer pass
        if (PREFILL_SPLITS > 1) {
            uint run = s / prefill_run_len(prm.N);
            for (uint r = first + g; r < rows; r += RG) {
                uint row = pc.p_row0 + r;
                total += probs[row * S + s] * splits[PF_FAC + row * PREFILL_SPLITS + run];
            }
        } else {
            for (uint r = first + g; r < rows; r += RG) {
                uint row = pc.p_row0 + r;
                total += probs[row * S + s] * probs[PROWS * S + row];
            }
        }
    }
    part[lid] = total;
    barrier();
    if (g != 0 || s >= prm.N) return;
    for (uint j = 1; j < RG; j++) total += part[j * SL + sl];
    mass[s] = (pc.flags & 1u) != 0u ? mass[s] + total : total;
}
