#!/bin/bash
# One device call, no weights carried: each product's device time in a decode step and in a
# 2048-token prefill, under the GPU tuning and each of VARIANTS (scripts/profile_vulkan.py
# --variant; default: every product in 32-token tiles, then in 64, against the tuning's
# choice by product size, coopmat_wide), per model shape.
# carry: .gl .whl .model/tokenizer.gguf        ($OUT: <preset>-tiles.jsonl)
#   PRESETS="1.7b qwen2.5-0.5b gemma3-270m" VARIANTS="coopmat_wide=0 coopmat_wide=128" \
#       CONTEXTS=16,2000 bash scripts/device/tiles.sh      (decode contexts; default 16)
source scripts/device/common.sh
setup
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
for preset in $PRESETS; do
    synth_model "$preset" &
done
wait
variants=""
for v in ${VARIANTS:-coopmat_wide=0 coopmat_tokens=64}; do variants="$variants --variant $v"; done
for preset in $PRESETS; do
    # shellcheck disable=SC2086  # $variants: one --variant option per word
    timeout 150 python3 scripts/profile_vulkan.py --model "$STATE/$preset-q4k.gguf" \
        --cache-dir "$STATE/cache" --contexts "${CONTEXTS:-16}" --prefill 2048 \
        $variants > "$OUT/$preset-tiles.jsonl" 2>&1 || true
    python3 - "$preset" "$OUT/$preset-tiles.jsonl" <<'PY'
import collections, json, sys
for line in open(sys.argv[2]):
    if not line.startswith("{"):
        print(line.rstrip()[-200:])
        continue
    r = json.loads(line)
    if r.get("what") == "decode":  # one step's products
        ms = collections.Counter({k: v["us"] / 1000 for k, v in r["gpu"].items()})
    elif r.get("what") == "prefill":  # the prompt's products, over its chunks
        ms = collections.Counter()
        for chunk in r["gpu_per_chunk"]:
            for name, v in chunk.items():
                ms[name] += v["us"] / 1000
    else:
        continue
    print(sys.argv[1], r["what"], r["variant"] or "base", r["tok_s"],
          {k: round(v, 3) for k, v in ms.most_common(7)})
PY
done
say "tiles.sh done at ${SECONDS}s"
