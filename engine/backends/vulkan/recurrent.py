"""Recording the layers whose state is a fixed-size recurrent plane (passes.py): LFM2's short
convolutions (CONV) and Qwen3.5's gated delta nets (DELTA), each in attention's place between
the layer's operator norm and its residual add.

Their carries and states live in the arena (conv_state or delta_conv at binding 21,
delta_state at binding 24) and follow every token: nothing of them enters the ring or its
attention mass, and a rebase leaves them alone. Both convolutions run shortconv.comp, one
invocation a channel walking the pass's tokens in order (CONV_SILU picks the delta net's
form); the delta rule runs delta_rule.comp, one workgroup a value head holding the head's
state in registers for the whole pass, four invocations a row (delta_lanes).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ...align import ceil_div
from .loader import UnsupportedModelForVulkanError

if TYPE_CHECKING:
    from .passes import PassRecorder, PassShape
    from .weights import LayerMatrices


def delta_lanes(head_dim: int, max_invocations: int) -> int:
    """Invocations per row of a delta-rule head's state (delta_rule.comp's LANES): 4 where
    the workgroup may be that large, so that a row's share fits the registers; each share
    must be a whole number of vec4s. 0 where no split fits (delta_width_problem)."""
    for lanes in (4, 2, 1):
        if head_dim % (4 * lanes) == 0 and head_dim * lanes <= max_invocations:
            return lanes
    return 0


def delta_width_problem(head_dim: int, max_invocations: int) -> str | None:
    """Why delta_rule.comp cannot run heads `head_dim` wide on this device, or None."""
    if delta_lanes(head_dim, max_invocations):
        return None
    return (f"the Vulkan backend runs delta-rule heads a multiple of 4 wide and at most "
            f"{max_invocations} wide, not {head_dim}")


def record_short_conv(rec: PassRecorder, shape: PassShape, lw: LayerMatrices,
                      plane: int) -> None:
    """A CONV layer, carry plane `plane`, into the residual stream: in_proj (B | C | x), the
    convolution (C * conv(B * x)), out_proj. Five dispatches with its feed-forward, as a
    llama attention layer."""
    a, sw, d = rec.res.act_layout, rec.t.small_wg, rec.cfg.d_model
    rec.store_product(shape, lw.qkv, norm=lw.attn_norm, in_off=a.x, out_off=a.q)
    rec._barrier()
    rec._dispatch("shortconv", {"WG": sw, "CONV_W": d}, (ceil_div(d, sw), 1),
                  in_off=a.q, out_off=a.attn, norm_off=lw.conv_taps, layer=plane)
    rec._barrier()
    rec._project_residual(shape, lw.wo, a.attn, lw.post_attn_norm)


def record_delta_net(rec: PassRecorder, shape: PassShape, lw: LayerMatrices,
                     plane: int) -> None:
    """A DELTA layer, carry and state plane `plane`, into the residual stream: the three input
    products (q|k|v, z, beta|alpha: independent, so no barrier between them), the
    convolution with SiLU, the delta rule with its gated norm, then ssm_out."""
    cfg, a, sw = rec.cfg, rec.res.act_layout, rec.t.small_wg
    beta_alpha = a.aux + rec.res.cmax * cfg.delta_inner
    for m, out in ((lw.qkv, a.q), (lw.delta_z, a.aux), (lw.delta_ba, beta_alpha)):
        rec.store_product(shape, m, norm=lw.attn_norm, in_off=a.x, out_off=out)
    rec._barrier()
    width = cfg.delta_conv_dim
    rec._dispatch("shortconv", {"WG": sw, "CONV_W": width, "CONV_SILU": 1},
                  (ceil_div(width, sw), 1),
                  in_off=a.q, out_off=a.attn, norm_off=lw.conv_taps, layer=plane)
    rec._barrier()
    # The rule's output goes to the q rows: the projection there is spent.
    dk = cfg.delta_head_dim
    lanes = delta_lanes(dk, rec.pipes.ctx.limits.max_invocations)
    if not lanes:  # VulkanBackend.shape_problem refuses such a model before recording
        raise UnsupportedModelForVulkanError(
            delta_width_problem(dk, rec.pipes.ctx.limits.max_invocations))
    rec._dispatch("delta_rule", {"WG": dk * lanes, "LANES": lanes}, (cfg.delta_v_heads, 1),
                  in_off=a.attn, out_off=a.q, norm_off=lw.delta_vec, layer=plane,
                  p_row0=a.aux, per_t=beta_alpha)
    rec._barrier()
    rec._project_residual(shape, lw.wo, a.q, lw.post_attn_norm)
