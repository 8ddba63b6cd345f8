#!/bin/bash
# Device call 3 of 3. carry: nothing
# scripts/bench_vulkan.py: Channel Vulkan, HF transformers (bf16, static cache +
# torch.compile) and call 2's llama-bench run, into one report: $OUT/bench.json, the
# docs/vulkan.md table $OUT/table.md, and the log $OUT/bench.log. Then, with nothing left to
# time, the Vulkan tests that need the shipped model, on the joined GGUF ($OUT/gpu-real-tests.log). Extra arguments go to the
# bench (e.g. --backends vulkan,numpy, or --hf-eager for the fp32 eager HF column).
source scripts/device/common.sh
model=$STATE/SmolLM2-135M-Instruct.Q4_1.gguf
[ -f "$model" ] || cold "$model (joined in call 2)"
setup
if [ -f "$STATE/llama-report.json" ]; then
    llama=(--llama-bench-json "$STATE/llama-report.json")
else  # call 2 did not get to run it: run it here
    llama=(--llama-bench "$STATE/llama/bin/llama-bench")
fi
tuning=()
[ -s "$STATE/tuning.json" ] && tuning=(--tuning-json "$STATE/tuning.json")
set -o pipefail
python3 scripts/bench_vulkan.py --model "$model" --cache-dir "$STATE/cache" \
    --scratch "$STATE" --backends vulkan --hf "${llama[@]}" "${tuning[@]}" --timeout 360 \
    --out "$OUT/bench.json" --markdown "$OUT/table.md" "$@" 2>&1 >/dev/null \
    | tee "$OUT/bench.log"
timeout 150 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m real_model \
    tests/test_vulkan_real.py tests/test_vulkan_split.py --model "$model" \
    2>&1 | tail -8 | tee "$OUT/gpu-real-tests.log" || true
