"""engine/model/tokenizer.py against llama.cpp for every tokenizer kind we rebuild.

The vocabularies are tests/fixtures/vocab/*.gguf (pruned from llama.cpp's own vocab test files
by scripts/make_vocab_fixtures.py); the expected ids, reply texts, BOS/EOS settings and
end-of-generation sets come from llama.cpp itself (scripts/llamacpp_token_ids.py).
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from pathlib import Path

import gguf
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.model.pretokenizers import PRE_TOKENIZERS
from engine.model.tokenizer import Tokenizer, UnsupportedTokenizerError
from engine.model.vocab import Vocab

FIXTURES = Path(__file__).parent / "fixtures"
EXPECTED = json.loads((FIXTURES / "llamacpp_vocab_ids.json").read_text(encoding="utf-8"))
CASES = [(text, special) for text, special in EXPECTED["cases"]]
KINDS = sorted(EXPECTED["kinds"])
# The full vocab files are checked only where scripts/llamacpp_token_ids.py --full-vocabs ran.
FULL = Path(tempfile.gettempdir()) / "llamacpp_full_vocab_ids.json"

_tokenizers: dict[str, Tokenizer] = {}


def tokenizer(kind: str) -> Tokenizer:
    # Built once per kind: every parametrized case shares it.
    if kind not in _tokenizers:
        reader = gguf.GGUFReader(str(FIXTURES / "vocab" / EXPECTED["kinds"][kind]["file"]))
        _tokenizers[kind] = Tokenizer.from_gguf(reader)
    return _tokenizers[kind]


KIND_CASES = [
    pytest.param(kind, i, id=f"{kind}-{i}-{ascii(CASES[i][0][:16])}")
    for kind in KINDS for i in range(len(CASES))
]


def test_fixtures_cover_every_kind() -> None:
    assert {"llama-bpe", "qwen2", "llama-spm", "phi-3"} <= set(KINDS)
    assert len(CASES) >= 40
    for kind in KINDS:
        path = FIXTURES / "vocab" / EXPECTED["kinds"][kind]["file"]
        assert path.stat().st_size < 300_000
        reader = gguf.GGUFReader(str(path))
        assert len(reader.tensors) == 0
        assert not [k for k in reader.fields if not k.startswith(("GGUF.", "general.",
                                                                  "tokenizer."))]


@pytest.mark.parametrize(("kind", "index"), KIND_CASES)
def test_ids_match_llamacpp(kind: str, index: int) -> None:
    text, special = CASES[index]
    assert tokenizer(kind).encode(text, parse_special=special) == (
        EXPECTED["kinds"][kind]["ids"][index]
    )


@pytest.mark.parametrize(("kind", "index"), KIND_CASES)
def test_decode_matches_llamacpp_reply_text(kind: str, index: int) -> None:
    ids = EXPECTED["kinds"][kind]["ids"][index]
    want = EXPECTED["kinds"][kind]["decoded"][index]
    tok = tokenizer(kind)
    assert tok.decode(ids) == want
    stream = tok.stream_decoder()
    assert "".join(stream.step(tid) for tid in ids) == want


@pytest.mark.parametrize("kind", KINDS)
def test_special_settings_match_llamacpp(kind: str) -> None:
    tok, want = tokenizer(kind), EXPECTED["kinds"][kind]
    assert (tok.bos_id, tok.eos_id, tok.add_bos) == (want["bos_id"], want["eos_id"],
                                                     want["add_bos"])
    assert tok.end_of_generation_ids == frozenset(want["end_of_generation_ids"])


@pytest.mark.parametrize("kind", KINDS)
def test_json_round_trip_keeps_everything(kind: str) -> None:
    tok = tokenizer(kind)
    again = Tokenizer.from_json(tok.to_json())
    assert (again.vocab_size, again.bos_id, again.eos_id, again.add_bos) == (
        tok.vocab_size, tok.bos_id, tok.eos_id, tok.add_bos)
    assert again.end_of_generation_ids == tok.end_of_generation_ids
    for i, (text, special) in enumerate(CASES):
        ids = again.encode(text, parse_special=special)
        assert ids == EXPECTED["kinds"][kind]["ids"][i]
        assert again.decode(ids) == EXPECTED["kinds"][kind]["decoded"][i]


def test_chat_markers_are_control_tokens_and_stop_generation() -> None:
    markers = {
        "llama-bpe": ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"),
        "qwen2": ("<|im_start|>", "<|im_end|>"),
        "phi-3": ("<|user|>", "<|assistant|>", "<|end|>"),
        "llama-spm": ("<s>", "</s>"),
    }
    stops = {"llama-bpe": "<|eot_id|>", "qwen2": "<|im_end|>", "phi-3": "<|end|>",
             "llama-spm": "</s>"}
    for kind, texts in markers.items():
        tok = tokenizer(kind)
        for text in texts:
            tid = tok.token_to_id(text)
            assert tok.encode(text) == [tid]
            assert tid not in tok.encode(text, parse_special=False)
        assert tok.token_to_id(stops[kind]) in tok.end_of_generation_ids


PRE_GROUPS = [
    pytest.param(name, group["ids"], id=name)
    for group in EXPECTED["pre_names"] for name in group["names"]
]


def test_every_accepted_pre_tokenizer_name_was_checked() -> None:
    assert {name for group in EXPECTED["pre_names"] for name in group["names"]} == set(
        PRE_TOKENIZERS)


@pytest.mark.parametrize(("pre", "want"), PRE_GROUPS)
def test_pre_tokenizer_names_match_llamacpp(pre: str, want: list[list[int]]) -> None:
    reader = gguf.GGUFReader(str(FIXTURES / "vocab" / "llama-bpe.gguf"))
    tok = Tokenizer.from_parsed_vocab(dataclasses.replace(Vocab.from_gguf(reader), pre=pre))
    assert [tok.encode(text, parse_special=special) for text, special in CASES] == want


# Plain text without the few characters whose round trip is lossy by design (none): every kind
# keeps every byte, through byte tokens or byte fallback.
@pytest.mark.parametrize("kind", KINDS)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=st.text(max_size=60))
def test_random_text_round_trips(kind: str, text: str) -> None:
    tok = tokenizer(kind)
    assert tok.decode(tok.encode(text, parse_special=False)) == text


def _write_gguf(path: Path, model: str, pre: str | None, tokens: list[str]) -> Path:
    writer = gguf.GGUFWriter(str(path), arch="llama")
    writer.add_tokenizer_model(model)
    if pre is not None:
        writer.add_tokenizer_pre(pre)
    writer.add_token_list(tokens)
    writer.add_token_merges([])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.mark.parametrize(
    ("model", "pre", "tokens", "named"),
    [
        ("gpt2", "bogus-pre", ["a", "b"], "pre-tokenizer 'bogus-pre'"),
        ("gpt2", None, ["a", "b"], "pre-tokenizer None"),
        ("bert", None, ["[CLS]", "a"], "tokenizer model 'bert'"),
        ("llama", None, ["<unk>", "<s>", "</s>"], "no byte token <0x00>"),
    ],
)
def test_unsupported_tokenizers_are_refused(
    tmp_path: Path, model: str, pre: str | None, tokens: list[str], named: str
) -> None:
    reader = gguf.GGUFReader(str(_write_gguf(tmp_path / "t.gguf", model, pre, tokens)))
    with pytest.raises(UnsupportedTokenizerError) as info:
        Tokenizer.from_gguf(reader)
    assert named in str(info.value) and "\n" not in str(info.value)


@pytest.mark.skipif(not FULL.is_file(), reason="run scripts/llamacpp_token_ids.py --full-vocabs")
def test_full_vocabularies_match_llamacpp() -> None:
    full = json.loads(FULL.read_text(encoding="utf-8"))
    cases = [(text, special) for text, special in full["cases"]]
    for kind, want in full["kinds"].items():
        tok = Tokenizer.from_gguf(gguf.GGUFReader(want["path"]))
        got = [tok.encode(text, parse_special=special) for text, special in cases]
        assert got == want["ids"], kind
        assert [tok.decode(ids) for ids in want["ids"]] == want["decoded"], kind
        assert tok.end_of_generation_ids == frozenset(want["end_of_generation_ids"]), kind
        assert (tok.bos_id, tok.eos_id, tok.add_bos) == (
            want["bos_id"], want["eos_id"], want["add_bos"]), kind
