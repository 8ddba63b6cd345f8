"""Whether the device runs shaders/matmul_coopmat.comp, and what to enable for it at device
creation.

That shader needs VK_KHR_cooperative_matrix with a 16x16x16 f16 x f16 -> f32 subgroup shape
(NVIDIA lists it; lavapipe has no cooperative matrices), f16 arithmetic (shaderFloat16) and
the Vulkan memory model, which GL_KHR_cooperative_matrix's SPIR-V declares; and a fixed
subgroup size, since the shader hands each of its 4 subgroups a quarter of the tile (a driver
that may pick another size, as AMD's wave32/64 and Intel's SIMD8-32 compilers do, gets the
shared-memory tiles). Everything is enabled only when all of it is present, so other devices
are created exactly as before.
"""

from __future__ import annotations

from dataclasses import dataclass

EXTENSIONS = ("VK_KHR_cooperative_matrix", "VK_KHR_shader_float16_int8",
              "VK_KHR_vulkan_memory_model")
SHAPE = (16, 16, 16)  # M, N, K of the one shape the shader uses


@dataclass
class CoopmatSupport:
    """What device creation must enable; `features` keeps the pNext chain alive."""

    extensions: tuple[str, ...]
    features: list  # cffi structs, linked by pNext: cooperative matrix, float16, memory model

    @property
    def chain(self):
        return self.features[0]


def _has_shape(v, instance, physical) -> bool:
    ffi = v.ffi
    name = b"vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR"
    addr = v.lib.vkGetInstanceProcAddr(instance, name)
    if addr == ffi.NULL:
        return False
    fn = ffi.cast("PFN_vkGetPhysicalDeviceCooperativeMatrixPropertiesKHR", addr)
    count = ffi.new("uint32_t*")
    if fn(physical, count, ffi.NULL) != 0 or not count[0]:
        return False
    props = ffi.new("VkCooperativeMatrixPropertiesKHR[]", count[0])
    for i in range(count[0]):
        props[i].sType = v.VK_STRUCTURE_TYPE_COOPERATIVE_MATRIX_PROPERTIES_KHR
    if fn(physical, count, props) != 0:
        return False
    f16, f32 = v.VK_COMPONENT_TYPE_FLOAT16_KHR, v.VK_COMPONENT_TYPE_FLOAT32_KHR
    return any((p.MSize, p.NSize, p.KSize) == SHAPE and p.AType == p.BType == f16
               and p.CType == p.ResultType == f32 and p.scope == v.VK_SCOPE_SUBGROUP_KHR
               and not p.saturatingAccumulation for p in props[0 : count[0]])


def _fixed_subgroup_size(v, physical, available: set[str], api: int) -> bool:
    """Whether compute subgroups always have one size (minSubgroupSize == maxSubgroupSize);
    the properties exist from Vulkan 1.3 or with VK_EXT_subgroup_size_control."""
    if api < v.VK_MAKE_VERSION(1, 3, 0) and "VK_EXT_subgroup_size_control" not in available:
        return False
    ffi = v.ffi
    ctl = ffi.new("VkPhysicalDeviceSubgroupSizeControlProperties*")
    ctl.sType = v.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_SIZE_CONTROL_PROPERTIES
    props = ffi.new("VkPhysicalDeviceProperties2*")
    props.sType = v.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2
    props.pNext = ctl
    v.lib.vkGetPhysicalDeviceProperties2(physical, props)
    return ctl.minSubgroupSize == ctl.maxSubgroupSize > 0


def probe_coopmat(v, instance, physical, available: set[str],
                  api: int) -> CoopmatSupport | None:
    """The extensions and feature structs to enable for cooperative matrices, or None where
    the device lacks any part of them. `api` is the device's apiVersion."""
    if (not set(EXTENSIONS) <= available or not _has_shape(v, instance, physical)
            or not _fixed_subgroup_size(v, physical, available, api)):
        return None
    ffi = v.ffi
    coop = ffi.new("VkPhysicalDeviceCooperativeMatrixFeaturesKHR*")
    coop.sType = v.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_COOPERATIVE_MATRIX_FEATURES_KHR
    half = ffi.new("VkPhysicalDeviceShaderFloat16Int8Features*")
    half.sType = v.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES
    model = ffi.new("VkPhysicalDeviceVulkanMemoryModelFeatures*")
    model.sType = v.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_MEMORY_MODEL_FEATURES
    coop.pNext, half.pNext = half, model
    query = ffi.new("VkPhysicalDeviceFeatures2*")
    query.sType = v.VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2
    query.pNext = coop
    v.lib.vkGetPhysicalDeviceFeatures2(physical, query)
    if not (coop.cooperativeMatrix and half.shaderFloat16 and model.vulkanMemoryModel):
        return None
    # Enable exactly what the shader uses: the queried structs say what else is supported.
    coop.cooperativeMatrixRobustBufferAccess = 0
    half.shaderInt8 = 0
    model.vulkanMemoryModelDeviceScope = 0
    model.vulkanMemoryModelAvailabilityVisibilityChains = 0
    return CoopmatSupport(EXTENSIONS, [coop, half, model])
