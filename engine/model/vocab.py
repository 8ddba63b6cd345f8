"""A GGUF's tokenizer lists (`tokenizer.ggml.*`) and llama.cpp's rules for its special tokens.

llama.cpp does not take the GGUF's token types at face value: tokens whose text looks like an
end-of-turn or fill-in-the-middle marker become control tokens, the end-of-generation (EOG) set
is built from ids and from known marker texts, and models named Phi-3 strip whitespace after
their special tokens. `Vocab` applies the same rules (llama-vocab.cpp, `load`), so the tokenizer
built from it parses, skips and stops on the same tokens as llama.cpp.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

# llama.cpp token types (gguf.TokenType); spelled out so this module needs no gguf import.
TYPE_NORMAL = 1
TYPE_UNKNOWN = 2
TYPE_CONTROL = 3
TYPE_USER_DEFINED = 4
TYPE_BYTE = 6

# Marker texts llama.cpp promotes to control tokens and, for the EOG list, to stop tokens.
_EOT_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>",
})
_EOG_TEXTS = _EOT_TEXTS | {
    "<|return|>", "<|call|>", "<|flush|>", "<|calls|>", "</s>", "<|eom_id|>", "[EOS]",
    "<eos>", "<turn|>", "<|tool_response>", "[e~[",
}
_FIM_TEXTS = {  # key suffix -> texts; pad, rep and sep ids also end generation
    "pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>",
            "▁<PRE>", "<|code_prefix|>", "<|prefix|>"),
    "suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>",
            "▁<SUF>", "<|code_suffix|>", "<|suffix|>"),
    "mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>",
            "▁<MID>", "<|code_middle|>", "<|middle|>"),
    "pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "sep": ("<|file_sep|>",),
}


class UnsupportedTokenizerError(ValueError):
    """The GGUF's tokenizer is not one we can rebuild faithfully."""


@dataclass
class Vocab:
    """The tokenizer lists of one GGUF, with llama.cpp's special-token rules applied."""

    model: str  # tokenizer.ggml.model: "gpt2" (byte-level BPE) or "llama" (SentencePiece)
    pre: str | None
    tokens: list[str]
    types: list[int]  # after promotion of control-looking tokens
    scores: list[float]
    merges: list[str]
    bos_id: int | None
    eos_id: int | None
    add_bos: bool | None  # None: the GGUF does not say; the tokenizer kind decides
    add_space_prefix: bool
    rstrip_ids: frozenset[int]  # special tokens that swallow the whitespace after them
    end_of_generation_ids: frozenset[int]

    @classmethod
    def from_gguf(cls, reader: Any) -> Vocab:
        """Read a `gguf.GGUFReader`'s tokenizer fields."""
        def get(name: str, default: Any = None) -> Any:
            field = reader.fields.get(name)
            return default if field is None else field.contents()

        model = get("tokenizer.ggml.model")
        if model not in ("gpt2", "llama"):
            raise UnsupportedTokenizerError(
                f"tokenizer model {model!r} is not supported "
                "(byte-level BPE 'gpt2' and SentencePiece 'llama' are)"
            )
        tokens = get("tokenizer.ggml.tokens")
        if not tokens:
            raise UnsupportedTokenizerError("GGUF has no tokenizer.ggml.tokens")
        ids = {key: get(f"tokenizer.ggml.{key}_token_id") for key in (
            "bos", "eos", "eot", "eom", "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep",
            "fim_sep",
        )}
        if model == "llama":  # llama.cpp's defaults for SentencePiece vocabularies
            ids["bos"] = 1 if ids["bos"] is None else ids["bos"]
            ids["eos"] = 2 if ids["eos"] is None else ids["eos"]
        return cls.build(
            model=model,
            pre=get("tokenizer.ggml.pre"),
            tokens=tokens,
            types=get("tokenizer.ggml.token_type") or [TYPE_NORMAL] * len(tokens),
            scores=get("tokenizer.ggml.scores") or [0.0] * len(tokens),
            merges=get("tokenizer.ggml.merges") or [],
            special_ids=ids,
            add_bos=get("tokenizer.ggml.add_bos_token"),
            add_space_prefix=get("tokenizer.ggml.add_space_prefix", model == "llama"),
            model_name=get("general.name", ""),
        )

    @classmethod
    def build(
        cls,
        model: str,
        pre: str | None,
        tokens: Sequence[str],
        types: Sequence[int],
        scores: Sequence[float],
        merges: Sequence[str],
        special_ids: dict[str, int | None],
        add_bos: bool | None = None,
        add_space_prefix: bool = False,
        model_name: str = "",
    ) -> Vocab:
        """Apply llama.cpp's special-token rules to GGUF-style lists. `special_ids` maps
        "bos", "eos", "eot", "eom" and "fim_pre" ... "fim_sep" to ids (missing: None)."""
        n = len(tokens)
        for what, got in (("token types", len(types)), ("scores", len(scores))):
            if got != n:
                raise UnsupportedTokenizerError(f"{got} {what} for {n} tokens")
        ids = {key: special_ids.get(key) for key in (
            "bos", "eos", "eot", "eom", "fim_pre", "fim_suf", "fim_mid", "fim_pad", "fim_rep",
            "fim_sep",
        )}
        for key, tid in ids.items():
            if tid is not None and not 0 <= tid < n:
                if key in ("bos", "eos"):
                    raise UnsupportedTokenizerError(f"{key} id {tid} outside the vocabulary")
                ids[key] = None  # llama.cpp ignores an out-of-range optional id
        # llama.cpp renames empty tokens; later duplicates win in its text -> id map.
        tokens = [tok or f"[EMPTY_{i}]" for i, tok in enumerate(tokens)]
        text_to_id = {tok: i for i, tok in enumerate(tokens)}
        types = list(types)
        eog: set[int] = set()

        def promote(tid: int) -> None:
            types[tid] = TYPE_CONTROL

        if ids["eot"] is None:
            ids["eot"] = _first_present(text_to_id, _EOT_TEXTS)
            if ids["eot"] is not None:
                promote(ids["eot"])
        for part, texts in _FIM_TEXTS.items():
            if ids[f"fim_{part}"] is None:
                ids[f"fim_{part}"] = _first_present(text_to_id, texts)
                if ids[f"fim_{part}"] is not None:
                    promote(ids[f"fim_{part}"])
        eog.update(ids[k] for k in ("fim_pad", "fim_rep", "fim_sep") if ids[k] is not None)
        for text in _EOG_TEXTS & text_to_id.keys():
            eog.add(text_to_id[text])
            promote(text_to_id[text])
        eog.update(ids[k] for k in ("eos", "eot", "eom") if ids[k] is not None)
        texts = {tokens[i]: i for i in eog}
        # gpt-oss and solar-open end a message with <|end|> but a turn with <|return|>/<|call|>.
        has_call = "<|call|>" in texts or "<|calls|>" in texts
        if "<|end|>" in texts and has_call and ("<|return|>" in texts or "<|flush|>" in texts):
            eog.discard(texts["<|end|>"])
            types[texts["<|end|>"]] = TYPE_USER_DEFINED
        if "</s>" in texts and texts.keys() & {"<|tool_response>", "<|plamo:eos|>"}:
            eog.discard(texts["</s>"])
            types[texts["</s>"]] = TYPE_NORMAL
        return cls(
            model=model, pre=pre, tokens=tokens, types=types, scores=list(scores),
            merges=list(merges), bos_id=ids["bos"], eos_id=ids["eos"], add_bos=add_bos,
            add_space_prefix=add_space_prefix,
            rstrip_ids=_phi3_rstrip(model_name, tokens, types, text_to_id),
            end_of_generation_ids=frozenset(eog),
        )

    def is_special(self, tid: int) -> bool:
        """Matched in text before tokenizing; only user-defined ones when specials are off."""
        return self.types[tid] in (TYPE_CONTROL, TYPE_UNKNOWN, TYPE_USER_DEFINED)


def _first_present(text_to_id: dict[str, int], texts: Sequence[str] | frozenset[str]) -> int | None:
    # llama.cpp takes the first match while walking a hash map, so with two candidates its
    # choice is unspecified; the lowest id is at least stable.
    found = [text_to_id[t] for t in texts if t in text_to_id]
    return min(found) if found else None


def _phi3_rstrip(
    model_name: str, tokens: list[str], types: list[int], text_to_id: dict[str, int]
) -> frozenset[int]:
    # llama.cpp keys this on general.name: Phi-3's special tokens eat the whitespace after
    # them, except <unk>, <s> and <|endoftext|>; </s> does too.
    name = model_name.lower()
    if "phi-3" not in name and "phi3" not in name:
        return frozenset()
    strip = {i for i, kind in enumerate(types) if kind in (
        TYPE_CONTROL, TYPE_UNKNOWN, TYPE_USER_DEFINED)}
    if "</s>" in text_to_id:
        strip.add(text_to_id["</s>"])
    strip -= {text_to_id[t] for t in ("<unk>", "<s>", "<|endoftext|>") if t in text_to_id}
    return frozenset(strip)
