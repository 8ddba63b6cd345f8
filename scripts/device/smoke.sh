#!/bin/bash
# A short device check of the harness, no measurement and no build: loaders, wheels,
# `import engine`, what call 1's llama.cpp build needs (nvcc, cmake, ninja, cuBLAS), and
# scripts/bench_vulkan.py --quick with Vulkan and HF (bf16 + compile) on a tiny random-weight
# GGUF (scripts/make_synthetic_gguf.py). Run from a root holding .gl, .whl and this repo:
#   bash scripts/device/smoke.sh TINY.gguf
source scripts/device/common.sh
tiny=$(realpath "$1")
setup
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
python3 -c 'import engine, vulkan; from engine.backends.vulkan import probe; print(probe())'
python3 -m pip list 2>/dev/null | grep -i -E '^(torch|transformers|tokenizers|numpy|triton) ' || :
nvcc --version | tail -1; cmake --version | head -1; echo "ninja $(ninja --version)"
ls /usr/local/cuda/include/cublas_v2.h /usr/local/cuda/lib64/libcublas.so* || true
set -o pipefail
timeout 170 python3 scripts/bench_vulkan.py --quick --model "$tiny" --cache-dir "$STATE/cache" \
    --scratch "$STATE" --backends vulkan --hf --repeat 2 --timeout 140 \
    --out "$OUT/smoke.json" --markdown "$OUT/smoke.md" 2>&1 >/dev/null | tee "$OUT/smoke.log"
