#!/bin/bash
# One device call, no weights carried: an 8B-class random model (scripts/make_synthetic_gguf.py
# --preset 8b: 32 layers, d 4096, 8 K/V heads, FFN 14336, Q4_0; ~90 s to write) must load on
# Vulkan (its payload passes one texel view: issue 34) and decode; then the binding-limit and
# parity tests on the GPU. Extra arguments go to make_synthetic_gguf.py (e.g. --untied).
# carry: .gl .whl .model/tokenizer.gguf      ($OUT: load-8b.log, load-8b-tests.log)
#   bash scripts/device/load_8b.sh
source scripts/device/common.sh
setup
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader || true
synth=$STATE/synthetic-8b.gguf
if [ ! -f "$synth" ]; then
    python3 scripts/make_synthetic_gguf.py "$synth" --preset 8b \
        --tokenizer-from .model/tokenizer.gguf "$@" 2>&1 | tail -1
fi
timeout 200 python3 - "$synth" "$STATE/cache" <<'PY' 2>&1 | tee "$OUT/load-8b.log"
import sys, time
from pathlib import Path
import numpy as np
from engine.backends.vulkan.backend import VulkanBackend
from engine.conversation import Conversation
from engine.model.model import load_model
from engine.state.ring_policy import RingPolicy

model = load_model(Path(sys.argv[1]), Path(sys.argv[2]))
backend = VulkanBackend()
print("limits", backend.ctx.limits)
t = time.perf_counter()
conv = Conversation(model, RingPolicy(), backend=backend)
w, res = conv.forward.recorder.w, conv.forward.res
print(f"loaded in {time.perf_counter() - t:.1f} s: {len(w.wq)} weight chunks "
      f"({[b.size for b in w.wq]} bytes), embed/output pieces {len(w.embed)}/{len(w.output)}, "
      f"K/V groups {len(res.kv_groups)}, {backend.describe()['weights_bytes']} weight bytes")
ids = [int(i) for i in np.random.default_rng(0).integers(3, model.config.vocab_size, 256)]
logits = conv.ingest(ids)
assert np.isfinite(logits).all(), "non-finite logits"
t, steps, tok = time.perf_counter(), 64, conv.forward.greedy_token
for _ in range(steps):
    logits = conv.forward.decode_one_token(tok)
    tok = conv.forward.greedy_token
assert np.isfinite(logits).all() and tok == int(np.argmax(logits))
print(f"decode {steps / (time.perf_counter() - t):.0f} tok/s; dispatches/token "
      f"{conv.forward.dispatches_per_token}; OK")
PY
timeout 240 python3 -m pytest -q -p no:cacheprovider -o addopts="" -m "not real_model" \
    tests/test_vulkan_limits.py tests/test_vulkan_parity.py 2>&1 | tail -5 \
    | tee "$OUT/load-8b-tests.log" || true
