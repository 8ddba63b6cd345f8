"""The model: GGUF file, geometry, tokenizer, chat template, f32 weight image, RoPE,
and load_model that ties them into one Model shared by conversations.
"""
