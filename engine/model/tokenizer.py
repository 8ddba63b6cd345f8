"""Tokenizer built from a GGUF's vocabulary, matching llama.cpp's token ids.

The GGUF stores the tokenizer as plain lists (`tokenizer.ggml.*`). We rebuild it with HF
`tokenizers`, so encoding runs in Rust: byte-level BPE with llama.cpp's pre-tokenizer for the
GGUF's `tokenizer.ggml.pre` name (pretokenizers.py), or SentencePiece-style BPE with byte
fallback (spm.py). Special tokens follow llama.cpp's rules (vocab.py). tests/test_tokenizer*.py
check the ids against llama.cpp's own on real vocabularies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from typing import Any

from tokenizers import AddedToken, decoders
from tokenizers import Tokenizer as HFTokenizer

from .pretokenizers import build_byte_level_bpe, pre_tokenizer_spec
from .spm import build_sentencepiece_bpe
from .vocab import TYPE_USER_DEFINED, UnsupportedTokenizerError, Vocab

__all__ = ["StreamDecoder", "Tokenizer", "UnsupportedTokenizerError"]

_ASCII_SPACE = " \t\n\v\f\r"  # C's isspace, which llama.cpp's whitespace stripping uses


class Tokenizer:
    """Encodes text to token ids and back, with the GGUF's control tokens as special tokens."""

    def __init__(
        self,
        hf: HFTokenizer,
        vocab_size: int,
        bos_id: int | None,
        eos_id: int | None,
        add_bos: bool = False,
        end_of_generation_ids: frozenset[int] | None = None,
    ) -> None:
        self._hf = hf
        self._vocab_size = vocab_size
        self._bos_id = bos_id
        self._eos_id = eos_id
        self._add_bos = add_bos
        self._eog = frozenset(
            end_of_generation_ids if end_of_generation_ids is not None
            else ({eos_id} if eos_id is not None else ())
        )
        # `encode_special_tokens` is tokenizer-wide state, so plain-text encodes flip it
        # under this lock rather than keeping a second copy of the tokenizer around.
        self._lock = threading.Lock()
        # Special tokens that swallow the whitespace after them (Phi-3) are matched here, not
        # by HF: llama.cpp strips only ASCII whitespace, HF's rstrip any Unicode space.
        added = hf.get_added_tokens_decoder()
        self._partition_specials: list[tuple[str, int, bool, bool]] | None = None
        if any(token.rstrip for token in added.values()):
            self._partition_specials = sorted(
                ((t.content, tid, t.special, t.rstrip) for tid, t in added.items()),
                key=lambda item: -len(item[0]),
            )

    @classmethod
    def from_gguf(cls, reader: Any) -> Tokenizer:
        """Build from a `gguf.GGUFReader`'s `tokenizer.ggml.*` fields (and `general.name`,
        which llama.cpp consults for Phi-3's whitespace rule)."""
        return cls.from_parsed_vocab(Vocab.from_gguf(reader))

    @classmethod
    def from_vocab(
        cls,
        tokens: Sequence[str],
        merges: Sequence[str],
        token_types: Sequence[int],
        bos_id: int | None,
        eos_id: int | None,
        pre: str | None,
        *,
        model: str = "gpt2",
        scores: Sequence[float] | None = None,
        add_bos: bool | None = None,
        add_space_prefix: bool | None = None,
        eot_id: int | None = None,
    ) -> Tokenizer:
        """Build from GGUF-style lists: merges are "left right" strings (byte-level BPE);
        `model="llama"` with `scores` builds a SentencePiece tokenizer instead."""
        if model not in ("gpt2", "llama"):
            raise UnsupportedTokenizerError(f"tokenizer model {model!r} is not supported")
        vocab = Vocab.build(
            model=model, pre=pre, tokens=tokens, types=token_types,
            scores=scores if scores is not None else [0.0] * len(tokens), merges=merges,
            special_ids={"bos": bos_id, "eos": eos_id, "eot": eot_id}, add_bos=add_bos,
            add_space_prefix=model == "llama" if add_space_prefix is None else add_space_prefix,
        )
        return cls.from_parsed_vocab(vocab)

    @classmethod
    def from_parsed_vocab(cls, vocab: Vocab) -> Tokenizer:
        """Build from a `Vocab` (llama.cpp's special-token rules already applied)."""
        # Later duplicates win, as in llama.cpp's token_to_id map; the earlier id then
        # cannot be produced by encode, exactly as in llama.cpp.
        text_to_id = {tok: i for i, tok in enumerate(vocab.tokens)}
        if vocab.model == "llama":
            hf = build_sentencepiece_bpe(text_to_id, vocab.scores, vocab.add_space_prefix)
            default_add_bos = True
        else:
            spec = pre_tokenizer_spec(vocab.pre)
            hf = build_byte_level_bpe(text_to_id, vocab.merges, spec)
            default_add_bos = spec.add_bos
        hf.add_tokens(_added_tokens(vocab))
        add_bos = default_add_bos if vocab.add_bos is None else bool(vocab.add_bos)
        return cls(hf, len(vocab.tokens), vocab.bos_id, vocab.eos_id, add_bos,
                   vocab.end_of_generation_ids)

    def to_json(self) -> str:
        """Serialize for the weight-image cache, so later starts skip the GGUF vocab parse."""
        with self._lock:  # never capture a plain-text encode's flipped special-token flag
            hf = self._hf.to_str()
        return json.dumps(
            {"hf": hf, "vocab_size": self._vocab_size, "bos_id": self._bos_id,
             "eos_id": self._eos_id, "add_bos": self._add_bos,
             "end_of_generation_ids": sorted(self._eog)}
        )

    @classmethod
    def from_json(cls, text: str) -> Tokenizer:
        """Rebuild a tokenizer saved by `to_json`."""
        record = json.loads(text)
        return cls(
            HFTokenizer.from_str(record["hf"]), record["vocab_size"], record["bos_id"],
            record["eos_id"], record["add_bos"], frozenset(record["end_of_generation_ids"]),
        )

    @property
    def bos_id(self) -> int | None:
        return self._bos_id

    @property
    def eos_id(self) -> int | None:
        return self._eos_id

    @property
    def add_bos(self) -> bool:
        """Whether llama.cpp would put BOS before a prompt (`add_special=True`)."""
        return self._add_bos and self._bos_id is not None

    @property
    def end_of_generation_ids(self) -> frozenset[int]:
        """Tokens that end a reply: llama.cpp's EOG set (eos, eot, eom, end-marker texts)."""
        return self._eog

    @property
    def vocab_size(self) -> int:
        return self._vocab_size

    def token_to_id(self, token: str) -> int | None:
        """The id of a token spelled as in the vocabulary (byte-level or "▁" form), or None."""
        return self._hf.token_to_id(token)

    def encode(self, text: str, parse_special: bool = True) -> list[int]:
        """Token ids for `text`; no BOS is added. `parse_special=False` is for user text,
        so a typed "<|im_end|>" cannot close a turn (llama.cpp's `special=false`)."""
        if self._partition_specials is not None:
            return self._encode_partitioned(text, parse_special)
        with self._lock:
            self._hf.encode_special_tokens = not parse_special
            try:
                return self._hf.encode(text, add_special_tokens=False).ids
            finally:
                self._hf.encode_special_tokens = False

    def _encode_partitioned(self, text: str, parse_special: bool) -> list[int]:
        # llama.cpp's tokenizer_st_partition: each special token, longest first, splits every
        # text fragment; the fragments are then tokenized one by one, with no special tokens
        # left in them for HF to find.
        assert self._partition_specials is not None
        fragments: list[str | int] = [text] if text else []
        for content, tid, control, rstrip in self._partition_specials:
            if control and not parse_special:
                continue
            split: list[str | int] = []
            for fragment in fragments:
                if isinstance(fragment, int):
                    split.append(fragment)
                    continue
                for k, piece in enumerate(fragment.split(content)):
                    if k > 0:
                        split.append(tid)
                        piece = piece.lstrip(_ASCII_SPACE) if rstrip else piece
                    if piece:
                        split.append(piece)
            fragments = split
        ids: list[int] = []
        with self._lock:
            self._hf.encode_special_tokens = True
            try:
                for fragment in fragments:
                    if isinstance(fragment, int):
                        ids.append(fragment)
                    else:
                        ids += self._hf.encode(fragment, add_special_tokens=False).ids
            finally:
                self._hf.encode_special_tokens = False
        return ids

    def decode(self, ids: Sequence[int], skip_special: bool = False) -> str:
        """Text for `ids`, as llama.cpp's detokenize shows a reply (for SentencePiece, the
        first piece's leading space dropped); invalid UTF-8 becomes U+FFFD."""
        for tid in ids:
            self._check_id(tid)
        return self._hf.decode(list(ids), skip_special_tokens=skip_special)

    def token_texts(self) -> list[str]:
        """Every token's text on its own (its decode, specials included), by id: what
        llama.cpp's DRY sampler matches its sequence breakers against."""
        return self._hf.decode_batch([[tid] for tid in range(self._vocab_size)],
                                     skip_special_tokens=False)

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
        self._skip_special = skip_special
        # DecodeStream re-decodes a short window of ids and emits only the new suffix once it
        # no longer ends in U+FFFD, so a character split across tokens comes out whole.
        self._stream: decoders.DecodeStream | None = decoders.DecodeStream(
            skip_special_tokens=skip_special)
        self._ids: list[int] = []  # the reply so far, for the fallback below
        self._shown = ""  # the text given out so far

    def step(self, token_id: int) -> str:
        """The text that `token_id` completes; '' while a character is still partial."""
        self._tokenizer._check_id(token_id)
        self._ids.append(token_id)
        if self._stream is not None:
            try:
                piece = self._stream.step(self._tokenizer._hf, token_id) or ""
            except Exception:
                # DecodeStream refuses a token that changes text it already gave out (byte
                # tokens sampled into an invalid UTF-8 run, then one that decodes across
                # them: "Invalid prefix encountered"). A reply must not fail over its
                # display: decode the whole reply from here on instead.
                self._stream = None
            else:
                self._shown += piece
                return piece
        text = self._tokenizer.decode(self._ids, self._skip_special)
        if text.endswith("\ufffd") or len(text) <= len(self._shown):
            return ""  # a partial character, or nothing past what is out already
        piece, self._shown = text[len(self._shown):], text
        return piece


def _added_tokens(vocab: Vocab) -> list[AddedToken]:
    # llama.cpp matches control/unknown tokens only when parsing special tokens, but
    # user-defined ones always; HF's special flag has the same meaning for encode.
    return [
        AddedToken(tok, special=kind != TYPE_USER_DEFINED, normalized=False,
                   rstrip=i in vocab.rstrip_ids)
        for i, (tok, kind) in enumerate(zip(vocab.tokens, vocab.types, strict=True))
        if vocab.is_special(i)
    ]
