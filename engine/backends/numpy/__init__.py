"""The numpy backend: the forward pass on the CPU over the dequantized f32 weight image."""

from ...model.architecture import EVERYTHING

# The reference implements every architecture feature, and reads every tensor type Channel
# does: gguf-py dequantizes each into the f32 image (model/weights.py).
FEATURES = EVERYTHING
