"""The HF transformers column of scripts/bench_vulkan.py: the same GGUF on CUDA, in its own
process.

Mode `bf16-compiled` (the column issue 14 compares against): bfloat16 weights, SDPA attention,
and decode through `generate()` with a StaticCache, which generate() runs through
torch.compile (CUDA graphs) on CUDA. One cache of fixed length serves every context, reset
between runs, so the decode graph compiles once. Mode `fp32-eager`: float32, eager attention,
a dynamic cache and no compile (docs/vulkan.md's older column).

Prefill is one eager forward over the prompt that keeps only the last position's logits, as
llama.cpp's pp test does. Decode tok/s at a context C is GEN_TOKENS over the difference between
generate() of SHORT+GEN_TOKENS and of SHORT new tokens after the same C-token prompt: the prompt's
prefill and generate()'s setup cancel, and every step keeps generate()'s host round trip (the
token is needed on the host each step, as in a chat app).
"""

from __future__ import annotations

import inspect
import os
import statistics
import time
from pathlib import Path
from typing import Any

SHORT = 8  # new tokens of the shorter generate() call
GEN_TOKENS = 128  # the extra new tokens whose time is the decode figure (llama-bench -n)
CACHE_SLACK = 256  # cache slots beyond the longest context


def bench(model_path: Path, mode: str, prefill: list[int], contexts: list[int],
          repeat: int, gen_tokens: int = GEN_TOKENS) -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    # Past this many recompiles of one frame dynamo falls back to eager, silently.
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 64)
    import transformers
    from transformers import AutoModelForCausalLM, StaticCache

    from engine.tools.bench import synthetic_tokens

    if not torch.cuda.is_available():
        return {"backend": "hf", "mode": mode, "skipped": "no CUDA device"}
    compiled = mode == "bf16-compiled"
    dtype = torch.bfloat16 if compiled else torch.float32
    attn = "sdpa" if compiled else "eager"
    t0 = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        str(model_path.parent), gguf_file=model_path.name, dtype=dtype,
        attn_implementation=attn).to("cuda").eval()
    out: dict = {"backend": "hf", "mode": mode, "model_load_s": round(time.perf_counter() - t0, 3),
                 "torch": torch.__version__, "transformers": transformers.__version__,
                 "gpu": torch.cuda.get_device_name(0), "dtype": str(dtype).split(".")[-1],
                 "attn_implementation": attn}
    vocab = model.config.vocab_size
    keep_last = {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(
        model.forward).parameters else {}
    out["prefill_logits"] = "last position" if keep_last else "every position"

    @torch.no_grad()
    def prefill_once(ids: torch.Tensor) -> float:
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model(input_ids=ids, use_cache=True, **keep_last)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    out["prefill_tok_s"], out["prefill_runs"] = {}, {}
    for n in prefill:
        ids = torch.tensor([synthetic_tokens(vocab, n, 0)], device="cuda")
        prefill_once(ids)  # warm-up: kernels, autotuning
        runs = [n / prefill_once(ids) for _ in range(repeat)]
        out["prefill_tok_s"][str(n)] = round(statistics.median(runs), 2)
        out["prefill_runs"][str(n)] = [round(x, 2) for x in runs]

    cache = None
    if compiled:
        cache = static_cache(StaticCache, model, max(contexts) + SHORT + gen_tokens + CACHE_SLACK)

    @torch.no_grad()
    def generate(prompt: torch.Tensor, new: int) -> float:
        extra = {"past_key_values": cache} if compiled else {"disable_compile": True}
        if cache is not None:
            cache.reset()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                       max_new_tokens=new, min_new_tokens=new,
                       pad_token_id=model.config.eos_token_id, **extra)
        torch.cuda.synchronize()
        return time.perf_counter() - t0

    out["decode_tok_s"], out["decode_runs"], out["warmup_s"] = {}, {}, {}
    for context in sorted(contexts):
        prompt = torch.tensor([synthetic_tokens(vocab, context, 1)], device="cuda")
        # Untimed: the first context compiles the decode step; each new prompt length costs
        # a one-time recompile or graph recording (seen on the H200: one run came out negative).
        t0 = time.perf_counter()
        generate(prompt, SHORT + gen_tokens)
        out["warmup_s"][str(context)] = round(time.perf_counter() - t0, 1)
        runs = []
        for _ in range(repeat):
            short = generate(prompt, SHORT)
            runs.append(gen_tokens / (generate(prompt, SHORT + gen_tokens) - short))
        out["decode_tok_s"][str(context)] = round(statistics.median(runs), 2)
        out["decode_runs"][str(context)] = [round(x, 2) for x in runs]
    out["decode_tokens"] = gen_tokens
    return out


def static_cache(cls: type, model: Any, length: int) -> Any:
    """A StaticCache of `length` slots, whichever constructor this transformers has: 5.x takes
    (config, max_cache_len) and sizes itself on first use; 4.x also wants batch, device, dtype."""
    wanted = {"config": model.config, "max_cache_len": length, "max_batch_size": 1,
              "device": model.device, "dtype": model.dtype}
    accepted = inspect.signature(cls.__init__).parameters
    return cls(**{k: v for k, v in wanted.items() if k in accepted})
