#!/bin/bash
# Device calls with no weights carried: the Vulkan K-quant encodings and the hybrid
# architectures on the GPU, then each PRESET (a synthetic Q4_K model of a real shape, written
# here from the shipped vocabulary) benched on Vulkan against llama.cpp CUDA.
# carry: .gl .whl .model/tokenizer.gguf .llama      ($OUT: gpu-tests.log, <preset>.json/.log)
#   PRESETS="qwen2.5-0.5b lfm2-350m qwen3.5-0.8b gemma3-270m" bash scripts/device/kquant.sh
#   (TESTS overrides the test list)
# Resumable: one call rarely fits everything in the 10-minute limit, so each step leaves its
# result in $STATE and is skipped by the next call (made back to back, within the 30 s the
# machine stays warm). A call starts no new bench after BUDGET seconds (default 380).
source scripts/device/common.sh
setup
budget=${BUDGET:-380}
presets=${PRESETS:-qwen2.5-0.5b}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
mkdir -p "$STATE/llama" "$STATE/done"
if [ ! -x "$STATE/llama/bin/llama-bench" ] && [ ! -f "$STATE/building" ]; then
    touch "$STATE/building"
    setsid bash -c "scripts/device/build_llama_bench.sh .llama/llama.cpp.tar.gz $STATE/llama; \
        rm -f $STATE/building" >"$STATE/build.out" 2>&1 </dev/null &
fi
for preset in $presets; do  # written while the tests run; the build shares the cores
    synth_model "$preset" &
done
if [ ! -f "$STATE/done/tests" ]; then
    # shellcheck disable=SC2086  # TESTS (optional) is a list of paths and options
    timeout 300 python3 -m pytest -q --tb=short -p no:cacheprovider -o addopts="" -m "not real_model" \
        ${TESTS:-tests/test_vulkan_kquant.py tests/test_vulkan_parity.py tests/test_vulkan_arch.py \
        tests/test_vulkan_limits.py tests/test_vulkan_prefill.py tests/test_vulkan_ring.py \
        tests/test_vulkan_snapshot.py tests/test_vulkan_split.py tests/test_hybrid_warm_boot.py \
        tests/test_arch_reference.py} \
        > "$STATE/done/tests" 2>&1 || true
fi
cp "$STATE/done/tests" "$OUT/gpu-tests.log"; tail -25 "$OUT/gpu-tests.log"
wait
wait_build 420 || true
for preset in $presets; do
    if [ ! -f "$STATE/done/$preset.json" ]; then
        [ "$SECONDS" -lt "$budget" ] || { say "budget spent: call again for $preset"; continue; }
        ls -la "$STATE/$preset-q4k.gguf" || { tail -3 "$STATE/$preset.synth.log"; continue; }
        timeout 200 python3 scripts/bench_vulkan.py --model "$STATE/$preset-q4k.gguf" \
            --cache-dir "$STATE/cache" --backends vulkan \
            --llama-bench "$STATE/llama/bin/llama-bench" --repeat 3 --timeout 90 \
            --out "$STATE/done/$preset.json" > "$STATE/done/$preset.log" 2>&1 || true
        touch "$STATE/done/$preset.json"
    fi
    cp "$STATE/done/$preset.json" "$STATE/done/$preset.log" "$OUT/" 2>/dev/null || true
    tail -12 "$STATE/done/$preset.log"
done
say "kquant.sh done at ${SECONDS}s"
