// Split ("flash-decoding") attention, shared by attention_split.comp (decode),
// attention_prefill.comp (prefill) and mass.comp (both): the constants and buffers only
// they use (kept out of common.glsl so that every other shader's SPIR-V stays as it is), how
// live slots are cut into splits, and where each split's partial results live. Include after
// common.glsl.

// ---- specialization constants (ids continue common.glsl's; pipelines.py SPEC_IDS) ------------
layout(constant_id = 21) const uint SPLIT_SLOTS = 32;  // fewest slots a split holds (but the last)
layout(constant_id = 22) const uint MAX_SPLITS = 64;   // most splits per K/V head
layout(constant_id = 23) const uint PV_TILE = 1;       // 1: GPU form of p * v, 0: CPU form

// ---- resources (pipelines.py BINDINGS) ----------------------------------------------------------
// Coherent: the last split of a K/V head to finish folds what the other workgroups wrote.
// A shader that reads them only after a pipeline barrier (mass.comp) defines SPLIT_READONLY,
// so its loads may go through the non-coherent caches.
#ifdef SPLIT_READONLY
layout(std430, binding = 18) readonly buffer Split { float splits[]; };         // SP_FLOATS
#else
layout(std430, binding = 18) coherent buffer Split { float splits[]; };         // SP_FLOATS
#endif
layout(std430, binding = 19) coherent buffer Counters { uint counters[]; };  // runs done, zeroed
// by the last: [NH] for decode, [NH, query tiles] for prefill (resources.py sizes it)

#ifndef SPLIT_READONLY
shared bool fold_last_sh;  // last_to_finish's answer, for the whole workgroup

// Whether this workgroup is the last of `parts` to count itself at counters[counter], which the
// last then resets for the next dispatch. This workgroup's writes are released before its
// count, and the others' acquired after it, so the last may fold what they all wrote. Called
// by the whole workgroup, in uniform control flow (it has barriers).
bool last_to_finish(uint counter, uint parts) {
    memoryBarrierBuffer();  // release: this workgroup's partials before the count
    barrier();
    if (gl_LocalInvocationIndex == 0) fold_last_sh = atomicAdd(counters[counter], 1u) + 1u == parts;
    barrier();
    if (!fold_last_sh) return false;
    memoryBarrierBuffer();  // acquire: the other workgroups' partials after the count
    if (gl_LocalInvocationIndex == 0) atomicExchange(counters[counter], 0u);
    return true;
}
#endif

// Regions of `splits` (float offsets). Only the mass factors outlive a layer: mass.comp reads
// every layer's after the last one; the rest is reused by the next layer's attention.
const uint SP_FAC = 0;                                 // [NL * NH, MAX_SPLITS] mass factors
const uint SP_MAX = SP_FAC + NL * NH * MAX_SPLITS;     // [NH, MAX_SPLITS] split's max score
const uint SP_SUM = SP_MAX + NH * MAX_SPLITS;          // [NH, MAX_SPLITS] sum exp(score - max)
const uint SP_OUT = SP_SUM + NH * MAX_SPLITS;          // [NH, MAX_SPLITS, HD] unnormalised out
const uint SP_POST = SP_OUT + NH * MAX_SPLITS * HD;    // [D] matmul.comp's MODE_POSTNORM rows
const uint SP_FLOATS = SP_POST + D;                    // resources.py sizes the buffer so

// A token that sees n >= 1 slots cuts them into runs of split_len(n) slots: as many runs as
// SPLIT_SLOTS allows, at most MAX_SPLITS. A run's probabilities are stored relative to the
// run's own max; SP_FAC[row, run] = exp(run max - global max) / global sum turns them into
// exact softmax probabilities.
uint split_len(uint n) {
    uint k = clamp((n + SPLIT_SLOTS - 1) / SPLIT_SLOTS, 1u, MAX_SPLITS);
    return (n + k - 1) / k;
}

uint split_count(uint n) {
    uint len = split_len(n);
    return (n + len - 1) / len;  // can be fewer than k above: no run is ever empty
}

// ---- prefill: attention_prefill.comp's runs of slots, read back by mass.comp ---------------
// With PREFILL_SPLITS > 1 a chunk's query tile attends its slots in up to that many runs, one
// workgroup each; the last run of a tile to finish folds them (counters[query head, tile]).
layout(constant_id = 24) const uint PREFILL_SPLITS = 1;  // most runs per query tile (1: none)
layout(constant_id = 28) const uint PREFILL_RUN_TILES = 1;  // fewest tiles a run holds
const uint PF_TILE = 32;  // slots per key/value tile of attention_prefill.comp

// Runs are whole tiles and depend only on the chunk's live count n (prm.N), not on the query
// tile (which sees fewer slots if earlier), so mass.comp finds a slot's run from the slot.
// A run holds at least PREFILL_RUN_TILES tiles: a short context stays one run, which is
// faster there (no fold), and a long one splits (tuning.prefill_runs mirrors this).
uint prefill_run_len(uint n) {
    uint tiles = (n + PF_TILE - 1) / PF_TILE;
    return PF_TILE * max((tiles + PREFILL_SPLITS - 1) / PREFILL_SPLITS, PREFILL_RUN_TILES);
}

// Regions of `splits` for probability row `row` of the chunk (the decode regions above are
// free during a prefill pass). PF_FAC[row, run] = exp(run max - max) / sum: as SP_FAC.
const uint PF_FAC = 0;                                      // [PROWS, PREFILL_SPLITS]
const uint PF_MAX = PF_FAC + PROWS * PREFILL_SPLITS;        // [PROWS, PREFILL_SPLITS]
const uint PF_SUM = PF_MAX + PROWS * PREFILL_SPLITS;        // [PROWS, PREFILL_SPLITS]
const uint PF_OUT = PF_SUM + PROWS * PREFILL_SPLITS;        // [PROWS, PREFILL_SPLITS, HD]
