"""The numpy backend: the forward pass on the CPU over the dequantized f32 weight image."""
