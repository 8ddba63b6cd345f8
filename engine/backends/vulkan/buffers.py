"""Device buffers: one VkBuffer bound to its own VkDeviceMemory, optionally mapped into numpy.

A mapped buffer hands out a uint8 ndarray over the mapping whose base object holds the buffer,
so the memory cannot be freed while any numpy view of it is alive. Buffers are freed by a
finalizer, never at interpreter exit (the device outlives them; the OS reclaims the rest).
"""

from __future__ import annotations

import weakref

import numpy as np

from .context import DEVICE_LOCAL, HOST_CACHED, HOST_COHERENT, HOST_VISIBLE, Context

__all__ = ["DEVICE_LOCAL", "HOST_CACHED", "HOST_COHERENT", "HOST_VISIBLE", "DeviceBuffer"]

STORAGE, TEXEL, SRC, DST = 0x20, 0x4, 0x1, 0x2  # VkBufferUsageFlagBits used here
ALL_USES = STORAGE | TEXEL | SRC | DST
HOST_ALLOCATION = 0x80  # VK_EXTERNAL_MEMORY_HANDLE_TYPE_HOST_ALLOCATION_BIT_EXT
R32_UINT, RGBA32_UINT, RGBA32_SFLOAT, R32_SFLOAT = 98, 107, 109, 100  # VkFormat values


class _Mapping:
    """Exposes a mapped pointer to numpy and keeps the owning buffer alive with every view."""

    def __init__(self, owner: DeviceBuffer, address: int, size: int):
        self.owner = owner
        self.__array_interface__ = {"shape": (size,), "typestr": "|u1",
                                    "data": (address, False), "version": 3}


class DeviceBuffer:
    def __init__(self, ctx: Context, size: int, want: int, prefer: int = 0,
                 usage: int = ALL_USES, label: str = "buffer", host: np.ndarray | None = None):
        """Allocate `size` bytes, or import `host` (page-aligned, zeroed numpy memory that then
        backs the buffer; only where the device offers VK_EXT_external_memory_host)."""
        v = ctx.vk
        self.ctx, self.size, self.label = ctx, int(size), label
        dev = ctx.device
        info = v.VkBufferCreateInfo(size=self.size, usage=usage,
                                    sharingMode=v.VK_SHARING_MODE_EXCLUSIVE)
        if host is not None:
            info.pNext = v.ffi.addressof(external := v.VkExternalMemoryBufferCreateInfo(
                handleTypes=HOST_ALLOCATION))
        self.handle = v.vkCreateBuffer(dev, info, None)
        req = v.vkGetBufferMemoryRequirements(dev, self.handle)
        index = ctx.memory_type(int(req.memoryTypeBits), want, prefer, min_heap=self.size)
        if index is None:
            v.vkDestroyBuffer(dev, self.handle, None)
            raise MemoryError(f"no Vulkan memory type for {label} with flags {want:#x}")
        self.memory_flags = ctx.memory_flags(index)
        alloc = v.VkMemoryAllocateInfo(allocationSize=int(req.size), memoryTypeIndex=index)
        if host is not None:
            alloc.allocationSize = host.nbytes
            alloc.pNext = v.ffi.addressof(imported := v.VkImportMemoryHostPointerInfoEXT(
                handleType=HOST_ALLOCATION, pHostPointer=v.ffi.cast("void*", host.ctypes.data)))
        self.memory = v.vkAllocateMemory(dev, alloc, None)
        del info, alloc  # the pNext structs above had to outlive these two calls only
        if host is not None:
            del external, imported
        v.vkBindBufferMemory(dev, self.handle, self.memory, 0)
        self._host = host  # imported memory: numpy owns it, so it must outlive the buffer
        self._views: list = []
        self._address = 0
        if host is not None:
            self._address = host.ctypes.data
        elif self.memory_flags & HOST_VISIBLE:
            mapped = v.vkMapMemory(dev, self.memory, 0, self.size, 0)
            self._address = np.frombuffer(mapped, np.uint8).ctypes.data
        self._finalizer = weakref.finalize(self, _free, ctx, self.handle, self.memory,
                                           self._views, host)
        self._finalizer.atexit = False

    @property
    def array(self) -> np.ndarray:
        """The whole buffer as a uint8 array; every view keeps this buffer alive. (Built on
        each call: a stored array would form a cycle that numpy arrays cannot collect.)"""
        if not self._address:
            raise ValueError(f"{self.label} is not host-visible")
        return np.asarray(_Mapping(self, self._address, self.size))

    @property
    def host_visible(self) -> bool:
        return bool(self._address)

    @property
    def address(self) -> int:
        if not self._address:
            raise ValueError(f"{self.label} is not host-visible")
        return self._address

    def describe_memory(self) -> str:
        f = self.memory_flags
        names = [n for bit, n in ((DEVICE_LOCAL, "DEVICE_LOCAL"), (HOST_VISIBLE, "HOST_VISIBLE"),
                                  (HOST_COHERENT, "HOST_COHERENT"), (HOST_CACHED, "HOST_CACHED"))
                 if f & bit]
        return "|".join(names) or "none"

    def texel_view(self, fmt: int, offset: int, nbytes: int, texel_bytes: int):
        """A buffer view over [offset, offset + nbytes) read as texels of `fmt`."""
        lim = self.ctx.limits
        if offset % lim.texel_offset_align:
            raise ValueError(f"{self.label}: texel view offset {offset} is misaligned")
        if nbytes // texel_bytes > lim.max_texel_elements:
            raise ValueError(f"{self.label}: {nbytes // texel_bytes} texels exceed the device's "
                             f"limit of {lim.max_texel_elements}")
        v = self.ctx.vk
        view = v.vkCreateBufferView(self.ctx.device, v.VkBufferViewCreateInfo(
            buffer=self.handle, format=fmt, offset=offset, range=nbytes), None)
        self._views.append(view)
        return view


def _free(ctx: Context, handle, memory, views: list, host: np.ndarray | None) -> None:
    # `host` is only held here so that imported memory outlives the VkDeviceMemory.
    v, dev = ctx.vk, ctx.device
    for view in views:
        v.vkDestroyBufferView(dev, view, None)
    v.vkDestroyBuffer(dev, handle, None)
    v.vkFreeMemory(dev, memory, None)


def host_buffer(ctx: Context, size: int, label: str) -> DeviceBuffer:
    """Host-visible, coherent memory, device-local where offered (UMA, ReBAR, lavapipe);
    plain host memory when the device-local window (a small BAR) cannot hold it."""
    try:
        return DeviceBuffer(ctx, size, HOST_VISIBLE | HOST_COHERENT, DEVICE_LOCAL, label=label)
    except (MemoryError, ctx.vk.VkError):
        return DeviceBuffer(ctx, size, HOST_VISIBLE | HOST_COHERENT, HOST_CACHED, label=label)


def staging_buffer(ctx: Context, size: int, label: str) -> DeviceBuffer:
    """Host-visible memory for uploads; never the scarce device-local window."""
    return DeviceBuffer(ctx, size, HOST_VISIBLE | HOST_COHERENT, label=label)


def device_buffer(ctx: Context, size: int, label: str) -> DeviceBuffer:
    """Device-local memory; host-visible only if the device has nothing else (CPU, UMA)."""
    return DeviceBuffer(ctx, size, DEVICE_LOCAL, label=label)


def readback_buffer(ctx: Context, size: int, label: str) -> DeviceBuffer:
    """Host-visible memory the CPU reads fast (cached where offered)."""
    return DeviceBuffer(ctx, size, HOST_VISIBLE | HOST_COHERENT, HOST_CACHED, label=label)
