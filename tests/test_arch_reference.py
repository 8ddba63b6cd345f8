"""Every supported architecture against HF transformers, on committed tiny GGUFs.

tests/fixtures/arch/ holds a tiny random-weight GGUF per architecture (Llama 3 RoPE scaling,
linear scaling, Mistral-style GQA, Qwen2 QKV bias, Qwen3 QK-norm with wide heads, Phi-3 fused
projections), each with its family's tokenizer, and the logits transformers computed for them
(scripts/make_arch_reference.py). The numpy backend must match within 1e-3 at every position,
through both its prefill (every row) and decode (one token at a time) paths; ggml within the
quantization tolerance its parity tests justify; greedy continuations must be equal.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from engine.backends import problems_running
from engine.conversation import Conversation
from engine.errors import UnsupportedArchitectureError
from engine.model.model import load_model
from engine.state.ring_policy import RingPolicy
from engine.tools.doctor import diagnose

from .parity import prefill_row_logits

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures" / "arch"
INDEX = json.loads((FIXTURES / "index.json").read_text())["fixtures"]
NAMES = sorted(INDEX)
POLICY = RingPolicy(max_slots=64, recent_window=8, evict_batch=4, prefill_chunk=8)
ATOL_NUMPY = 1e-3  # both sides are f32 over the same dequantized weights
NUMPY_ONLY: tuple[str, ...] = ()  # architectures only the numpy backend implements
# ggml rounds each product's input to 8-bit blocks for Q8_0 weights and keeps keys in f16;
# tests/test_ggml_parity.py measured up to 1.5% of the largest logit on tiny models.
REL_GGML = 3e-2
# The architectures the Vulkan backend implements.
VULKAN_RUNS = {"llama", "qwen2", "qwen3", "phi3", "lfm2", "qwen35", "gemma3"}


@pytest.fixture(scope="module")
def reference() -> dict[str, np.ndarray]:
    with np.load(FIXTURES / "reference.npz") as data:
        return dict(data)


@pytest.fixture(scope="module", params=NAMES)
def arch_model(request, tmp_path_factory):
    cache = tmp_path_factory.mktemp(f"arch-{request.param}")
    return request.param, load_model(FIXTURES / f"{request.param}.gguf", cache)


def all_position_logits(model, ids: list[int], backend=None) -> np.ndarray:
    """Logits after every prefix of ids, through the batched prefill path."""
    return prefill_row_logits(model, ids, backend, POLICY)


def decode_logits(model, ids: list[int], backend=None) -> np.ndarray:
    """Logits after every prefix of ids, one decode step per token after the first."""
    conv = Conversation(model, POLICY, backend=backend)
    rows = [conv.ingest(ids[:1]).copy()]
    rows += [conv.forward.decode_one_token(t).copy() for t in ids[1:]]
    return np.stack(rows)


def greedy(model, ids: list[int], n: int, backend=None) -> list[int]:
    conv = Conversation(model, POLICY, backend=backend)
    logits, out = conv.ingest(ids), []
    for _ in range(n):
        out.append(int(np.argmax(logits)))
        logits = conv.forward.decode_one_token(out[-1])
    return out


def refusal(model, backend: str) -> str | None:
    """Why `backend` refuses the fixture's model (the architecture table's words), or None
    (numpy and ggml run every fixture; Vulkan the llama ones)."""
    return problems_running(model.config.features, model.config.architecture)[backend]


def check_close(got: np.ndarray, ref: dict, name: str, atol: float) -> None:
    subset = ref[f"{name}/subset"]
    np.testing.assert_allclose(got[:, subset], ref[f"{name}/subset_logits"], atol=atol, rtol=0)
    peak = got.max(axis=1)
    lse = np.log(np.exp(got - peak[:, None]).sum(axis=1)) + peak
    np.testing.assert_allclose(lse, ref[f"{name}/lse"], atol=atol, rtol=0)


def test_fixtures_cover_every_architecture() -> None:
    from engine.model.architecture import ARCHITECTURES

    assert {entry["architecture"] for entry in INDEX.values()} == set(ARCHITECTURES)


def test_numpy_prefill_matches_transformers(arch_model, reference) -> None:
    name, model = arch_model
    ids = [int(t) for t in reference[f"{name}/ids"]]
    got = all_position_logits(model, ids)
    check_close(got, reference, name, ATOL_NUMPY)
    assert list(got.argmax(axis=1)) == list(reference[f"{name}/argmax"])


def test_numpy_decode_matches_transformers(arch_model, reference) -> None:
    name, model = arch_model
    ids = [int(t) for t in reference[f"{name}/ids"]]
    check_close(decode_logits(model, ids), reference, name, ATOL_NUMPY)


def test_numpy_greedy_matches_transformers(arch_model, reference) -> None:
    name, model = arch_model
    ids = [int(t) for t in reference[f"{name}/ids"]]
    want = [int(t) for t in reference[f"{name}/greedy"]]
    assert greedy(model, ids, len(want)) == want


@pytest.mark.parametrize("name", NAMES)
def test_channel_chat_runs_every_architecture(tmp_path, name) -> None:
    """The whole product path on each fixture: the CLI, its tokenizer and chat template, a
    turn, the reply's end-of-generation token, and a warm second turn from the snapshot.
    A fixture ggml cannot run is asked of numpy by name."""
    ggml_runs = INDEX[name]["architecture"] not in NUMPY_ONLY
    backend = [] if ggml_runs else ["--backend", "numpy"]

    def chat(text: str) -> dict:
        proc = subprocess.run(
            [sys.executable, "-m", "channel_cli.cli", "chat", "--json", "--max-tokens", "6",
             "--temperature", "0",  # greedy: the replies these checks were written for
             "--model", str(FIXTURES / f"{name}.gguf"), "--data-dir", str(tmp_path / "data"),
             "--cache-dir", str(tmp_path / "cache"), *backend, text],
            capture_output=True, text=True, cwd=REPO, timeout=300)
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    first = chat("Hello, who are you?")
    assert first["prompt_tokens"] > 5 and 1 <= len(first["reply_ids"]) <= 6
    second = chat("And what is 2 + 2?")
    assert second["boot"] == "warm", second["boot"]


@pytest.fixture(scope="module")
def ggml_backend():
    pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
    from engine.backends.ggml.backend import GgmlBackend

    return GgmlBackend()


def test_ggml_matches_transformers(arch_model, reference, ggml_backend) -> None:
    name, model = arch_model
    if refusal(model, "ggml") is not None:
        with pytest.raises(UnsupportedArchitectureError, match="does not implement") as exc:
            Conversation(model, POLICY, backend=ggml_backend)
        assert str(exc.value) == f"{refusal(model, 'ggml')}; use --backend numpy"
        return
    ids = [int(t) for t in reference[f"{name}/ids"]]
    want = reference[f"{name}/subset_logits"]
    atol = REL_GGML * float(np.abs(want).max())
    for got in (all_position_logits(model, ids, ggml_backend),
                decode_logits(model, ids, ggml_backend)):
        np.testing.assert_allclose(got[:, reference[f"{name}/subset"]], want, atol=atol, rtol=0)
        agree = np.mean(got.argmax(axis=1) == reference[f"{name}/argmax"])
        assert agree >= 0.9, f"{name}: ggml's argmax agrees with transformers at {agree:.0%}"


def test_ggml_greedy_matches_transformers(arch_model, reference, ggml_backend) -> None:
    """Equal, or parting only where transformers' own top two logits were closer than the
    tolerance above (random tiny models have near-ties that 8-bit rounding may flip)."""
    name, model = arch_model
    if refusal(model, "ggml") is not None:
        pytest.skip("ggml refuses this architecture (test_ggml_matches_transformers)")
    ids = [int(t) for t in reference[f"{name}/ids"]]
    want = [int(t) for t in reference[f"{name}/greedy"]]
    got = greedy(model, ids, len(want), ggml_backend)
    if got != want:
        step = next(i for i, (a, b) in enumerate(zip(got, want)) if a != b)
        margin = float(reference[f"{name}/greedy_margin"][step])
        tolerance = REL_GGML * float(np.abs(reference[f"{name}/subset_logits"]).max())
        assert margin < tolerance, f"{name}: parted at step {step}, margin {margin:.3f}"


def test_vulkan_runs_what_it_implements_and_refuses_the_rest(arch_model, reference,
                                                            vk_backend) -> None:
    """Vulkan runs the llama layout with any RoPE scaling (its tables come from the CPU) and
    the architecture features it declares, within the numpy tolerance through both decode and
    chunked prefill; every other architecture is refused in one line that names what is
    missing."""
    from engine.backends.vulkan.loader import UnsupportedModelForVulkanError

    name, model = arch_model
    ids = [int(t) for t in reference[f"{name}/ids"]]
    assert (refusal(model, "vulkan") is None) == (model.config.architecture in VULKAN_RUNS)
    if refusal(model, "vulkan") is not None:
        with pytest.raises(UnsupportedModelForVulkanError, match="does not implement") as exc:
            Conversation(model, POLICY, backend=vk_backend)
        # The same words `channel doctor` says for this file: one support function.
        doctor = diagnose(model.path, model.path.parent, model.path.parent)
        cpu = "ggml" if refusal(model, "ggml") is None else "numpy"
        assert str(exc.value) == f"{doctor['model']['backends']['vulkan']}; use --backend {cpu}"
        assert doctor["model"]["backends"]["numpy"] is None
        assert doctor["model"]["backends"]["ggml"] == refusal(model, "ggml")
        return
    check_close(decode_logits(model, ids, vk_backend), reference, name, ATOL_NUMPY)
    # Chunked prefill (Vulkan projects no hidden rows): the logits after the last token.
    last = Conversation(model, POLICY, backend=vk_backend).ingest(ids)
    subset = reference[f"{name}/subset"]
    np.testing.assert_allclose(last[subset], reference[f"{name}/subset_logits"][-1],
                               atol=ATOL_NUMPY, rtol=0)
