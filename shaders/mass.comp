#version 450
// Attention mass per slot: mass[s] (+)= sum over probability rows r of p[r, s] * f, where f
// turns the stored p into a softmax probability (split.glsl):
// - prefill: the row's 1/sum, or, after attention split into runs of slots (flags & 8), the
//   factor of the row's run that holds slot s. Rows come in groups of per_t for one query
//   token t, which saw slots [0, n0 + t] only: slot s takes rows of tokens t >= s - n0 only;
// - decode (flags & 2): the factor of the split that holds slot s.
// SPLIT invocations share a slot, each summing every SPLIT-th row (a prefill chunk has
// bucket * NH rows: one invocation per slot would walk them all in a chain of dependent
// loads), and meet in shared memory.
// flags & 1 adds to mass instead of overwriting it; flags & 4 adds ARGMAX_GROUPS workgroups,
// the last, that compute the device argmax of the logits instead (decode's tail, one
// dispatch).
// flags & 16 (decode's tail, a prefill pass's last layer): also fold the pass's mass into the
// ring's scores, as KVRing.commit's update_scores does for C new tokens, so the CPU never
// reads the arena back: on a discrete GPU the arena is BAR memory the CPU reads uncached
// (1.2 ms a step at 2000 slots on an H200).
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_KHR_shader_subgroup_basic : require
#include "common.glsl"
#define SPLIT_READONLY
#include "split.glsl"
#include "argmax.glsl"

layout(local_size_x_id = 0) in;

// The ring policy's score rule (engine/state/evict_policy.py:update_scores), for flags & 16.
layout(constant_id = 25) const uint SCORE_MODE = 0;  // 0 decayed, 1 accumulated (h2o), 2 tova
layout(constant_id = 27) const float SCORE_SCALE = 1.0;  // 1 / (layers * heads)
// The decay for the pass's C tokens comes with the step (prm.decay_c).
layout(std430, binding = 20) buffer Scores { float scores[]; };  // arena slot_salience [S]

const uint SLOTS = WG / SPLIT;  // slots per workgroup

shared float red[SPLIT > 1 ? WG : 1];  // [SPLIT, SLOTS] partial sums

void main() {
    uint argmax_first = gl_NumWorkGroups.x - ARGMAX_GROUPS;
    if ((pc.flags & 4u) != 0u && gl_WorkGroupID.x >= argmax_first) {
        argmax_logits(gl_WorkGroupID.x - argmax_first);
        return;
    }
    if (gl_WorkGroupID.x * SLOTS >= prm.N) return;  // no live slot here: the whole group
    uint lid = gl_LocalInvocationID.x, part = lid / SLOTS;
    uint s = gl_WorkGroupID.x * SLOTS + lid % SLOTS;
    // MU rows at a time, each with its own sum, so that MU loads are in flight: a chain of
    // single dependent loads is what bounded this pass (70 us a prefill layer on an H200).
    const uint MU = 4;
    float acc[MU];
    [[unroll]] for (uint u = 0; u < MU; u++) acc[u] = 0.0;
    if (s < prm.N) {
        if ((pc.flags & 2u) != 0u) {
            uint sp = s / split_len(prm.N);
            for (uint r0 = part; r0 < pc.count; r0 += MU * SPLIT) {
                [[unroll]] for (uint u = 0; u < MU; u++) {
                    uint r = r0 + u * SPLIT, row = pc.p_row0 + r;
                    if (r < pc.count) {
                        acc[u] += probs[row * S + s] * splits[SP_FAC + row * MAX_SPLITS + sp];
                    }
                }
            }
        } else {
            uint first = s > prm.n0 ? (s - prm.n0) * pc.per_t : 0;  // rows of earlier tokens: no
            uint rows = min(pc.count, prm.C * pc.per_t);  // rows past C: stale, from a longer pass
            bool runs = (pc.flags & 8u) != 0u;
            uint run = runs ? s / prefill_run_len(prm.N) : 0;
            for (uint r0 = first + part; r0 < rows; r0 += MU * SPLIT) {
                [[unroll]] for (uint u = 0; u < MU; u++) {
                    uint r = r0 + u * SPLIT, row = pc.p_row0 + r;
                    if (r < rows) {
                        float f = runs ? splits[PF_FAC + row * PREFILL_SPLITS + run]
                                       : probs[PROWS * S + row];
                        acc[u] += probs[row * S + s] * f;
                    }
                }
            }
        }
    }
    float total = (acc[0] + acc[1]) + (acc[2] + acc[3]);
    if (SPLIT > 1) {
        red[lid] = total;
        barrier();
        if (part != 0) return;
        for (uint k = 1; k < SPLIT; k++) total += red[k * SLOTS + lid];
    }
    if (s >= prm.N) return;
    if ((pc.flags & 16u) != 0u) {  // the pass's last mass: scaled per token, then the rule
        float m = ((pc.flags & 1u) != 0u ? mass[s] + total : total) * SCORE_SCALE;
        mass[s] = m;
        if (SCORE_MODE == 2u) scores[s] = m * prm.inv_c;  // tova: the mean over the queries
        else if (s >= prm.n0) scores[s] = m;  // a new slot
        else scores[s] = (SCORE_MODE == 1u ? scores[s] : scores[s] * prm.decay_c) + m;
        return;
    }
    mass[s] = (pc.flags & 1u) != 0u ? mass[s] + total : total;
}
