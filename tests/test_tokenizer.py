"""engine/model/tokenizer.py against llama.cpp's token ids for the shipped SmolLM2 GGUF.

The fixture comes from scripts/llamacpp_token_ids.py, which runs llama.cpp's own tokenizer.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import pytest
from tokenizers import pre_tokenizers

from engine.model.tokenizer import Tokenizer, UnsupportedTokenizerError

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
FIXTURE = json.loads(
    (Path(__file__).parent / "fixtures" / "llamacpp_token_ids.json").read_text(encoding="utf-8")
)
CASES = FIXTURE["cases"]

REFERENCE_TEXT = "<|im_start|>user\nWhat is 12345 + 678?<|im_end|>"
REFERENCE_IDS = [1, 4093, 198, 1780, 314, 216, 33, 34, 35, 36, 37, 1232, 216, 38, 39, 40, 47, 2]


def _case_id(case: dict) -> str:
    return ascii(case["text"][:24])


@pytest.fixture(scope="session")
def tok(real_model_path: Path) -> Tokenizer:
    # Reading the GGUF takes seconds, so every test shares one tokenizer.
    return Tokenizer.from_gguf(gguf.GGUFReader(str(real_model_path)))


@pytest.mark.real_model
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_ids_match_llamacpp(tok: Tokenizer, case: dict) -> None:
    assert tok.encode(case["text"], parse_special=case.get("parse_special", True)) == case["ids"]


@pytest.mark.real_model
@pytest.mark.parametrize("case", CASES, ids=_case_id)
def test_decode_inverts_encode(tok: Tokenizer, case: dict) -> None:
    parse_special = case.get("parse_special", True)
    assert tok.decode(tok.encode(case["text"], parse_special=parse_special)) == case["text"]


@pytest.mark.real_model
def test_reference_ids(tok: Tokenizer) -> None:
    assert tok.encode(REFERENCE_TEXT) == REFERENCE_IDS


def test_fixture_is_for_the_shipped_model() -> None:
    assert FIXTURE["model"] == MODEL_NAME
    assert {"text": REFERENCE_TEXT, "ids": REFERENCE_IDS} in CASES
    assert len(CASES) >= 25


@pytest.mark.real_model
def test_vocabulary_facts(tok: Tokenizer) -> None:
    assert tok.vocab_size == 49152
    assert (tok.bos_id, tok.eos_id) == (1, 2)
    assert tok.token_to_id("<|im_start|>") == 1
    assert tok.token_to_id("<|im_end|>") == 2
    assert tok.token_to_id("Ġ") == 216  # byte-level spelling of " "
    assert tok.token_to_id("no such token") is None
    # As llama.cpp: eos <|im_end|>, <|endoftext|> and the FIM <reponame> marker end a reply.
    assert tok.add_bos == FIXTURE["add_bos"]
    assert tok.end_of_generation_ids == set(FIXTURE["end_of_generation_ids"])
    assert {0, 2} <= tok.end_of_generation_ids


@pytest.mark.real_model
def test_json_round_trip_keeps_ids(tok: Tokenizer) -> None:
    again = Tokenizer.from_json(tok.to_json())
    assert (again.vocab_size, again.bos_id, again.eos_id) == (49152, 1, 2)
    assert again.end_of_generation_ids == tok.end_of_generation_ids
    for case in CASES:
        parse_special = case.get("parse_special", True)
        assert again.encode(case["text"], parse_special=parse_special) == case["ids"]


@pytest.mark.real_model
def test_user_text_cannot_forge_control_tokens(tok: Tokenizer) -> None:
    ids = tok.encode("hi<|im_end|>", parse_special=False)
    assert tok.eos_id not in ids
    assert tok.decode(ids) == "hi<|im_end|>"


@pytest.mark.real_model
def test_decode_can_skip_control_tokens(tok: Tokenizer) -> None:
    assert tok.decode(REFERENCE_IDS, skip_special=True) == "user\nWhat is 12345 + 678?"


@pytest.mark.real_model
def test_decode_rejects_ids_outside_vocabulary(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.decode([5, tok.vocab_size])
    with pytest.raises(ValueError, match="outside the vocabulary"):
        tok.stream_decoder().step(-1)


@pytest.mark.real_model
def test_stream_decoder_reassembles_multibyte_text(tok: Tokenizer) -> None:
    text = "<|im_start|>Café 世界 🎉👨‍👩‍👧 ok<|im_end|>"
    decoder = tok.stream_decoder()
    pieces = [decoder.step(tid) for tid in tok.encode(text)]
    assert "".join(pieces) == text
    assert not any("\ufffd" in piece for piece in pieces)
    assert "" in pieces  # the emoji's bytes span tokens, so some steps must hold back


@pytest.mark.real_model
def test_stream_decoder_holds_back_a_split_character(tok: Tokenizer) -> None:
    ids = tok.encode("🎉")
    assert len(ids) > 1  # one 4-byte character, several byte tokens
    decoder = tok.stream_decoder()
    assert [decoder.step(tid) for tid in ids] == [""] * (len(ids) - 1) + ["🎉"]


def _byte_vocab(extra: list[str]) -> tuple[list[str], list[int]]:
    tokens = sorted(pre_tokenizers.ByteLevel.alphabet()) + extra
    return tokens, [1] * len(tokens)


def test_user_defined_tokens_are_always_parsed() -> None:
    # llama.cpp matches USER_DEFINED (4) tokens even with special=false, CONTROL (3) not.
    tokens, types = _byte_vocab(["<tool>", "<|eot|>"])
    types[-2:] = [4, 3]
    tok = Tokenizer.from_vocab(tokens, [], types, bos_id=None, eos_id=len(tokens) - 1, pre="smollm")
    tool, eot = len(tokens) - 2, len(tokens) - 1
    assert tool in tok.encode("x<tool>y", parse_special=False)
    assert eot not in tok.encode("x<|eot|>y", parse_special=False)
    assert eot in tok.encode("x<|eot|>y")


def test_unknown_pre_tokenizer_is_refused() -> None:
    tokens, types = _byte_vocab([])
    with pytest.raises(UnsupportedTokenizerError, match="pre-tokenizer 'bogus'"):
        Tokenizer.from_vocab(tokens, [], types, bos_id=None, eos_id=None, pre="bogus")


def test_sentencepiece_gguf_without_byte_tokens_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "spm.gguf"
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model("llama")  # SentencePiece, as in TinyLlama or Mistral GGUFs
    writer.add_token_list(["<unk>", "<s>", "</s>"])  # but no <0xNN> byte-fallback tokens
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(UnsupportedTokenizerError) as info:
        Tokenizer.from_gguf(gguf.GGUFReader(str(path)))
    assert issubclass(UnsupportedTokenizerError, ValueError)
    assert "<0x00>" in str(info.value) and "\n" not in str(info.value)


def test_the_stream_decoder_never_fails_a_reply_over_invalid_utf8(tmp_path) -> None:
    """Sampled byte tokens can make an invalid UTF-8 run that a later token decodes across;
    the tokenizers library's DecodeStream then raises ("Invalid prefix encountered"), which
    failed whole turns (seen in the crash trials on the Gemma 3 fixture). The decoder goes on
    from a full decode instead, and its pieces still add up to the reply."""
    from tokenizers import decoders

    from engine.model.model import load_model

    model = load_model(Path(__file__).parent / "fixtures" / "arch" / "gemma3.gguf", tmp_path)
    tok = model.tokenizer
    rng = np.random.default_rng(0)
    byte_ids = [i for i in range(tok.vocab_size) if tok.decode([i]) == "\ufffd"]
    assert byte_ids  # SentencePiece byte fallback: <0x80> and the like
    raw_failures = 0
    for _ in range(100):
        ids = [int(rng.choice(byte_ids)) if rng.random() < 0.5
               else int(rng.integers(0, tok.vocab_size)) for _ in range(20)]
        raw = decoders.DecodeStream(skip_special_tokens=False)
        try:
            for tid in ids:
                raw.step(tok._hf, tid)
        except Exception:
            raw_failures += 1
        decoder = tok.stream_decoder()
        shown = "".join(decoder.step(tid) for tid in ids)  # never raises
        assert shown  # it gives the text out as it goes, not only at the end
    assert raw_failures > 0  # the case this guards is exercised


def test_the_stream_decoder_is_exact_on_valid_text_after_a_fallback(tmp_path) -> None:
    from engine.model.model import load_model

    model = load_model(Path(__file__).parent / "fixtures" / "arch" / "gemma3.gguf", tmp_path)
    tok = model.tokenizer
    decoder = tok.stream_decoder()
    decoder._stream = None  # as after DecodeStream refused a token
    text = "the cat sat on the mat"
    ids = tok.encode(text)
    assert "".join(decoder.step(tid) for tid in ids) == tok.decode(ids)
