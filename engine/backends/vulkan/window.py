"""Recording a WINDOW layer's attention (Gemma 3's sliding-window layers) between its q|k|v
product and its output product (passes.py).

A WINDOW layer's keys and values never enter the ring: they sit in the arena's circular
planes `kw_cache`/`vw_cache` (bindings 22-23), the token the ring's clock stamped c in row
(c - 1) % window (engine/backends/numpy/window.py has the rules), and add nothing to the
attention mass. The q|k|v product leaves the pass's rows in act (WINDOW specialized:
matmul_common.glsl), QK-norm rotates them there with the window's own RoPE rows, then:

- window_attention.comp: each query over the plane's old rows (masked by their age, from
  the params' wrow and wfill) and the pass's own keys (causal, windowed);
- a prefill pass: window_store.comp writes the pass's newest rows into the plane, beside the
  output product (both only read what came before): the chunk's queries had to see the rows
  it overwrites. Decode's one token stores its own row in the attention dispatch, whose
  queries never see that row (it held the token `window` steps older).

Decode costs what a FULL layer's does (qkv, QK-norm, attention, then wo); prefill one more.
A rebase re-rotates the window's keys (engine/state/rebase.py's shift_window): on the host
views of the mapped arena, or where the CPU reads it slowly, on the device (rope_rebase.comp
with WINDOW: every row by one angle).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...align import ceil_div

if TYPE_CHECKING:
    from .passes import PassRecorder, PassShape
    from .tuning import Tuning
    from .weights import LayerMatrices


# window_attention.comp's subgroups a workgroup, where the device allows so many invocations.
DECODE_SUBGROUPS, PREFILL_SUBGROUPS = 16, 4


def window_runs(t: Tuning, window: int) -> int:
    """Workgroups a K/V head's decode window attention is cut among: the window's rows and
    the token's own key in runs of about the decode attention's split_slots (split.glsl's
    regions hold max_splits of them), folded by the last to finish."""
    return max(1, min(t.max_splits, ceil_div(window + 1, t.split_slots)))


def record_window_attention(rec: PassRecorder, shape: PassShape, lw: LayerMatrices,
                            plane: int) -> None:
    """After the q|k|v product (and its barrier) of a WINDOW layer whose window planes are
    `plane`: QK-norm where the model has it, the attention into act's attn rows and, for a
    prefill pass, the store of its rows, without a barrier after it (the output product that
    follows runs beside it)."""
    cfg, a, sw, spec = rec.cfg, rec.res.act_layout, rec.t.small_wg, rec.window_spec
    if cfg.arch.qk_norm:  # RMSNorm per q and k head, then the window's RoPE, in act
        rec._dispatch("qk_norm", {"WG": sw, **spec}, (cfg.n_heads + cfg.n_kv_heads, shape.bucket),
                      in_off=a.q, norm_off=lw.qk_norm)
        rec._barrier()
    # A workgroup per (K/V head, token), of several subgroups over its candidate keys, where a
    # prefill chunk's tokens fill the device; decode's one token has a workgroup per (K/V
    # head, run of candidates), of many subgroups, and (flags 1) also stores its row.
    ctx = rec.pipes.ctx
    subgroups = min(DECODE_SUBGROUPS if shape.decode else PREFILL_SUBGROUPS,
                    max(1, ctx.limits.max_invocations // ctx.subgroup_size))
    runs = window_runs(rec.t, cfg.window) if shape.decode else 1
    rec._dispatch("window_attention", {"WG": subgroups * ctx.subgroup_size,
                                       "WINDOW_SUBGROUPS": subgroups, "WINDOW_SPLITS": runs,
                                       **spec},
                  (cfg.n_kv_heads, runs if shape.decode else shape.bucket), in_off=a.q,
                  out_off=a.attn, layer=plane, flags=int(shape.decode))
    rec._barrier()
    if not shape.decode:
        rec._dispatch("window_store", {"WG": sw, **spec},
                      (ceil_div(shape.bucket * 2 * cfg.kv_dim, sw), 1), in_off=a.q, layer=plane)
