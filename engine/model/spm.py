"""SentencePiece-style BPE (`tokenizer.ggml.model == "llama"`: Llama 2, Mistral, Phi-3) as an
HF `tokenizers` BPE model.

llama.cpp's SPM tokenizer (`llm_tokenizer_spm_session`) splits a text fragment into UTF-8
characters and repeatedly merges the adjacent pair whose concatenation is the vocabulary token
with the highest score (leftmost on ties); characters left over that are not tokens become
their `<0xNN>` byte tokens. An HF BPE model does the same when its merges are every pair
(left, right) whose parts and concatenation are all tokens, ranked by the score of the
concatenation, with byte fallback: that is how transformers converts these vocabularies too
(`generate_merges` in convert_slow_tokenizer). The two can differ only when two different
tokens have exactly equal scores and compete for the same characters; real vocabularies give
normal tokens distinct scores.

Spaces become "▁" and, with `tokenizer.ggml.add_space_prefix` (default on), every text
fragment that starts the input or follows a special token gets a leading "▁" — HF runs the
normalizer per fragment between added tokens, which is exactly that rule.
"""

from __future__ import annotations

from collections.abc import Sequence

from tokenizers import Tokenizer as HFTokenizer
from tokenizers import decoders, models, normalizers

from .vocab import UnsupportedTokenizerError

SPACE = "▁"  # U+2581, SentencePiece's visible space


def build_sentencepiece_bpe(
    vocab: dict[str, int], scores: Sequence[float], add_space_prefix: bool
) -> HFTokenizer:
    """An HF tokenizer for a SentencePiece vocabulary (`vocab` maps text to id, later
    duplicates already dropped); special tokens are added by the caller."""
    missing = [b for b in range(256) if f"<0x{b:02X}>" not in vocab]
    if missing:
        raise UnsupportedTokenizerError(
            f"SentencePiece vocabulary has no byte token <0x{missing[0]:02X}> "
            "(only byte-fallback vocabularies are supported)"
        )
    try:
        bpe = models.BPE(
            vocab=vocab, merges=generate_merges(vocab, scores), byte_fallback=True,
            ignore_merges=False,
        )
    except Exception as exc:  # the Rust side raises a bare Exception
        raise UnsupportedTokenizerError(f"SentencePiece vocabulary rejected: {exc}") from exc
    hf = HFTokenizer(bpe)
    steps = [normalizers.Replace(" ", SPACE)]
    if add_space_prefix:
        steps.insert(0, normalizers.Prepend(SPACE))
    hf.normalizer = normalizers.Sequence(steps)
    # Byte tokens to bytes, "▁" to spaces; with the space prefix, llama.cpp's detokenize drops
    # the first piece's leading space, and after Fuse the whole text is that first piece.
    steps = [decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_space_prefix:
        steps.append(decoders.Strip(" ", 1, 0))
    hf.decoder = decoders.Sequence(steps)
    return hf


def generate_merges(vocab: dict[str, int], scores: Sequence[float]) -> list[tuple[str, str]]:
    """Every split of every token into two tokens, best-scoring result first."""
    ranked = []
    for text, tid in vocab.items():
        for cut in range(1, len(text)):
            left, right = text[:cut], text[cut:]
            if left in vocab and right in vocab:
                # Equal scores: llama.cpp prefers the leftmost pair in the text, which no
                # static order can express; shorter left parts first is transformers' choice.
                ranked.append((-scores[tid], tid, cut, left, right))
    ranked.sort()
    return [(left, right) for _, _, _, left, right in ranked]
