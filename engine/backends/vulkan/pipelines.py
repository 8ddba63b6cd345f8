"""Compute pipelines: the committed SPIR-V, one descriptor-set layout, specialization constants.

Every shader shares one set layout (shaders/common.glsl lists the bindings) and one push-constant
block, so one pipeline layout serves them all and a conversation needs one descriptor set.
Pipelines differ by shader and specialization constants (sizes, weight encoding, epilogue) and
are cached per process.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from ...model.config import ModelConfig
from .context import Context
from .options import DEFAULT_SHADER_DIR
from .options import current as current_options

SHADER_DIR = DEFAULT_SHADER_DIR

# Specialization constant ids, as declared in shaders/common.glsl. 'f' marks a float.
SPEC_IDS = {
    "WG": 0, "R": 1, "T": 2, "SPLIT": 3, "QTYPE": 4, "MODE": 5, "NORM": 6, "K": 7, "M": 8,
    "D": 9, "HD": 10, "NH": 11, "NKV": 12, "F": 13, "S": 14, "PROWS": 15, "EPS": 16,
    "COS_OFF": 17, "SIN_OFF": 18, "NL": 19, "V": 20,
    "SPLIT_SLOTS": 21, "MAX_SPLITS": 22, "PV_TILE": 23, "PREFILL_SPLITS": 24,  # split.glsl
    "SCORE_MODE": 25, "SCORE_SCALE": 27,  # mass.comp's score update (26: retired)
    "PREFILL_RUN_TILES": 28,  # split.glsl
    "FOLD_LOADS": 29, "SPLIT_SUBGROUPS": 32, "VALUE_LOADS": 33,  # attention_split.comp
    "ARGMAX_GROUPS": 30, "ARGMAX_BASE": 31,  # argmax.glsl
    "ROPE_SPLIT": 34, "QKV_BIAS": 35, "QK_NORM": 36,  # the architecture's (common.glsl)
    "CONV_K": 37, "CONV_W": 42, "CONV_SILU": 43,  # shortconv.comp
    "DK": 44, "NKH": 45, "NVH": 46, "LANES": 55,  # delta_rule.comp
    "ROT_HALF": 47, "GATED_Q": 52,  # the architecture's (common.glsl)
    # Gemma 3's (common.glsl): window rows, GeGLU, the embedding and query scales.
    "WINDOW": 38, "GEGLU": 39, "EMBED_SCALE": 40, "Q_SCALE": 41,
    "WINDOW_SUBGROUPS": 53, "WINDOW_SPLITS": 54,  # window_attention.comp
    "INPUT_SSBO": 56, "W_SSBO": 57,  # matmul.comp; W_SSBO declared in common.glsl
}
FLOAT_SPECS = frozenset({"EPS", "SCORE_SCALE", "EMBED_SCALE", "Q_SCALE"})
PUSH_WORDS = 10  # uint fields of common.glsl's Push block

# Binding number -> descriptor type: 0 texel (uniform texel buffer), 1 storage buffer.
TEXEL, STORAGE = 0, 1
BINDINGS = {0: TEXEL, 1: TEXEL, 2: STORAGE, 3: STORAGE, 4: STORAGE, 5: TEXEL, 6: STORAGE,
            7: TEXEL, 8: STORAGE, 9: STORAGE, 10: STORAGE, 11: STORAGE, 12: STORAGE,
            13: STORAGE, 14: STORAGE, 15: TEXEL, 16: TEXEL, 17: STORAGE,
            18: STORAGE, 19: STORAGE,  # 18-19: shaders/split.glsl
            20: STORAGE,  # mass.comp: the arena's slot_salience
            21: STORAGE,  # shortconv.comp: the arena's conv_state or delta_conv
            22: STORAGE, 23: STORAGE,  # window_attention.comp: kw_cache, vw_cache
            24: STORAGE,  # delta_rule.comp: the arena's delta_state
            25: STORAGE, 26: STORAGE}  # common.glsl: WQ and WS as storage (W_SSBO)
SHADERS = ("matmul", "embed", "attention", "mass", "rmsnorm", "rope_rebase", "argmax",
           "attention_split", "matmul_tiled", "matmul_coopmat", "attention_prefill", "qk_norm",
           "shortconv", "delta_rule", "sigmoid_gate", "window_attention", "window_store")


def model_specs(cfg: ModelConfig) -> dict[str, float]:
    """The specialization of Gemma's features, each the value that compiles it out where the
    model does not have it: GeGLU; the embeddings' scale, sqrt(d_model) rounded to f32 as
    numpy (and HF) round it; the queries' scale, 0 (the shaders' own 1/sqrt(head_dim)) unless
    the model's rounds to another f32 (Gemma 3 27B's 1/sqrt(d_model / n_heads))."""
    f32 = np.float32
    q_scale = f32(cfg.q_scale)
    return {"GEGLU": int(cfg.arch.geglu),
            "EMBED_SCALE": float(f32(math.sqrt(cfg.d_model))) if cfg.arch.embed_scale else 1.0,
            "Q_SCALE": 0.0 if q_scale == f32(1.0 / math.sqrt(cfg.head_dim)) else float(q_scale)}


class MissingShaderError(FileNotFoundError):
    pass


class Pipelines:
    """The set layout, pipeline layout and a cache of specialized pipelines for one device."""

    def __init__(self, ctx: Context):
        v = ctx.vk
        self.ctx = ctx
        self.shader_dir = current_options().shader_dir  # options.shader_dir: other SPIR-V
        texel = v.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER
        storage = v.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER
        self.descriptor_types = {b: texel if k == TEXEL else storage for b, k in BINDINGS.items()}
        bindings = [v.VkDescriptorSetLayoutBinding(binding=b, descriptorType=t, descriptorCount=1,
                                                   stageFlags=v.VK_SHADER_STAGE_COMPUTE_BIT)
                    for b, t in self.descriptor_types.items()]
        layout_info = v.VkDescriptorSetLayoutCreateInfo(bindingCount=len(bindings),
                                                        pBindings=bindings)
        self.set_layout = v.vkCreateDescriptorSetLayout(ctx.device, layout_info, None)
        push = v.VkPushConstantRange(stageFlags=v.VK_SHADER_STAGE_COMPUTE_BIT, offset=0,
                                     size=4 * PUSH_WORDS)
        self.layout = v.vkCreatePipelineLayout(ctx.device, v.VkPipelineLayoutCreateInfo(
            setLayoutCount=1, pSetLayouts=[self.set_layout], pushConstantRangeCount=1,
            pPushConstantRanges=[push]), None)
        self._modules: dict[str, object] = {}
        self._pipelines: dict[tuple, object] = {}

    def module(self, name: str):
        if name not in self._modules:
            path = self.shader_dir / f"{name}.spv"
            try:
                code = path.read_bytes()
            except FileNotFoundError:
                raise MissingShaderError(
                    f"shader binary {path} is missing (run `make shaders`)") from None
            v = self.ctx.vk
            info = v.VkShaderModuleCreateInfo(codeSize=len(code), pCode=code)
            self._modules[name] = v.vkCreateShaderModule(self.ctx.device, info, None)
        return self._modules[name]

    def get(self, name: str, spec: dict[str, float]):
        """The pipeline of shader `name` with these specialization constants (cached)."""
        key = (name, tuple(sorted(spec.items())))
        if key not in self._pipelines:
            self._pipelines[key] = self._create(name, spec)
        return self._pipelines[key]

    def _create(self, name: str, spec: dict[str, float]):
        v, ffi = self.ctx.vk, self.ctx.ffi
        entries, data = [], b""
        for key, value in sorted(spec.items(), key=lambda kv: SPEC_IDS[kv[0]]):
            entries.append(v.VkSpecializationMapEntry(constantID=SPEC_IDS[key], offset=len(data),
                                                      size=4))
            data += struct.pack("<f" if key in FLOAT_SPECS else "<I", value)
        blob = ffi.new("char[]", data)
        info = v.VkSpecializationInfo(mapEntryCount=len(entries), pMapEntries=entries,
                                      dataSize=len(data), pData=blob)
        stage = v.VkPipelineShaderStageCreateInfo(stage=v.VK_SHADER_STAGE_COMPUTE_BIT,
                                                  module=self.module(name), pName="main",
                                                  pSpecializationInfo=info)
        create = v.VkComputePipelineCreateInfo(stage=stage, layout=self.layout)
        pipeline = v.vkCreateComputePipelines(self.ctx.device, None, 1, [create], None)[0]
        del blob, info  # kept alive until the driver has read them
        return pipeline


_pipelines: dict[int, Pipelines] = {}


def get_pipelines(ctx: Context) -> Pipelines:
    if id(ctx) not in _pipelines:
        _pipelines[id(ctx)] = Pipelines(ctx)
    return _pipelines[id(ctx)]
