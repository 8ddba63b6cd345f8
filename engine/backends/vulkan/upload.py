"""One-shot command buffers: copies from staging memory and buffer fills, waited on."""

from __future__ import annotations

from .buffers import DeviceBuffer
from .context import FENCE_TIMEOUT_NS, Context


def run_once(ctx: Context, record) -> None:
    """Record with `record(cb)`, submit, wait, free."""
    v = ctx.vk
    cb = ctx.command_buffers(1)[0]
    v.vkBeginCommandBuffer(cb, v.VkCommandBufferBeginInfo(
        flags=v.VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT))
    record(cb)
    barrier = v.VkMemoryBarrier(srcAccessMask=v.VK_ACCESS_TRANSFER_WRITE_BIT,
                                dstAccessMask=v.VK_ACCESS_SHADER_READ_BIT
                                | v.VK_ACCESS_SHADER_WRITE_BIT | v.VK_ACCESS_HOST_READ_BIT)
    v.vkCmdPipelineBarrier(cb, v.VK_PIPELINE_STAGE_TRANSFER_BIT,
                           v.VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | v.VK_PIPELINE_STAGE_HOST_BIT,
                           0, 1, [barrier], 0, None, 0, None)
    v.vkEndCommandBuffer(cb)
    fence = ctx.fence()
    with ctx.lock:
        v.vkQueueSubmit(ctx.queue, 1, [v.VkSubmitInfo(commandBufferCount=1,
                                                      pCommandBuffers=[cb])], fence)
        v.vkWaitForFences(ctx.device, 1, [fence], v.VK_TRUE, FENCE_TIMEOUT_NS)
    v.vkDestroyFence(ctx.device, fence, None)
    v.vkFreeCommandBuffers(ctx.device, ctx.pool, 1, [cb])


def copy_buffers(ctx: Context, copies: list[tuple[DeviceBuffer, DeviceBuffer, int]]) -> None:
    """Copy each (src, dst, nbytes) from offset 0, on the device."""
    v = ctx.vk

    def record(cb) -> None:
        for src, dst, nbytes in copies:
            v.vkCmdCopyBuffer(cb, src.handle, dst.handle, 1, [v.VkBufferCopy(size=nbytes)])

    run_once(ctx, record)


def fill_zero(ctx: Context, buf: DeviceBuffer) -> None:
    """Zero a whole buffer on the device (for a GPU: no host page is touched)."""
    size = buf.size - buf.size % 4
    run_once(ctx, lambda cb: ctx.vk.vkCmdFillBuffer(cb, buf.handle, 0, size, 0))
