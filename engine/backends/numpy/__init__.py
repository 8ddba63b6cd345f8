"""The numpy backend: the forward pass on the CPU over the dequantized f32 weight image."""

from ...model.architecture import ALL_FEATURES

FEATURES = ALL_FEATURES  # the reference implements every architecture feature
