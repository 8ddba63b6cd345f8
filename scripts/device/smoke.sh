#!/bin/bash
# A short device check of the harness, no measurement: loaders, wheels, `import engine`, and
# scripts/bench_vulkan.py --quick on a tiny random-weight GGUF (scripts/make_synthetic_gguf.py)
# with Vulkan, HF (bf16 + compile) and, where .llama/bin has a prebuilt llama-bench, llama.cpp,
# whose raw JSON is kept as a sample for tests/test_bench_vulkan.py.
#   carry: .gl .whl (and .llama), plus a folder holding TINY.gguf; run from the root that has them
#   bash scripts/device/smoke.sh TINY.gguf
source scripts/device/common.sh
tiny=$(realpath "$1")
setup
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -c 'import engine, vulkan; from engine.backends.vulkan import probe; print(probe())'
python3 -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|tokenizers|numpy) '
llama=()
if [ -x .llama/bin/llama-bench ]; then
    mkdir -p "$STATE/llama" && cp -r .llama/bin "$STATE/llama/"
    cuda_libs
    bin=$STATE/llama/bin/llama-bench
    "$bin" --list-devices
    "$bin" -m "$tiny" -ngl 99 -fa 0,1 -p 64,128 -n 16 -r 2 -o json > "$OUT/llama_pp_tg.json"
    "$bin" -m "$tiny" -ngl 99 -fa 0,1 -p 0 -n 16 -d 128 -r 2 -o json > "$OUT/llama_depth.json"
    llama=(--llama-bench "$bin")
fi
set -o pipefail
timeout 150 python3 scripts/bench_vulkan.py --quick --model "$tiny" --cache-dir "$STATE/cache" \
    --scratch "$STATE" --backends vulkan --hf "${llama[@]}" --repeat 2 --timeout 110 \
    --out "$OUT/smoke.json" --markdown "$OUT/smoke.md" 2>&1 >/dev/null | tee "$OUT/smoke.log"
