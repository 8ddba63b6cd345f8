"""Byte-level BPE tokenizer built from a GGUF's vocabulary, matching llama.cpp's token ids.

The GGUF stores the tokenizer as plain lists (`tokenizer.ggml.*`). We rebuild it with HF
`tokenizers`, so encoding runs in Rust, and mirror llama.cpp's pre-tokenizer for the GGUF's
`tokenizer.ggml.pre` name. tests/test_tokenizer.py checks the ids against llama.cpp's own.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from typing import Any

from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

# llama.cpp token types (gguf.TokenType); spelled out so this module needs no gguf import.
_TYPE_UNKNOWN = 2
_TYPE_CONTROL = 3
_TYPE_USER_DEFINED = 4

# llama-3's split regex as HF's tokenizer.json writes it; llama.cpp runs an equivalent one.
_LLAMA3_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _digits_then_gpt2() -> pre_tokenizers.PreTokenizer:
    # llama.cpp's smollm group runs "\p{N}" and then the GPT-2 regex; HF spells that as
    # Digits(individual) followed by ByteLevel's built-in GPT-2 regex.
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )


def _gpt2() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)


def _llama3() -> pre_tokenizers.PreTokenizer:
    return pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(_LLAMA3_REGEX), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )


# `tokenizer.ggml.pre` name -> (pre-tokenizer factory, ignore_merges). The groups follow
# llama-vocab.cpp, which gives every name in a group the same regexes. The tests check
# 'smollm' against llama.cpp; gpt-2, llama-bpe, mpt, starcoder, refact and command-r were
# checked by hand against llama.cpp's vocab test files (models/ggml-vocab-*.gguf); the
# remaining names share a group with a checked one.
_PRE_TOKENIZERS: dict[str, tuple[Callable[[], pre_tokenizers.PreTokenizer], bool]] = {
    **dict.fromkeys(
        (
            "smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b",
            "mellum2",
        ),
        (_digits_then_gpt2, False),
    ),
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais"), (_gpt2, False)),
    # llama-3 also sets ignore_merges: whole words found in the vocab skip the merge loop.
    **dict.fromkeys(("llama3", "llama-v3", "llama-bpe", "falcon3"), (_llama3, True)),
}


class UnsupportedTokenizerError(ValueError):
    """The GGUF's tokenizer is not a byte-level BPE we can rebuild faithfully."""


class Tokenizer:
    """Encodes text to token ids and back, with the GGUF's control tokens as special tokens."""

    def __init__(
        self, hf: HFTokenizer, vocab_size: int, bos_id: int | None, eos_id: int | None
    ) -> None:
        self._hf = hf
        self._vocab_size = vocab_size
        self._bos_id = bos_id
        self._eos_id = eos_id
        # `encode_special_tokens` is tokenizer-wide state, so plain-text encodes flip it
        # under this lock rather than keeping a second 49k-entry tokenizer around.
        self._lock = threading.Lock()

    @classmethod
    def from_gguf(cls, reader: Any) -> Tokenizer:
        """Build from a `gguf.GGUFReader`'s `tokenizer.ggml.*` fields."""
        model = _field(reader, "tokenizer.ggml.model", None)
        if model != "gpt2":
            raise UnsupportedTokenizerError(
                f"tokenizer model {model!r} is not supported (only byte-level BPE, 'gpt2')"
            )
        tokens = _field(reader, "tokenizer.ggml.tokens")
        return cls.from_vocab(
            tokens=tokens,
            merges=_field(reader, "tokenizer.ggml.merges"),
            token_types=_field(reader, "tokenizer.ggml.token_type", None) or [1] * len(tokens),
            bos_id=_field(reader, "tokenizer.ggml.bos_token_id", None),
            eos_id=_field(reader, "tokenizer.ggml.eos_token_id", None),
            pre=_field(reader, "tokenizer.ggml.pre", None),
        )

    @classmethod
    def from_vocab(
        cls,
        tokens: Sequence[str],
        merges: Sequence[str],
        token_types: Sequence[int],
        bos_id: int | None,
        eos_id: int | None,
        pre: str | None,
    ) -> Tokenizer:
        """Build from GGUF-style lists: merges are "left right" strings."""
        if pre not in _PRE_TOKENIZERS:
            raise UnsupportedTokenizerError(f"pre-tokenizer {pre!r} is not supported")
        if len(token_types) != len(tokens):
            raise UnsupportedTokenizerError(
                f"{len(token_types)} token types for {len(tokens)} tokens"
            )
        for name, tid in (("bos", bos_id), ("eos", eos_id)):
            if tid is not None and not 0 <= tid < len(tokens):
                raise UnsupportedTokenizerError(f"{name} id {tid} outside the vocabulary")
        make_pre, ignore_merges = _PRE_TOKENIZERS[pre]
        # Later duplicates win, as in llama.cpp's token_to_id map; the earlier id then
        # cannot be produced by encode, exactly as in llama.cpp.
        vocab = {tok: i for i, tok in enumerate(tokens)}
        try:
            bpe = models.BPE(
                vocab=vocab, merges=_split_merges(merges), ignore_merges=ignore_merges
            )
        except Exception as exc:  # the Rust side raises a bare Exception
            raise UnsupportedTokenizerError(f"BPE vocabulary rejected: {exc}") from exc
        hf = HFTokenizer(bpe)
        hf.pre_tokenizer = make_pre()
        hf.decoder = decoders.ByteLevel()
        hf.add_tokens(_added_tokens(tokens, token_types))
        return cls(hf, len(tokens), bos_id, eos_id)

    def to_json(self) -> str:
        """Serialize for the weight-image cache, so later starts skip the GGUF vocab parse."""
        with self._lock:  # never capture a plain-text encode's flipped special-token flag
            hf = self._hf.to_str()
        return json.dumps(
            {"hf": hf, "vocab_size": self._vocab_size, "bos_id": self._bos_id,
             "eos_id": self._eos_id}
        )

    @classmethod
    def from_json(cls, text: str) -> Tokenizer:
        """Rebuild a tokenizer saved by `to_json`."""
        record = json.loads(text)
        return cls(
            HFTokenizer.from_str(record["hf"]), record["vocab_size"], record["bos_id"],
            record["eos_id"],
        )

    @property
    def bos_id(self) -> int | None:
        return self._bos_id

    @property
    def eos_id(self) -> int | None:
        return self._eos_id

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def token_to_id(self, token: str) -> int | None:
        """The id of a token spelled as in the vocabulary (byte-level form), or None."""
        return self._hf.token_to_id(token)

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        """Token ids for `text`; no BOS is added. `parse_special=False` is for user text,
        so a typed "<|im_end|>" cannot close a turn (llama.cpp's `special=false`)."""
        with self._lock:
            self._hf.encode_special_tokens = not parse_special
            try:
                return self._hf.encode(text, add_special_tokens=False).ids
            finally:
                self._hf.encode_special_tokens = False

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text for `ids`; invalid UTF-8 (a cut-off character) becomes U+FFFD."""
        for tid in ids:
            self._check_id(tid)
        return self._hf.decode(list(ids), skip_special_tokens=skip_special)

    def stream_decoder(self, skip_special: bool = False) -> StreamDecoder:
        """A fresh incremental detokenizer for one generated reply."""
        return StreamDecoder(self, skip_special)

    def _check_id(self, tid: int) -> None:
        # HF silently drops unknown ids; a bad id here is a bug upstream, so say so.
        if not 0 <= tid < self._vocab_size:
            raise ValueError(f"token id {tid} outside the vocabulary (size {self._vocab_size})")


class StreamDecoder:
    """Turns generated ids into text pieces, holding back partial UTF-8 characters."""

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False) -> None:
        self._tokenizer = tokenizer
        # DecodeStream re-decodes a short window of ids and emits only the new suffix once it
        # no longer ends in U+FFFD, so a character split across tokens comes out whole.
        self._stream = decoders.DecodeStream(skip_special_tokens=skip_special)

    def step(self, token_id: int) -> str:
        """The text that `token_id` completes; '' while a character is still partial."""
        self._tokenizer._check_id(token_id)
        return self._stream.step(self._tokenizer._hf, token_id) or ""


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


def _added_tokens(tokens: Sequence[str], token_types: Sequence[int]) -> list[AddedToken]:
    # llama.cpp matches control/unknown tokens only when parsing special tokens, but
    # user-defined ones always; HF's special flag has the same meaning for encode.
    added = []
    for tok, kind in zip(tokens, token_types, strict=True):
        if kind in (_TYPE_CONTROL, _TYPE_UNKNOWN, _TYPE_USER_DEFINED) and tok:
            special = kind != _TYPE_USER_DEFINED
            added.append(AddedToken(tok, special=special, normalized=False))
    return added


_MISSING = object()


def _field(reader: Any, name: str, default: Any = _MISSING) -> Any:
    field = reader.fields.get(name)
    if field is None:
        if default is _MISSING:
            raise UnsupportedTokenizerError(f"GGUF has no {name}")
        return default
    return field.contents()
