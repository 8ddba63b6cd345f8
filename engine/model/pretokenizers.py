"""Byte-level BPE (`tokenizer.ggml.model == "gpt2"`): llama.cpp's pre-tokenizer per
`tokenizer.ggml.pre` name, rebuilt with HF `tokenizers`.

llama-vocab.cpp maps each pre name to a group; every name in a group gets the same split
regexes (`llm_tokenizer_bpe`), and some groups also set `ignore_merges` (a whole word found in
the vocabulary skips the merge loop) and a default for adding BOS. The regexes below are
llama.cpp's own strings, including its spelled-out case-insensitive contractions (`'[sS]`, not
`(?i:'s)`, which would also match the long s). scripts/llamacpp_token_ids.py checks every name
in the table against llama.cpp on a real vocabulary; a name not in the table is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tokenizers import Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from .vocab import UnsupportedTokenizerError

_CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3_REGEX = (
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_REGEX = (  # llama-3's, but digits one at a time
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN35_REGEX = (  # qwen2's, with combining marks (\p{M}) kept on their letters
    _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _gpt2() -> pre_tokenizers.PreTokenizer:
    # ByteLevel's built-in regex is GPT-2's "'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+|...".
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    # llama.cpp runs "\p{N}" and then the GPT-2 regex over each piece.
    return pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), _gpt2()]
    )


def _split_then_bytes(regex: str) -> Callable[[], pre_tokenizers.PreTokenizer]:
    def make() -> pre_tokenizers.PreTokenizer:
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(regex), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )

    return make


@dataclass(frozen=True)
class PreTokenizerSpec:
    make: Callable[[], pre_tokenizers.PreTokenizer]
    ignore_merges: bool
    add_bos: bool  # llama.cpp's default when the GGUF has no tokenizer.ggml.add_bos_token


_GPT2 = PreTokenizerSpec(_gpt2, ignore_merges=False, add_bos=False)
_SMOLLM = PreTokenizerSpec(_digits_then_gpt2, ignore_merges=False, add_bos=False)
_LLAMA3 = PreTokenizerSpec(_split_then_bytes(_LLAMA3_REGEX), ignore_merges=True, add_bos=True)
_LLAMA3_MERGING = PreTokenizerSpec(
    _split_then_bytes(_LLAMA3_REGEX), ignore_merges=False, add_bos=False
)
_QWEN2 = PreTokenizerSpec(_split_then_bytes(_QWEN2_REGEX), ignore_merges=False, add_bos=False)
_QWEN35 = PreTokenizerSpec(_split_then_bytes(_QWEN35_REGEX), ignore_merges=False, add_bos=False)

# Names from llama-vocab.cpp (llama.cpp 0.3.36's vendored copy), by group. Groups that need more
# than a regex split (BOS quirks, extra separators, other byte encodings) are left out.
PRE_TOKENIZERS: dict[str, PreTokenizerSpec] = {
    **dict.fromkeys(
        ("gpt-2", "phi-2", "mpt", "olmo", "jais", "trillion", "granite-docling", "exaone4",
         "a.x-4.0", "mellum", "gigachat"),
        _GPT2,
    ),
    **dict.fromkeys(
        ("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
         "mellum2"),
        _SMOLLM,
    ),
    **dict.fromkeys(
        ("llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
         "lfm2"),
        _LLAMA3,
    ),
    **dict.fromkeys(("dbrx", "smaug-bpe"), _LLAMA3_MERGING),
    **dict.fromkeys(
        ("qwen2", "deepseek-r1-qwen", "megrez", "stablelm2", "hunyuan", "solar-open", "kormo",
         "f2llmv2"),
        _QWEN2,
    ),
    "qwen35": _QWEN35,
}


def pre_tokenizer_spec(pre: str | None) -> PreTokenizerSpec:
    """The table entry for a `tokenizer.ggml.pre` name, or a one-line refusal naming it."""
    spec = PRE_TOKENIZERS.get(pre or "")
    if spec is None:
        raise UnsupportedTokenizerError(
            f"pre-tokenizer {pre!r} is not supported (byte-level BPE with pre-tokenizer "
            "llama-bpe, qwen2, smollm, gpt-2 and the names grouped with them in llama.cpp are)"
        )
    return spec


def build_byte_level_bpe(
    vocab: dict[str, int], merges: Sequence[str], spec: PreTokenizerSpec
) -> HFTokenizer:
    """An HF tokenizer for a GPT-2-style vocabulary; special tokens are added by the caller."""
    try:
        bpe = models.BPE(
            vocab=vocab, merges=_split_merges(merges), ignore_merges=spec.ignore_merges
        )
    except Exception as exc:  # the Rust side raises a bare Exception
        raise UnsupportedTokenizerError(f"BPE vocabulary rejected: {exc}") from exc
    hf = HFTokenizer(bpe)
    hf.pre_tokenizer = spec.make()
    hf.decoder = decoders.ByteLevel()
    return hf


def _split_merges(merges: Sequence[str]) -> list[tuple[str, str]]:
    # Byte-level tokens never contain a literal space (it is spelled "Ġ"), so the separator
    # is unambiguous; llama.cpp searches from index 1 all the same, and so do we.
    pairs = []
    for merge in merges:
        cut = merge.find(" ", 1)
        if cut < 0:
            raise UnsupportedTokenizerError(f"malformed merge {merge!r}")
        pairs.append((merge[:cut], merge[cut + 1 :]))
    return pairs
