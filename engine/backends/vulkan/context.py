"""One Vulkan device per process: instance, the chosen physical device, a compute queue; and
probe(), which reports that device or, in one line, why there is none.

The context is created on first use and lives until the process exits: buffers and views hand
out numpy arrays over mapped device memory, and tearing the device down under a live array
would turn a stale view into a crash. The OS reclaims everything at exit.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from .coopmat import probe_coopmat
from .loader import DEVICE_TYPES, DeviceInfo, VulkanUnavailableError, vk
from .options import current as current_options

# Memory property bits (spelled out so this module reads without the vulkan package's names).
DEVICE_LOCAL, HOST_VISIBLE, HOST_COHERENT, HOST_CACHED = 0x1, 0x2, 0x4, 0x8
HOST_IMPORT_EXT = "VK_EXT_external_memory_host"
FENCE_TIMEOUT_NS = 60_000_000_000  # a minute: a step that takes longer is a hung driver
# Preference order of physical device types: discrete, integrated, virtual, cpu, other.
_TYPE_RANK = {2: 0, 1: 1, 3: 2, 4: 3, 0: 4}


@dataclass(frozen=True)
class Limits:
    max_storage_range: int
    max_texel_elements: int
    texel_offset_align: int
    storage_offset_align: int
    max_shared_bytes: int
    max_push_bytes: int
    max_invocations: int  # maxComputeWorkGroupInvocations


class Context:
    """The device, its queue and command pool, and the memory types buffers are made in."""

    def __init__(self) -> None:
        v = vk()
        self.vk = v
        self.ffi = v.ffi
        try:
            app = v.VkApplicationInfo(pApplicationName="channel", applicationVersion=1,
                                      pEngineName="channel", engineVersion=1,
                                      apiVersion=v.VK_MAKE_VERSION(1, 1, 0))
            self.instance = v.vkCreateInstance(v.VkInstanceCreateInfo(pApplicationInfo=app), None)
        except v.VkError as exc:
            raise VulkanUnavailableError(
                f"the Vulkan loader found no driver ({type(exc).__name__}); install "
                "mesa-vulkan-drivers (lavapipe, CPU) or a GPU's Vulkan driver") from None
        devices = list(v.vkEnumeratePhysicalDevices(self.instance))
        if not devices:
            raise VulkanUnavailableError(
                "Vulkan has no device: install mesa-vulkan-drivers (lavapipe, CPU) or a GPU's "
                "Vulkan driver")
        self.index, self.physical = self._choose(devices)
        props = v.vkGetPhysicalDeviceProperties(self.physical)
        self.device_type = int(props.deviceType)
        api = int(props.apiVersion)
        self.info = DeviceInfo(
            name=str(props.deviceName),
            device_type=DEVICE_TYPES.get(self.device_type, "other"),
            driver=f"vendor 0x{int(props.vendorID):04x}, driver {int(props.driverVersion):#x}",
            api_version=f"{api >> 22}.{(api >> 12) & 0x3FF}.{api & 0xFFF}",
            index=self.index,
        )
        lim = props.limits
        self.limits = Limits(
            max_storage_range=int(lim.maxStorageBufferRange),
            max_texel_elements=int(lim.maxTexelBufferElements),
            texel_offset_align=int(lim.minTexelBufferOffsetAlignment),
            storage_offset_align=int(lim.minStorageBufferOffsetAlignment),
            max_shared_bytes=int(lim.maxComputeSharedMemorySize),
            max_push_bytes=int(lim.maxPushConstantsSize),
            max_invocations=int(lim.maxComputeWorkGroupInvocations),
        )
        self.subgroup_size = self._subgroup_size()
        self.memory = v.vkGetPhysicalDeviceMemoryProperties(self.physical)
        self.queue_family = self._compute_family()
        queue_info = v.VkDeviceQueueCreateInfo(queueFamilyIndex=self.queue_family, queueCount=1,
                                               pQueuePriorities=[1.0])
        available = {str(e.extensionName) for e in
                     v.vkEnumerateDeviceExtensionProperties(self.physical, None)}
        # On a CPU device all memory is host memory anyway. Importing numpy's lazily zeroed
        # pages as the arena keeps untouched K/V planes out of RSS, as np.zeros does for numpy.
        self.host_import = self.device_type == 4 and HOST_IMPORT_EXT in available
        extensions = [HOST_IMPORT_EXT] if self.host_import else []
        # Cooperative matrices (tensor cores) for prefill's matrix products, where offered.
        coopmat = probe_coopmat(v, self.instance, self.physical, available, api)
        self.coopmat = coopmat is not None
        if coopmat is not None:
            extensions += coopmat.extensions
        create = v.VkDeviceCreateInfo(queueCreateInfoCount=1, pQueueCreateInfos=[queue_info],
                                      enabledExtensionCount=len(extensions),
                                      ppEnabledExtensionNames=extensions)
        if coopmat is not None:
            create.pNext = coopmat.chain
        self.device = v.vkCreateDevice(self.physical, create, None)
        self.queue = v.vkGetDeviceQueue(self.device, self.queue_family, 0)
        self.pool = v.vkCreateCommandPool(self.device, v.VkCommandPoolCreateInfo(
            flags=v.VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
            queueFamilyIndex=self.queue_family), None)
        # One submission runs at a time: a conversation's step waits for its own fence, and the
        # lock keeps two threads from interleaving submit/wait pairs on the one queue.
        self.lock = threading.Lock()
        self._graveyard: list[tuple[list, list]] = []

    @property
    def is_gpu(self) -> bool:
        return self.info.is_gpu

    def _choose(self, devices: list) -> tuple[int, object]:
        v = self.vk
        wanted = current_options().device_index  # None picks the best one
        if wanted is not None:
            if wanted >= len(devices):
                raise VulkanUnavailableError(
                    f"device {wanted} was asked for but there are only {len(devices)} "
                    f"Vulkan device(s)")
            return wanted, devices[wanted]
        ranked = sorted(range(len(devices)), key=lambda i: _TYPE_RANK.get(
            int(v.vkGetPhysicalDeviceProperties(devices[i]).deviceType), 9))
        return ranked[0], devices[ranked[0]]

    def _subgroup_size(self) -> int:
        """The compute subgroup size; attention runs one subgroup per workgroup and reduces
        with subgroup arithmetic, and the matrix products sum rows by shuffles, so a device
        without both cannot run the backend (every desktop GPU and lavapipe has them)."""
        v, ffi = self.vk, self.ffi
        sub = ffi.new("VkPhysicalDeviceSubgroupProperties*")
        sub.sType = v.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES
        props = ffi.new("VkPhysicalDeviceProperties2*")
        props.sType = v.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2
        props.pNext = sub
        v.lib.vkGetPhysicalDeviceProperties2(self.physical, props)
        needed = v.VK_SUBGROUP_FEATURE_ARITHMETIC_BIT | v.VK_SUBGROUP_FEATURE_SHUFFLE_BIT
        if not ((int(sub.supportedOperations) & needed) == needed
                and int(sub.supportedStages) & v.VK_SHADER_STAGE_COMPUTE_BIT):
            raise VulkanUnavailableError(
                f"Vulkan device {self.info.name} lacks subgroup arithmetic or shuffles in "
                f"compute shaders")
        return int(sub.subgroupSize)

    def _compute_family(self) -> int:
        families = self.vk.vkGetPhysicalDeviceQueueFamilyProperties(self.physical)
        for i, fam in enumerate(families):
            if int(fam.queueFlags) & self.vk.VK_QUEUE_COMPUTE_BIT:
                return i
        raise VulkanUnavailableError(f"Vulkan device {self.info.name} has no compute queue")

    # -- memory types -----------------------------------------------------------------------
    def memory_type(self, type_bits: int, want: int, prefer: int = 0,
                    min_heap: int = 0) -> int | None:
        """The index of a memory type allowed by `type_bits` with all `want` flags, preferring
        types that also have `prefer` and a heap of at least `min_heap` bytes; None if none."""
        best, best_score = None, -1
        for i in range(int(self.memory.memoryTypeCount)):
            t = self.memory.memoryTypes[i]
            flags = int(t.propertyFlags)
            if not (type_bits >> i) & 1 or flags & want != want:
                continue
            heap = int(self.memory.memoryHeaps[int(t.heapIndex)].size)
            score = (heap >= min_heap) * 4 + bin(flags & prefer).count("1")
            if score > best_score:
                best, best_score = i, score
        return best

    def memory_flags(self, index: int) -> int:
        return int(self.memory.memoryTypes[index].propertyFlags)

    # -- command buffers --------------------------------------------------------------------
    def command_buffers(self, count: int) -> list:
        v = self.vk
        self._bury()
        info = v.VkCommandBufferAllocateInfo(commandPool=self.pool, commandBufferCount=count,
                                             level=v.VK_COMMAND_BUFFER_LEVEL_PRIMARY)
        return list(v.vkAllocateCommandBuffers(self.device, info))

    def fence(self):
        return self.vk.vkCreateFence(self.device, self.vk.VkFenceCreateInfo(), None)

    def retire(self, command_buffers: list, fences: list) -> None:
        """Queue a dead pass's command buffers and fences for freeing. A finalizer may run on
        any thread, and the command pool must only be touched by the thread that records, so
        they are freed at the next allocation instead of here."""
        self._graveyard.append((command_buffers, fences))

    def _bury(self) -> None:
        v = self.vk
        while self._graveyard:
            cbs, fences = self._graveyard.pop()
            if cbs:
                v.vkFreeCommandBuffers(self.device, self.pool, len(cbs), cbs)
            for fence in fences:
                v.vkDestroyFence(self.device, fence, None)


_context: Context | None = None
_context_error: str | None = None
_context_lock = threading.Lock()


def get_context() -> Context:
    """The process's Vulkan context, created on first call; raises VulkanUnavailableError."""
    global _context, _context_error
    with _context_lock:
        if _context is None:
            if _context_error is not None:
                raise VulkanUnavailableError(_context_error)
            try:
                _context = Context()
            except VulkanUnavailableError as exc:
                _context_error = str(exc)
                raise
        return _context


def probe() -> DeviceInfo | str:
    """The device Vulkan would run on, or a one-line reason there is none. Never raises."""
    try:
        return get_context().info
    except VulkanUnavailableError as exc:
        return str(exc)
    except Exception as exc:  # a broken driver must not take the app down; report it
        return f"Vulkan failed to start ({type(exc).__name__}: {exc})"
