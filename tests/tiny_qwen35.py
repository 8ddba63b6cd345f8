"""Qwen3.5's tokenizer and chat template for tiny fixtures (tests/fixtures/arch/qwen35.gguf).

No Qwen3.5 vocabulary can be fetched offline, so the fixture's is qwen2's byte-level fixture
(Qwen3.5's vocabulary is Qwen's too, grown) with pre-tokenizer `qwen35` (llama.cpp's: qwen2's
regex keeping combining marks on their letters), the thinking tags <think> and </think> as
the user-defined tokens Qwen's GGUFs declare them, <|im_end|> as EOS, and the turn format of
Qwen3.5's template without its tool-calling and vision branches.
"""

from __future__ import annotations

from pathlib import Path

import gguf

from .tiny_model import borrowed_bpe

THINK_TAGS = ["<think>", "</think>"]

# Qwen/Qwen3.5-*'s chat template, its plain-conversation part: ChatML turns; a past reply
# keeps only what follows its reasoning; the reply starts inside <think> unless thinking is
# turned off (enable_thinking=false), when an empty reasoning block is written for it.
QWEN35_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' -%}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'user' or (message['role'] == 'system' and not loop.first) -%}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' -}}"
    "{%- elif message['role'] == 'assistant' -%}"
    "{%- set content = message['content'] -%}"
    "{%- if '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip('\\n') -%}"
    "{%- endif -%}"
    "{{- '<|im_start|>assistant\\n' + content + '<|im_end|>\\n' -}}"
    "{%- endif -%}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{- '<|im_start|>assistant\\n' -}}"
    "{%- if enable_thinking is defined and enable_thinking is false -%}"
    "{{- '<think>\\n\\n</think>\\n\\n' -}}"
    "{%- else -%}"
    "{{- '<think>\\n' -}}"
    "{%- endif -%}"
    "{%- endif -%}"
)


def qwen35_tokenizer(writer: gguf.GGUFWriter, source: Path) -> int:
    """Qwen3.5's tokenizer keys from the byte-level fixture `source` (qwen2's): its tokens
    and merges, the thinking tags after them, pre-tokenizer `qwen35`, and Qwen3.5's chat
    template. Returns the vocabulary size."""
    ids, size = borrowed_bpe(writer, source, "qwen35",
                             {tag.encode(): 4 for tag in THINK_TAGS})
    writer.add_eos_token_id(ids["<|im_end|>"])
    writer.add_pad_token_id(ids["<|endoftext|>"])
    writer.add_add_bos_token(False)
    writer.add_chat_template(QWEN35_TEMPLATE)
    return size
