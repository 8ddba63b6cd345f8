#!/bin/bash
# Device call 1 of 3. carry: .gl .whl .model/part1 .llama
# Also runs the Vulkan tests on the GPU while llama-bench builds ($OUT/gpu-tests.log).
# Loaders and wheels; `import engine` and the Vulkan device; model part 1 to /tmp; llama-bench
# built from .llama/llama.cpp.tar.gz (about 4.3 min) in its own session (setsid), so that it
# outlives this call if the call is cut short, but waited for here, so that no measurement
# overlaps the build.
source scripts/device/common.sh
setup
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv || true
python3 -c 'import engine, vulkan; from engine.backends.vulkan import probe; print(probe())'
cp .model/part1 "$STATE/part1"
say "model part 1: $(stat -c %s "$STATE/part1") bytes"
mkdir -p "$STATE/llama"
if [ ! -x "$STATE/llama/bin/llama-bench" ]; then
    touch "$STATE/building"
    setsid bash -c "scripts/device/build_llama_bench.sh .llama/llama.cpp.tar.gz $STATE/llama; \
        rm -f $STATE/building" >"$STATE/build.out" 2>&1 </dev/null &
    say "building llama-bench (log: $STATE/llama/build.log)"
    # Correctness on this GPU while the build runs (no timing here): the Vulkan tests, which
    # compare every pass with numpy on small generated models (those of the shipped model
    # wait for call 3, which has it joined).
    timeout 300 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m "not real_model" \
        tests/test_vulkan_parity.py tests/test_vulkan_split.py tests/test_vulkan_prefill.py \
        tests/test_vulkan_kquant.py \
        2>&1 | tail -25 | tee "$OUT/gpu-tests.log" || true
    # DURING_BUILD: a command to run here too, e.g. scripts/device/profile.sh (device
    # timestamps hold up while the build loads the CPUs; host figures do not).
    if [ -n "${DURING_BUILD:-}" ]; then bash -c "$DURING_BUILD" || true; fi
    wait_build 500
    cat "$STATE/build.out"
fi
"$STATE/llama/bin/llama-bench" --list-devices
say "call 1 done: make call 2 now (this machine is given back 30 s after a call)"
