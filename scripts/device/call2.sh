#!/bin/bash
# Device call 2 of 3. carry: .model/part2
# Sweeps the decode attention knobs first ($OUT/sweep-decode.jsonl, $STATE/tuning.json for
# call 3).
# Joins the model (sha256 checked against model.sha256 beside this script), waits for a
# llama-bench build still running, and runs llama-bench's two runs through the bench
# (bench_vulkan_llama.py): the report $OUT/llama-report.json, kept in /tmp for call 3.
source scripts/device/common.sh
[ -f "$STATE/part1" ] || cold "$STATE/part1 (model part 1, from call 1)"
setup
model=$STATE/SmolLM2-135M-Instruct.Q4_1.gguf
cat "$STATE/part1" .model/part2 > "$model"
(cd "$STATE" && sha256sum --check "$REPO/scripts/device/model.sha256")
wait_build 240
set -o pipefail
# The attention knobs, swept on this GPU before anything is measured; call 3's bench runs
# with the best (scripts/device/pick_tuning.py). A sweep cut short leaves the defaults.
sweep() {
    timeout 150 python3 scripts/sweep_vulkan.py --model "$model" --cache-dir "$STATE/cache" \
        "$@" > "$OUT/sweep-$1.jsonl" 2> "$OUT/sweep-$1.log" || true
    say "sweep $1: $(wc -l < "$OUT/sweep-$1.jsonl") combinations x lengths"
}
# SWEEP=0 skips it: call 3 then benches tuning.GPU's defaults as they are.
if [ "${SWEEP:-1}" != 0 ]; then
    # 256 steps after 32 of warm-up: 64 after 4 read 456-1146 tok/s for one knob set at 21
    # slots (2026-12-02, seventh lease), where the longer contexts held within 5%.
    sweep decode --steps 256 --warmup 32 --split-slots 64,128 --split-subgroups 4,8 \
        --fold-loads 8,16
    # Prefill keeps tuning.GPU's knobs: a sweep's 256-token prompts ran right after idle
    # pauses (each combination records its passes first) and read up to half the bench's
    # figure, so one lease's pick was slower at both lengths in the bench (2026-12-02).
    python3 scripts/device/pick_tuning.py "$OUT/sweep-decode.jsonl" /dev/null \
        > "$STATE/tuning.json" && cp "$STATE/tuning.json" "$OUT/" && say "tuning $(cat "$OUT/tuning.json")"
fi
python3 scripts/bench_vulkan.py --model "$model" --cache-dir "$STATE/cache" --backends "" \
    --llama-bench "$STATE/llama/bin/llama-bench" --timeout 240 \
    --out "$OUT/llama-report.json" 2>&1 >/dev/null | tee "$OUT/llama-report.log"
grep -q '"fa_on"' "$OUT/llama-report.json"
cp "$OUT/llama-report.json" "$STATE/"
say "call 2 done: make call 3 now (this machine is given back 30 s after a call)"
