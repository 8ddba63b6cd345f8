#!/bin/bash
# One device call, no weights carried: the matrix products' shapes on larger models. Each
# PRESET (a synthetic Q4_K model of a real shape, written here from the shipped vocabulary)
# gets scripts/sweep_vulkan.py's decode sweep over ROWS x WG (rows per row group, workgroup
# size) and its prefill sweep over cooperative-matrix tiles of 32 and 64 tokens.
# carry: .gl .whl .model/tokenizer.gguf       ($OUT: <preset>-decode.jsonl, <preset>-prefill.jsonl)
#   PRESETS="1.7b qwen2.5-0.5b" ROWS=2,4,8 WG=128,256 bash scripts/device/shapes.sh
source scripts/device/common.sh
setup
for preset in $PRESETS; do
    synth_model "$preset" &
done
wait
for preset in $PRESETS; do
    model=$STATE/$preset-q4k.gguf
    timeout 200 python3 scripts/sweep_vulkan.py --model "$model" --cache-dir "$STATE/cache" \
        decode --contexts 16,2000 --steps 48 --rows "${ROWS:-2,4,8}" --wg "${WG:-128,256}" \
        > "$OUT/$preset-decode.jsonl" 2>&1 || true
    timeout 120 python3 scripts/sweep_vulkan.py --model "$model" --cache-dir "$STATE/cache" \
        prefill --prompts 256,2048 --prefill-splits 16 --prefill-queries 8 --coopmat 1 \
        --coopmat-tokens 32,64 > "$OUT/$preset-prefill.jsonl" 2>&1 || true
    python3 - "$OUT/$preset-decode.jsonl" "$OUT/$preset-prefill.jsonl" <<'PY'
import json, sys
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith("{"):
            r = json.loads(line)
            keys = ("context", "rows", "wg", "decode_tok_s", "prompt", "coopmat_tokens",
                    "prefill_tok_s")
            print(path.rsplit("/", 1)[-1], {k: r[k] for k in keys if k in r})
        else:
            print(line.rstrip()[-200:])
PY
done
say "shapes.sh done at ${SECONDS}s"
