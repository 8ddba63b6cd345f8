"""Re-submitting a recorded command buffer: the hot path of every decode step.

The submit info, fence and command-buffer arrays are built once as raw CFFI structs and the
driver entry points are called directly, skipping the `vulkan` package's per-call argument
conversion (~4.5 us a call) and its weak references (the structs live as long as this object).
"""

from __future__ import annotations

import time

from .context import FENCE_TIMEOUT_NS, Context

NOT_READY = 1  # VK_NOT_READY: the fence is not signalled yet
SPIN_S = 0.005  # longer steps (a prefill chunk) block instead


class Submission:
    def __init__(self, ctx: Context, command_buffer):
        v, ffi = ctx.vk, ctx.ffi
        self.ctx = ctx
        self._cbs = ffi.new("VkCommandBuffer[1]", [command_buffer])
        self._info = ffi.new("VkSubmitInfo*")
        self._info.sType = v.VK_STRUCTURE_TYPE_SUBMIT_INFO
        self._info.commandBufferCount = 1
        self._info.pCommandBuffers = self._cbs
        self.command_buffer = command_buffer
        self.fence = ctx.fence()
        self._fence = ffi.new("VkFence[1]", [self.fence])
        self._lib = v.lib

    def run(self) -> None:
        """Submit and wait until the device has finished (its writes are then host-visible)."""
        lib, ctx = self._lib, self.ctx
        with ctx.lock:
            rc = lib.vkQueueSubmit(ctx.queue, 1, self._info, self._fence[0])
            if rc == 0:
                rc = self._poll(lib, ctx) if ctx.is_gpu else NOT_READY
            if rc == NOT_READY:
                rc = lib.vkWaitForFences(ctx.device, 1, self._fence, 1, FENCE_TIMEOUT_NS)
            lib.vkResetFences(ctx.device, 1, self._fence)
        if rc != 0:
            raise RuntimeError(f"Vulkan submission failed (VkResult {rc})")

    def _poll(self, lib, ctx) -> int:
        """The fence's status after polling it for up to SPIN_S: 0 signalled, NOT_READY (the
        caller then blocks) or an error. A GPU's decode step takes about a millisecond, and
        waking from vkWaitForFences cost ~27 us of it on an H200 (an empty submission: 40 us
        blocking, 13 us polling). Not on a CPU device, whose cores lavapipe needs."""
        deadline = time.perf_counter() + SPIN_S
        rc = lib.vkGetFenceStatus(ctx.device, self._fence[0])
        while rc == NOT_READY and time.perf_counter() < deadline:
            rc = lib.vkGetFenceStatus(ctx.device, self._fence[0])
        return rc
