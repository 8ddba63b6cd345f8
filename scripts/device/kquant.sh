#!/bin/bash
# One device call, no weights carried: the Vulkan K-quant encodings on the GPU. Builds
# llama-bench in the background (as call1.sh does) and meanwhile runs the Vulkan tests that
# need no shipped model (the K-quant ones among them: matmul_coopmat reads the new encodings
# only here); then writes a synthetic Q4_K model of a real shape from the shipped vocabulary
# and benches Vulkan against llama.cpp CUDA on it.
# carry: .gl .whl .model/tokenizer.gguf .llama      ($OUT: gpu-tests.log, <preset>.json/.log)
#   PRESETS="qwen2.5-0.5b" bash scripts/device/kquant.sh
# The hybrids Vulkan runs too (their GPU tests are among the ones above):
#   PRESETS="lfm2-350m qwen3.5-0.8b gemma3-270m" bash scripts/device/kquant.sh
source scripts/device/common.sh
setup
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
mkdir -p "$STATE/llama"
if [ ! -x "$STATE/llama/bin/llama-bench" ]; then
    touch "$STATE/building"
    setsid bash -c "scripts/device/build_llama_bench.sh .llama/llama.cpp.tar.gz $STATE/llama; \
        rm -f $STATE/building" >"$STATE/build.out" 2>&1 </dev/null &
fi
timeout 280 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m "not real_model" \
    tests/test_vulkan_kquant.py tests/test_vulkan_parity.py tests/test_vulkan_arch.py \
    tests/test_vulkan_limits.py tests/test_vulkan_prefill.py tests/test_vulkan_ring.py \
    2>&1 | tail -15 | tee "$OUT/gpu-tests.log" || true
for preset in ${PRESETS:-qwen2.5-0.5b}; do
    synth=$STATE/$preset-q4k.gguf
    [ -f "$synth" ] || python3 scripts/make_synthetic_gguf.py "$synth" --preset "$preset" \
        --type Q4_K --tokenizer-from .model/tokenizer.gguf 2>&1 | tail -2
done
wait_build 420
for preset in ${PRESETS:-qwen2.5-0.5b}; do
    timeout 260 python3 scripts/bench_vulkan.py --model "$STATE/$preset-q4k.gguf" \
        --cache-dir "$STATE/cache" --backends vulkan --llama-bench "$STATE/llama/bin/llama-bench" \
        --repeat 3 --timeout 120 --out "$OUT/$preset.json" > "$OUT/$preset.log" 2>&1 || true
    tail -20 "$OUT/$preset.log"
done
