#!/bin/bash
# Device call 2 of 3. carry: .model/part2
# Joins the model (sha256 checked against model.sha256 beside this script), waits for a
# llama-bench build still running, and runs llama-bench's two runs (bench_vulkan_llama.py):
# $OUT/llama-bench.json, kept in /tmp for call 3.
source scripts/device/common.sh
[ -f "$STATE/part1" ] || cold "$STATE/part1 (model part 1, from call 1)"
setup
model=$STATE/SmolLM2-135M-Instruct.Q4_1.gguf
cat "$STATE/part1" .model/part2 > "$model"
(cd "$STATE" && sha256sum --check "$REPO/scripts/device/model.sha256")
wait_build 240
python3 - "$STATE/llama/bin/llama-bench" "$model" "$OUT/llama-bench.json" <<'PY'
import json, sys
from pathlib import Path
sys.path.insert(0, "scripts")
import bench_vulkan_llama as llama
binary, model, out = map(Path, sys.argv[1:])
records = llama.run(binary, model, [256, 2048], [16, 2000, 4000], 5, timeout=240)
out.write_text(json.dumps(records, indent=1) + "\n")
summary = llama.summarise(records, [16, 2000, 4000])
for name in llama.FA_NAMES.values():
    print(name, {k: summary[name][k] for k in ("prefill_tok_s", "decode_tok_s")})
PY
cp "$OUT/llama-bench.json" "$STATE/"
say "call 2 done: make call 3 now (this machine is given back 30 s after a call)"
