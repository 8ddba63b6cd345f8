#!/bin/bash
# One device call, no weights carried and no llama.cpp: the Vulkan tests of the hybrid
# architectures, then each PRESET (a synthetic Q4_K model written here from the shipped
# vocabulary) benched on Vulkan alone and profiled per dispatch (decode at 16 and 2000 tokens
# of context, a 256-token prefill). For a change to their shaders, beside kquant.sh's
# llama.cpp figures of the same presets.
# carry: .gl .whl .model/tokenizer.gguf     ($OUT: gpu-tests.log, <preset>.json, prof-<preset>.txt)
#   PRESETS="gemma3-270m qwen3.5-0.8b" bash scripts/device/hybrids.sh
source scripts/device/common.sh
setup
for preset in $PRESETS; do
    synth_model "$preset" &
done
# shellcheck disable=SC2086  # TESTS is a list of paths and options
timeout 200 python3 -m pytest -q --tb=short -p no:cacheprovider -o addopts="" \
    -m "not real_model" ${TESTS:-tests/test_vulkan_arch.py tests/test_vulkan_ring.py \
    tests/test_vulkan_split.py tests/test_vulkan_limits.py} > "$OUT/gpu-tests.log" 2>&1 || true
tail -4 "$OUT/gpu-tests.log"
wait
for preset in $PRESETS; do
    timeout 120 python3 scripts/bench_vulkan.py --model "$STATE/$preset-q4k.gguf" \
        --cache-dir "$STATE/cache" --backends vulkan --repeat 3 --timeout 100 \
        --out "$OUT/$preset.json" 2>&1 | grep "^|" || true
    timeout 100 python3 scripts/profile_vulkan.py --model "$STATE/$preset-q4k.gguf" \
        --cache-dir "$STATE/cache" --contexts 16,2000 --prefill 256 --steps 3 \
        > "$OUT/prof-$preset.txt" 2>&1 || true
done
say "hybrids.sh done at ${SECONDS}s"
