#!/bin/bash
# One device call, no weights carried: the GPU tests in $TESTS (default: the tiled prefill's),
# then scripts/profile_vulkan.py with this script's arguments on a random model of the shipped
# one's shape, which scripts/make_synthetic_gguf.py writes from .model/tokenizer.gguf.
# carry: .gl .whl .model/tokenizer.gguf      ($OUT: profile-tests.log, profile.jsonl)
#   bash scripts/device/profile.sh --contexts 16 --prefill 256,2048 --variant coopmat_tokens=32
source scripts/device/common.sh
setup
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader || true
synth=$STATE/synthetic-135m.gguf
if [ ! -f "$synth" ]; then
    # SmolLM2-135M's geometry and types: Q4_1 layers, Q8_0 tied embeddings.
    python3 scripts/make_synthetic_gguf.py "$synth" --layers 30 --d-model 576 --heads 9 \
        --kv-heads 3 --ffn 1536 --context 8192 --rope-theta 100000 --type Q4_1 \
        --embd-type Q8_0 --tokenizer-from .model/tokenizer.gguf 2>&1 | tail -1
fi
# shellcheck disable=SC2086  # TESTS is a list of paths and options
timeout 240 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m "not real_model" \
    ${TESTS:-tests/test_vulkan_prefill.py} 2>&1 | tail -15 | tee "$OUT/profile-tests.log" || true
timeout 420 python3 scripts/profile_vulkan.py --model "$synth" --cache-dir "$STATE/cache" "$@" \
    | tee "$OUT/profile.jsonl"
