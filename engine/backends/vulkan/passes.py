"""Recording a forward pass into a command buffer, once; it is then re-submitted every step.

A recorded pass reads everything that changes per step (token ids, slot, position, count) from
the small parameter buffer, so decode needs one command buffer and prefill one per chunk-size
bucket. Dispatches are separated by global memory barriers; per layer decode costs five:
norm+qkv+RoPE+K/V write, split attention (its partials folded in the same dispatch),
wo+residual, norm+gate|up+SiLU, down+residual; then logits and one tail dispatch that computes
every layer's attention mass and the device argmax. A CONV layer (LFM2) costs five too:
norm+in_proj, the short convolution (shortconv.comp), out_proj+residual, and the same two for
its feed-forward. A WINDOW layer (Gemma 3) attends over its own circular plane (window.py).
Post-norms (Gemma) cost one more dispatch per residual add in prefill; in decode the product's
last workgroup adds them (matmul.comp's MODE_POSTNORM).
"""

from __future__ import annotations

from dataclasses import dataclass

from ...align import ceil_div
from ...model.architecture import CONV, DELTA, SPLIT_HALF, WINDOW
from ...model.config import ModelConfig
from ...state.evict_policy import SCORE_MODES, score_scale
from ...state.ring_policy import RingPolicy
from .chunks import Matrix
from .pipelines import PUSH_WORDS, Pipelines, model_specs
from .prefill import mass_pass, record_attention, record_product
from .profiler import DispatchTimer
from .recurrent import record_delta_net, record_short_conv
from .resources import ConversationResources
from .tuning import Tuning, matmul_tokens
from .weights import DeviceWeights, LayerMatrices
from .window import record_window_attention

MODE_STORE, MODE_QKV, MODE_RESID, MODE_GATEUP, MODE_LOGITS, MODE_POSTNORM = 0, 1, 2, 3, 4, 5
MODE_NAMES = ("store", "qkv", "resid", "gateup", "logits", "postnorm")


@dataclass(frozen=True)
class PassShape:
    bucket: int  # tokens the pass is recorded for (a step may use fewer: params.C)
    decode: bool  # one token; mass summed once over all layers
    logits: bool  # write next-token logits for the last token
    hidden: bool  # write final-normed rows for on_hidden


class PassRecorder:
    def __init__(self, pipes: Pipelines, weights: DeviceWeights, res: ConversationResources,
                 cfg: ModelConfig, policy: RingPolicy, tuning: Tuning):
        self.pipes, self.w, self.res, self.cfg, self.t = pipes, weights, res, cfg, tuning
        # The decode products may read the weights as storage buffers (W_SSBO) where every
        # chunk, sized for the texel limit, also fits one storage binding.
        limit = pipes.ctx.limits.max_storage_range
        self.weights_as_storage = tuning.ssbo_weights and all(
            b.size <= limit for b in (*weights.wq, *weights.ws))
        self.v = pipes.ctx.vk
        slots = policy.max_slots
        # Decode's tail and a prefill pass's last mass dispatch fold the mass into the ring's
        # scores by the policy's rule; the decay for the pass's C tokens comes with each step
        # (resources.set_step).
        self.scores = {"SCORE_MODE": SCORE_MODES.get(policy.evict, 0),
                       "SCORE_SCALE": score_scale(cfg)}
        self.common = {
            "D": cfg.d_model, "HD": cfg.head_dim, "NH": cfg.n_heads, "NKV": cfg.n_kv_heads,
            "F": cfg.ffn_dim, "S": slots, "PROWS": res.prows, "EPS": cfg.rms_eps,
            "COS_OFF": res.rope_offsets[0][0], "SIN_OFF": res.rope_offsets[0][1],
            "NL": cfg.n_full,
            "V": cfg.vocab_size, "SPLIT_SLOTS": tuning.split_slots,
            "MAX_SPLITS": tuning.max_splits, "PV_TILE": int(tuning.pv_tile),
            "PREFILL_SPLITS": tuning.prefill_splits, "PREFILL_RUN_TILES": tuning.prefill_run_tiles,
            "FOLD_LOADS": tuning.fold_loads, "SPLIT_SUBGROUPS": tuning.split_subgroups,
            "VALUE_LOADS": tuning.value_loads,
            "ARGMAX_GROUPS": tuning.argmax_groups, "ARGMAX_BASE": res.argmax_base,
            # The architecture's layout: 0 for llama's, whose shaders compile the code out.
            "ROPE_SPLIT": int(cfg.arch.rope_style == SPLIT_HALF),
            "QKV_BIAS": int(cfg.arch.qkv_bias), "QK_NORM": int(cfg.arch.qk_norm),
            # Partial rotary's pairs: only Qwen3.5 has it (gguf_file.py), whose QK-norm rotates.
            "ROT_HALF": cfg.rotary_dim // 2 if cfg.rotary_dim < cfg.head_dim else 0,
            "GATED_Q": int(cfg.arch.gated_query),
            # delta_rule.comp's sizes; never 0, as DK sizes its arrays (models without DELTA
            # layers never dispatch it).
            "CONV_K": cfg.conv_kernel, "DK": cfg.delta_head_dim or 16,
            "NKH": cfg.delta_k_heads or 1, "NVH": cfg.delta_v_heads or 1,
            # Gemma's: GeGLU, the embedding scale and the queries' (model_specs), and WINDOW
            # 0 but in a WINDOW layer's attention dispatches (window_spec).
            "WINDOW": 0, **model_specs(cfg),
        }
        # A WINDOW layer's attention: its window's rows, and its own RoPE rows.
        cos_w, sin_w = res.rope_offsets[-1]
        self.window_spec = {"WINDOW": cfg.window, "COS_OFF": cos_w, "SIN_OFF": sin_w}
        self.dispatches = 0
        self._bound = (0, 0)  # the descriptor set bound: (weight chunk, K/V group)
        self.timer: DispatchTimer | None = None  # set: record() stamps every dispatch
        self._timing: DispatchTimer | None = None  # the timer of the recording under way

    # -- command buffer plumbing ----------------------------------------------------------
    def record(self, cb, shape: PassShape) -> int:
        """Record `shape` into `cb`; returns the number of dispatches."""
        v = self.v
        self.cb, self.dispatches = cb, 0
        v.vkBeginCommandBuffer(cb, v.VkCommandBufferBeginInfo())
        self.bind(cb)
        self._timing = self.timer
        if self._timing is not None:
            self._timing.begin(cb)
        self._forward(shape)
        res = self.res
        if shape.logits and res.logits_host is not None:
            # Mirror the logits into host-cached memory: the sampler reads them every step.
            self._barrier(v.VK_ACCESS_TRANSFER_READ_BIT, v.VK_PIPELINE_STAGE_TRANSFER_BIT)
            offset, nbytes = res.logits_region
            v.vkCmdCopyBuffer(cb, res.arena_buf.handle, res.logits_buf.handle, 1,
                              [v.VkBufferCopy(srcOffset=offset, size=nbytes)])
            if self._timing is not None:
                self._timing.mark("copy:logits")
        barrier = v.VkMemoryBarrier(
            srcAccessMask=v.VK_ACCESS_SHADER_WRITE_BIT | v.VK_ACCESS_TRANSFER_WRITE_BIT,
            dstAccessMask=v.VK_ACCESS_HOST_READ_BIT)
        v.vkCmdPipelineBarrier(
            cb, v.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | v.VK_PIPELINE_STAGE_TRANSFER_BIT,
            v.VK_PIPELINE_STAGE_HOST_BIT, 0, 1, [barrier], 0, None, 0, None)
        v.vkEndCommandBuffer(cb)
        self._timing = None
        return self.dispatches

    def bind(self, cb, chunk: int = 0, group: int = 0) -> None:
        """Bind the descriptor set of weight chunk `chunk` and K/V layer group `group`."""
        v = self.v
        v.vkCmdBindDescriptorSets(cb, v.VK_PIPELINE_BIND_POINT_COMPUTE, self.pipes.layout, 0, 1,
                                  [self.res.sets.get(chunk, group)], 0, None)
        self._bound = (chunk, group)

    def _dispatch(self, shader: str, spec: dict, groups: tuple[int, ...], *,
                  chunk: int | None = None, kv_layer: int | None = None, **push: int) -> None:
        """groups: workgroups along x, y and (optionally) z. `chunk`: the weight chunk the
        dispatch reads; `kv_layer`: the layer whose K/V planes it reads or writes (passed to
        the shader as `layer`, within its group). Where the set bound holds another chunk or
        group, the one that holds these is bound first (a model that fits one binding of each
        never rebinds: one set)."""
        v, ffi = self.v, self.pipes.ctx.ffi
        want_chunk, want_group = self._bound
        if chunk is not None:
            want_chunk = chunk
        if kv_layer is not None:
            want_group, push["layer"] = self.res.kv_place(kv_layer)
        if (want_chunk, want_group) != self._bound:
            self.bind(self.cb, want_chunk, want_group)
        pipeline = self.pipes.get(shader, {**self.common, **spec})
        v.vkCmdBindPipeline(self.cb, v.VK_PIPELINE_BIND_POINT_COMPUTE, pipeline)
        fields = ("w_texel", "w_block", "norm_off", "in_off", "out_off", "layer", "p_row0",
                  "count", "flags", "per_t")
        words = ffi.new(f"uint32_t[{PUSH_WORDS}]", [push.get(f, 0) for f in fields])
        v.vkCmdPushConstants(self.cb, self.pipes.layout, v.VK_SHADER_STAGE_COMPUTE_BIT, 0,
                             4 * PUSH_WORDS, words)
        x, y, z = (*groups, 1)[:3]
        v.vkCmdDispatch(self.cb, max(1, x), max(1, y), max(1, z))
        self.dispatches += 1
        if self._timing is not None:
            mode = f":{MODE_NAMES[spec['MODE']]}:K{spec['K']}" if "MODE" in spec else ""
            self._timing.mark(shader + mode)

    def _barrier(self, dst_access: int | None = None, dst_stage: int | None = None) -> None:
        """Shader writes before this point are visible to what follows (shaders by default)."""
        v = self.v
        if dst_access is None:
            dst_access = v.VK_ACCESS_SHADER_READ_BIT | v.VK_ACCESS_SHADER_WRITE_BIT
        barrier = v.VkMemoryBarrier(srcAccessMask=v.VK_ACCESS_SHADER_WRITE_BIT,
                                    dstAccessMask=dst_access)
        v.vkCmdPipelineBarrier(self.cb, v.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                               dst_stage or v.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1,
                               [barrier], 0, None, 0, None)

    # -- the pass -------------------------------------------------------------------------
    def _matmul(self, shape: PassShape, mode: int, m: Matrix, *, norm: int | None,
                in_off: int, out_off: int, layer: int | None = None, bias: int = 0,
                gates: int = 0, extra: dict | None = None, post_norm: int = 0) -> None:
        """`layer`: q|k|v's, whose K/V planes the epilogue writes; `bias`: its q|k|v bias
        (where QKV_BIAS); `gates`: where it stores a gated query's gates (GATED_Q); `extra`:
        specialization beyond the model's (a WINDOW layer's); `post_norm`: MODE_POSTNORM's
        norm weights (VEC). The logits' `out_off` is the first logit a piece of the output
        matrix writes."""
        t = self.t
        gate_up = mode == MODE_GATEUP
        if mode != MODE_LOGITS and record_product(self, shape, mode, m, gate_up=gate_up,
                                                  norm=norm, in_off=in_off, out_off=out_off,
                                                  kv_layer=layer, bias=bias, gates=gates,
                                                  extra=extra):
            return
        rows = m.rows // 2 if gate_up else m.rows
        tokens = 1 if mode == MODE_LOGITS else matmul_tokens(
            t, gate_up, self.pipes.ctx.limits.max_shared_bytes, shape.decode)
        r = t.logits_r if mode == MODE_LOGITS else t.rows
        spec = {"WG": t.wg, "R": r, "T": tokens, "SPLIT": t.split, "QTYPE": m.qtype,
                "MODE": mode, "NORM": int(norm is not None), "K": m.cols, "M": rows,
                "INPUT_SSBO": int(t.ssbo_inputs),
                "W_SSBO": int(self.weights_as_storage), **(extra or {})}
        groups = (ceil_div(rows, r * (t.wg // t.split)),
                  1 if mode == MODE_LOGITS else ceil_div(shape.bucket, tokens))
        self._dispatch("matmul", spec, groups, chunk=m.chunk, kv_layer=layer, w_texel=m.texel,
                       w_block=m.block, norm_off=norm or post_norm, in_off=in_off, out_off=out_off,
                       count=bias, per_t=gates)

    def store_product(self, shape: PassShape, m: Matrix, *, norm: int | None, in_off: int,
                      out_off: int) -> None:
        """Y = X W^T stored as is (MODE_STORE), rows of m.rows at `out_off`: the products a
        layer's own shader reads next (recurrent.py's)."""
        self._matmul(shape, MODE_STORE, m, norm=norm, in_off=in_off, out_off=out_off)

    def _attention(self, shape: PassShape, lw: LayerMatrices, plane: int) -> None:
        """Attention over the ring, plane `plane` of its K/V, into the residual stream; a
        prefill pass also sums the layer's mass (the ring's last layer folds it into the
        scores)."""
        cfg, a, sw = self.cfg, self.res.act_layout, self.t.small_wg
        self._matmul(shape, MODE_QKV, lw.qkv, norm=lw.attn_norm, in_off=a.x, out_off=a.q,
                     layer=plane, bias=lw.qkv_bias, gates=a.aux)
        self._barrier()
        if cfg.arch.qk_norm:  # RMSNorm per q and k head, then RoPE: QK-norm models only
            self._dispatch("qk_norm", {"WG": sw}, (cfg.n_heads + cfg.n_kv_heads, shape.bucket),
                           in_off=a.q, norm_off=lw.qk_norm, kv_layer=plane)
            self._barrier()
        if shape.decode:  # split over the live slots; the shader picks the split count
            wg = self.pipes.ctx.subgroup_size * self.t.split_subgroups
            self._dispatch("attention_split", {"WG": wg}, (self.t.max_splits, cfg.n_kv_heads),
                           in_off=a.q, out_off=a.attn, kv_layer=plane,
                           p_row0=plane * cfg.n_heads)
        elif not record_attention(self, shape, in_off=a.q, out_off=a.attn, layer=plane):
            self._dispatch("attention", {"WG": self.pipes.ctx.subgroup_size},
                           (cfg.n_kv_heads, shape.bucket),
                           in_off=a.q, out_off=a.attn, kv_layer=plane, p_row0=0)
        self._barrier()
        if not shape.decode:  # runs beside wo: both only read what attention wrote
            # The last layer's also folds the pass's mass into the ring's scores (16).
            spec, groups, runs = mass_pass(self.t, shape, self.common["S"], sw)
            last = plane == cfg.n_full - 1
            self._dispatch("mass", {**spec, **self.scores}, groups, p_row0=0,
                           count=shape.bucket * cfg.n_heads,
                           flags=int(plane > 0) | runs | 16 * int(last), per_t=cfg.n_heads)
        if cfg.arch.gated_query:  # attention's output times sigmoid(gate), before wo
            self._dispatch("sigmoid_gate", {"WG": sw},
                           (ceil_div(shape.bucket * cfg.q_dim, sw), 1), in_off=a.aux,
                           out_off=a.attn)
            self._barrier()
        self._project_residual(shape, lw.wo, a.attn, lw.post_attn_norm)

    def _window_attention(self, shape: PassShape, lw: LayerMatrices, plane: int) -> None:
        """A WINDOW layer's attention (Gemma 3) over its circular plane `plane`, into the
        residual stream: its q|k|v stay in act (window_spec), then window.py records the
        rest."""
        a = self.res.act_layout
        self._matmul(shape, MODE_QKV, lw.qkv, norm=lw.attn_norm, in_off=a.x, out_off=a.q,
                     bias=lw.qkv_bias, extra=self.window_spec)
        self._barrier()
        record_window_attention(self, shape, lw, plane)
        self._project_residual(shape, lw.wo, a.attn, lw.post_attn_norm)

    def _project_residual(self, shape: PassShape, m: Matrix, in_off: int,
                          post_norm: int) -> None:
        """x += the rows at `in_off` times m^T: in the product's epilogue (MODE_RESID), or
        where the model norms the product first (post-norms, Gemma: VEC `post_norm`) in the
        last workgroup of a decode product (MODE_POSTNORM), else stored to the y rows and
        added by rmsnorm.comp, as the norm spans the row, which spans the product's
        workgroups. Then a barrier."""
        a = self.res.act_layout
        if self.cfg.arch.post_norms and shape.decode:
            self._matmul(shape, MODE_POSTNORM, m, norm=None, in_off=in_off, out_off=a.x,
                         post_norm=post_norm)
        elif self.cfg.arch.post_norms:
            self._matmul(shape, MODE_STORE, m, norm=None, in_off=in_off, out_off=a.y)
            self._barrier()
            self._dispatch("rmsnorm", {"WG": self.t.small_wg}, (shape.bucket, 1), in_off=a.y,
                           out_off=a.x, norm_off=post_norm, flags=1)
        else:
            self._matmul(shape, MODE_RESID, m, norm=None, in_off=in_off, out_off=a.x)
        self._barrier()

    def _forward(self, shape: PassShape) -> None:
        cfg, w, a, sw = self.cfg, self.w, self.res.act_layout, self.t.small_wg
        per_token_blocks = cfg.d_model // 32
        for piece in w.embed:  # each token's row is in one piece; the others skip it
            self._dispatch("embed", {"WG": sw, "QTYPE": piece.qtype},
                           (ceil_div(shape.bucket * per_token_blocks, sw), 1), chunk=piece.chunk,
                           w_texel=piece.texel, w_block=piece.block, out_off=a.x,
                           p_row0=piece.row0, count=piece.rows)
        self._barrier()
        for i, lw in enumerate(w.layers):
            if lw.kind == CONV:
                record_short_conv(self, shape, lw, cfg.plane(i))
            elif lw.kind == DELTA:
                record_delta_net(self, shape, lw, cfg.plane(i))
            elif lw.kind == WINDOW:
                self._window_attention(shape, lw, cfg.plane(i))
            else:
                self._attention(shape, lw, cfg.plane(i))
            self._matmul(shape, MODE_GATEUP, lw.gate_up, norm=lw.ffn_norm, in_off=a.x,
                         out_off=a.ffn)
            self._barrier()
            self._project_residual(shape, lw.down, a.ffn, lw.post_ffn_norm)
        if shape.hidden:
            self._dispatch("rmsnorm", {"WG": sw}, (shape.bucket, 1), in_off=a.x,
                           norm_off=w.output_norm)
        if shape.logits:
            for piece in w.output:  # disjoint rows of the logits: no barrier between pieces
                self._matmul(shape, MODE_LOGITS, piece, norm=w.output_norm, in_off=a.x,
                             out_off=piece.row0)
            self._barrier()
        if shape.decode:
            # Every layer's mass from its split factors (2), folded into the ring's scores (16),
            # and the greedy argmax in argmax_groups more workgroups (4): the tail of the step
            # is one dispatch, and the CPU reads nothing of the arena back.
            rows, per_wg = cfg.n_full * cfg.n_heads, sw // self.t.mass_split
            argmax = self.t.argmax_groups * int(shape.logits)
            self._dispatch("mass", {"WG": sw, "SPLIT": self.t.mass_split, **self.scores},
                           (ceil_div(self.common["S"], per_wg) + argmax, 1), p_row0=0,
                           count=rows, flags=2 | 4 * int(shape.logits) | 16, per_t=rows)
        elif shape.logits:
            # Greedy support: a few microseconds, so every logits pass carries it.
            self._dispatch("argmax", {"WG": self.t.small_wg}, (self.t.argmax_groups, 1))

