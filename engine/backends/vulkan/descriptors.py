"""A conversation's descriptor sets: one per (weight chunk, K/V layer group) its passes use.

No binding may pass the device's limits: a texel view holds at most maxTexelBufferElements
texels and a storage binding at most maxStorageBufferRange bytes. The weights are packed into
chunks under the first (chunks.py); the arena's K and V planes ([layers, slots, kv_dim] f32,
4.3 GB each for an 8B model at 32k slots) are bound a group of whole layers at a time, the
shaders indexing them by the layer within its group. Every other binding is the same in every
set. A model whose weights and planes each fit one binding has one set, bound once per
recorded command buffer as before; otherwise passes.py binds the set a dispatch needs where it
differs from the one bound.
"""

from __future__ import annotations

import weakref
from math import gcd

from .buffers import R32_UINT, RGBA32_SFLOAT, RGBA32_UINT, DeviceBuffer
from .context import Context
from .pipelines import BINDINGS, TEXEL, Pipelines
from .weights import DeviceWeights

Region = tuple[DeviceBuffer, int, int]  # buffer, offset, bytes
# A binding's source: a storage region, or (region, texel format, bytes per texel).
Spec = Region | tuple[Region, int, int]


def kv_groups(ctx: Context, n_layers: int, plane_bytes: int) -> list[tuple[int, int]]:
    """(first layer, layers) of each group whose K (or V) planes, `plane_bytes` a layer, fit
    one storage binding and one RGBA32F texel view, each group starting aligned."""
    lim = ctx.limits
    per = min(lim.max_storage_range // plane_bytes, lim.max_texel_elements // (plane_bytes // 16))
    if per >= n_layers:
        return [(0, n_layers)]
    align = max(lim.storage_offset_align, lim.texel_offset_align)
    step = align // gcd(plane_bytes, align)  # layers per aligned group start
    per -= per % step
    if per == 0:
        raise ValueError(
            f"one layer's K/V plane ({plane_bytes} bytes) exceeds this device's "
            f"maxStorageBufferRange ({lim.max_storage_range} bytes) or maxTexelBufferElements "
            f"({lim.max_texel_elements}): use a smaller ring (fewer slots)")
    return [(first, min(per, n_layers - first)) for first in range(0, n_layers, per)]


class DescriptorSets:
    def __init__(self, ctx: Context, pipes: Pipelines, weights: DeviceWeights,
                 shared: dict[int, Spec], k_plane: Region, v_plane: Region,
                 groups: list[tuple[int, int]], plane_bytes: int):
        """`k_plane`/`v_plane`: the arena's whole K and V regions; `groups` from kv_groups."""
        self.ctx, self.pipes, self.w = ctx, pipes, weights
        self.shared, self.k, self.v = shared, k_plane, v_plane
        self.groups, self.plane_bytes = groups, plane_bytes
        self._sets: dict[tuple[int, int], object] = {}
        self._views: dict[tuple, object] = {}  # (binding, chunk or group) -> texel view

    def get(self, chunk: int, group: int):
        """The set binding weight chunk `chunk` and K/V layer group `group` (made once)."""
        key = (chunk, group)
        if key not in self._sets:
            self._sets[key] = self._make(chunk, group)
        return self._sets[key]

    def _spec(self, binding: int, chunk: int, group: int) -> Spec:
        if binding in (0, 1):
            buf = (self.w.wq if binding == 0 else self.w.ws)[chunk]
            fmt, size = (RGBA32_UINT, 16) if binding == 0 else (R32_UINT, 4)
            return (buf, 0, buf.size), fmt, size
        if binding in (25, 26):  # the same chunk as storage, clipped: weights_as_storage
            buf = (self.w.wq if binding == 25 else self.w.ws)[chunk]
            return buf, 0, min(buf.size, self.ctx.limits.max_storage_range)
        if binding in (4, 5, 6, 7):
            buf, off, _ = self.k if binding < 6 else self.v
            first, count = self.groups[group]
            region = (buf, off + first * self.plane_bytes, count * self.plane_bytes)
            return region if binding in (4, 6) else (region, RGBA32_SFLOAT, 16)
        return self.shared[binding]

    def _view(self, binding: int, variant: int, spec: Spec):
        key = (binding, variant)
        if key not in self._views:
            (buf, off, nbytes), fmt, texel_bytes = spec
            self._views[key] = buf.texel_view(fmt, off, nbytes - nbytes % texel_bytes,
                                              texel_bytes)
        return self._views[key]

    def _make(self, chunk: int, group: int):
        v, ctx, pipes = self.ctx.vk, self.ctx, self.pipes
        texel_n = sum(1 for k in BINDINGS.values() if k == TEXEL)
        sizes = [v.VkDescriptorPoolSize(type=v.VK_DESCRIPTOR_TYPE_UNIFORM_TEXEL_BUFFER,
                                        descriptorCount=texel_n),
                 v.VkDescriptorPoolSize(type=v.VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                        descriptorCount=len(BINDINGS) - texel_n)]
        pool = v.vkCreateDescriptorPool(ctx.device, v.VkDescriptorPoolCreateInfo(
            maxSets=1, poolSizeCount=2, pPoolSizes=sizes), None)
        dset = v.vkAllocateDescriptorSets(ctx.device, v.VkDescriptorSetAllocateInfo(
            descriptorPool=pool, descriptorSetCount=1, pSetLayouts=[pipes.set_layout]))[0]
        release = weakref.finalize(self, v.vkDestroyDescriptorPool, ctx.device, pool, None)
        release.atexit = False
        writes, keep = [], []
        for binding in BINDINGS:
            kind = pipes.descriptor_types[binding]
            spec = self._spec(binding, chunk, group)
            if BINDINGS[binding] == TEXEL:
                variant = chunk if binding in (0, 1) else group if binding in (5, 7) else 0
                view = self._view(binding, variant, spec)
                writes.append(v.VkWriteDescriptorSet(dstSet=dset, dstBinding=binding,
                                                     descriptorCount=1, descriptorType=kind,
                                                     pTexelBufferView=[view]))
            else:
                buf, off, nbytes = spec
                check_storage(ctx, buf, off, nbytes)
                info = v.VkDescriptorBufferInfo(buffer=buf.handle, offset=off, range=nbytes)
                keep.append(info)
                writes.append(v.VkWriteDescriptorSet(dstSet=dset, dstBinding=binding,
                                                     descriptorCount=1, descriptorType=kind,
                                                     pBufferInfo=[info]))
        v.vkUpdateDescriptorSets(ctx.device, len(writes), writes, 0, None)
        del keep  # the buffer infos had to outlive the update only
        return dset


# What makes each scratch or weight buffer large, for a refusal's advice (the arena and the
# probability rows grow with the ring's slots).
STORAGE_HINTS = {
    "weights.vec": "the model's norm and bias vectors; this device cannot bind them",
    "act": "use a smaller prefill chunk",
}


def check_storage(ctx: Context, buf: DeviceBuffer, offset: int, nbytes: int) -> None:
    lim = ctx.limits
    if offset % lim.storage_offset_align:
        raise ValueError(f"{buf.label}: storage offset {offset} is misaligned")
    if nbytes > lim.max_storage_range:
        hint = STORAGE_HINTS.get(buf.label, "use a smaller ring: fewer slots")
        raise ValueError(
            f"{buf.label}: a {nbytes}-byte region exceeds this device's maxStorageBufferRange "
            f"of {lim.max_storage_range} bytes ({hint})")
