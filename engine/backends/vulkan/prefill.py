"""Prefill's tiled dispatches, for chunks of `Tuning.tiled_from` tokens or more.

Matrix products go to matmul_coopmat (cooperative matrices: tensor cores) where the device
offers them, else to matmul_tiled (shared-memory tiles); attention goes to attention_prefill
and the per-layer attention mass to mass.comp with 8 invocations a slot. For other pass
shapes passes.py records matmul.comp, attention.comp and mass.comp (decode:
attention_split.comp and the mass tail).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...align import ceil_div
from .tuning import Tuning

if TYPE_CHECKING:
    from .chunks import Matrix
    from .passes import PassRecorder, PassShape

TILE_ROWS = 64  # weight rows per product tile (gate|up: 32 gate rows and their 32 up rows)
COOPMAT_SUBGROUPS = 4  # the shader's 2 x 2 grid of subgroups over a tile
ATTN_WG = 128  # a multiple of its 32-slot tiles; Tuning.prefill_queries x 32 scores: 1-4 each
MASS_SLOTS, MASS_WG = 8, 256  # tiled chunks' mass.comp: 8 slots a workgroup, 32 rows at once
MASS_RUNS = 8  # mass.comp flag: rows' factors are per run of slots (attention_prefill's runs)


def tiled(t: Tuning, shape: PassShape) -> bool:
    return not shape.decode and 0 < t.tiled_from <= shape.bucket


def product_tile(t: Tuning, bucket: int, coopmat: bool, subgroup: int,
                 row_tiles: int = 1) -> tuple[str, int, int]:
    """(shader, tokens per tile, workgroup size) of a tiled product over `bucket` tokens
    whose output rows make `row_tiles` tiles."""
    if coopmat and t.coopmat:
        wide = 0 < t.coopmat_wide <= row_tiles * ceil_div(bucket, 64)
        return "matmul_coopmat", 64 if wide else t.coopmat_tokens, COOPMAT_SUBGROUPS * subgroup
    tokens = 64 if bucket >= 64 else 32 if bucket >= 32 else 16
    return "matmul_tiled", tokens, (TILE_ROWS // 4) * (tokens // 4)  # 4 x 4 outputs each


def attention_tiles(t: Tuning, bucket: int) -> int:
    """Query tiles of attention_prefill over `bucket` tokens (one fold counter each, per head)."""
    return ceil_div(bucket, t.prefill_queries)


def record_product(rec: PassRecorder, shape: PassShape, mode: int, m: Matrix, *,
                   gate_up: bool, norm: int | None, in_off: int, out_off: int,
                   kv_layer: int | None, bias: int = 0, gates: int = 0,
                   extra: dict | None = None) -> bool:
    """Record Y = X W^T over the chunk in tiles with matmul.comp's epilogue `mode` (not the
    logits: one token), `extra` specialization beyond the model's (a WINDOW layer's); False
    if this pass shape is not tiled (decode, small chunks)."""
    if not tiled(rec.t, shape):
        return False
    ctx = rec.pipes.ctx
    rows = m.rows // 2 if gate_up else m.rows
    out_rows = TILE_ROWS // 2 if gate_up else TILE_ROWS
    shader, tokens, wg = product_tile(rec.t, shape.bucket, ctx.coopmat, ctx.subgroup_size,
                                      ceil_div(rows, out_rows))
    spec = {"WG": wg, "R": TILE_ROWS, "T": tokens, "QTYPE": m.qtype, "MODE": mode,
            "NORM": int(norm is not None), "K": m.cols, "M": rows, **(extra or {})}
    groups = (ceil_div(rows, out_rows), ceil_div(shape.bucket, tokens))
    rec._dispatch(shader, spec, groups, chunk=m.chunk, kv_layer=kv_layer, w_texel=m.texel,
                  w_block=m.block, norm_off=norm or 0, in_off=in_off, out_off=out_off,
                  count=bias, per_t=gates)
    return True


def record_attention(rec: PassRecorder, shape: PassShape, *, in_off: int, out_off: int,
                     layer: int) -> bool:
    """Record the chunk's causal attention in query tiles (and runs of slots, up to
    Tuning.prefill_splits per tile; the shader skips those past a tile's slots); False if not
    tiled."""
    t = rec.t
    if not tiled(t, shape):
        return False
    groups = (rec.cfg.n_heads, attention_tiles(t, shape.bucket), t.prefill_splits)
    rec._dispatch("attention_prefill", {"WG": ATTN_WG, "T": t.prefill_queries}, groups,
                  in_off=in_off, out_off=out_off, kv_layer=layer, p_row0=0)
    return True


def mass_pass(t: Tuning, shape: PassShape, slots: int,
              small_wg: int) -> tuple[dict, tuple[int, int], int]:
    """(specialization, groups, flags) of a prefill layer's mass.comp dispatch: a tiled chunk's
    bucket * n_heads rows are summed 8 invocations to a slot, by their runs' factors where
    attention_prefill split the slots."""
    if tiled(t, shape):
        spec = {"WG": MASS_WG, "SPLIT": MASS_WG // MASS_SLOTS}
        return spec, (ceil_div(slots, MASS_SLOTS), 1), MASS_RUNS * int(t.prefill_splits > 1)
    return {"WG": small_wg}, (ceil_div(slots, small_wg), 1), 0
