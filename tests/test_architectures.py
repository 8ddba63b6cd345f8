"""The architecture table: what it accepts, what it refuses and why, and every backend
agreeing with numpy on each architecture through eviction and rebase.

tests/test_arch_reference.py checks numpy against transformers; here the ggml backend is held
to numpy on longer runs than the reference has, where keys are rotated by rebases (the RoPE
layout matters there too) and slots are evicted.
"""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from engine.backends.vulkan import FEATURES as VULKAN_FEATURES
from engine.conversation import Conversation
from engine.errors import UnsupportedArchitectureError
from engine.model.architecture import ARCHITECTURES, DELTA
from engine.model.gguf_file import open_model
from engine.model.model import load_model
from engine.model.support import support_problem
from engine.snapshot.identity import identity_of
from engine.state.ring_policy import RingPolicy

from .backend_stand_in import GpuBackendStandIn
from .parity import run_steps
from .tiny_model import TinySpec, field_value, write_tiny_gguf

VARIANTS = {
    "llama3-scaled": TinySpec(rope_freq_factors=True, context_length=40),
    "llama-linear": TinySpec(rope_linear_factor=4.0, context_length=40),
    "qwen2": TinySpec(architecture="qwen2", context_length=40),
    "qwen3": TinySpec(architecture="qwen3", head_dim=32, context_length=40),
    "phi3": TinySpec(architecture="phi3", tied=False, context_length=40),
}


def write(tmp_path, spec: TinySpec, name: str = "m.gguf"):
    return write_tiny_gguf(tmp_path / name, spec)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_ggml_matches_numpy_through_eviction_and_rebase(tmp_path, variant) -> None:
    pytest.importorskip("ggml", reason="ggml-python is not installed (needs a C compiler)")
    from engine.backends.ggml.backend import GgmlBackend

    model = load_model(write(tmp_path, VARIANTS[variant]), tmp_path / "cache")
    policy = RingPolicy(max_slots=24, recent_window=4, evict_batch=3, prefill_chunk=5)
    ids = [int(t) for t in np.random.default_rng(1).integers(3, 250, 80)]
    want, ref = run_steps(model, None, ids, policy)
    got, conv = run_steps(model, GgmlBackend(), ids, policy)
    assert ref.ring.rebases >= 2 and conv.ring.rebases == ref.ring.rebases
    # f16 keys: 2^-11 relative rounding per key, measured at most 1e-4 of the peak logit.
    np.testing.assert_allclose(got, want, atol=1e-3 * float(np.abs(want).max()), rtol=0)


def test_config_follows_the_metadata(tmp_path) -> None:
    cfg = open_model(write(tmp_path, VARIANTS["qwen3"])).config
    assert (cfg.architecture, cfg.head_dim, cfg.q_dim, cfg.d_model) == ("qwen3", 32, 128, 64)
    assert cfg.arch.qk_norm and cfg.arch.rope_style == "split_half"
    cfg = open_model(write(tmp_path, VARIANTS["llama-linear"], "l.gguf")).config
    assert cfg.rope_freq_scale == 0.25 and cfg.rope_freq_factors == ()
    cfg = open_model(write(tmp_path, VARIANTS["llama3-scaled"], "s.gguf")).config
    assert len(cfg.rope_freq_factors) == cfg.head_dim // 2
    assert min(cfg.rope_freq_factors) == 1.0 and max(cfg.rope_freq_factors) == 8.0


def test_snapshot_identity_names_the_rope_layout(tmp_path) -> None:
    """A snapshot records how its keys were rotated; plain llama keeps the v1 identity so
    snapshots written before the table existed still restore."""
    layouts = {}
    for name, spec in (("llama", TinySpec()), ("qwen2", VARIANTS["qwen2"]),
                       ("scaled", VARIANTS["llama-linear"])):
        model = load_model(write(tmp_path, spec, f"{name}.gguf"), tmp_path / "cache")
        conv = Conversation(model, RingPolicy(max_slots=16, recent_window=2, evict_batch=2,
                                              prefill_chunk=4))
        layouts[name] = identity_of(conv)["rope"]
    assert layouts["llama"] == {"theta": 10000.0, "dim": 16, "layout": "interleaved"}
    assert layouts["qwen2"]["layout"] == "split_half"
    assert layouts["scaled"]["freq_scale"] == 0.25


def metadata(arch: str, **extra):
    values = {"general.architecture": arch, f"{arch}.block_count": 1, **extra}
    return values.get


def layer_names(arch: str) -> list[str]:
    return ARCHITECTURES[arch].model_tensors(1, tied=True, has_rope_freqs=False)


@pytest.mark.parametrize(("get", "names", "reason"), [
    (metadata("gemma2"), [], "architecture 'gemma2' is not supported (logit soft-capping"),
    (metadata("mamba"), [], "architecture 'mamba' is not supported (supported: llama, qwen2"),
    (metadata("llama", **{"llama.expert_count": 8}), layer_names("llama"), "mixture-of-experts"),
    (metadata("qwen2", **{"qwen2.rope.scaling.type": "yarn", "qwen2.rope.scaling.factor": 4.0}),
     layer_names("qwen2"), "RoPE scaling 'yarn' is not implemented"),
    (metadata("llama", **{"llama.attention.sliding_window": 1024}), layer_names("llama"),
     "sliding-window attention (1024 tokens)"),
    (metadata("phi3"), layer_names("phi3") + ["rope_factors_long.weight"], "LongRoPE"),
    (metadata("qwen2"), layer_names("llama"), "missing tensor 'blk.0.attn_q.bias'"),
    (metadata("llama"), layer_names("llama") + ["blk.0.attn_output.bias"],
     "tensor 'blk.0.attn_output.bias' is not part of llama"),
    (metadata("qwen2", **{"qwen2.rope.scaling.attn_factor": 1.2}), layer_names("qwen2"),
     "attention factor"),
    (metadata("llama", **{"llama.expert_count": "eight"}), layer_names("llama"),
     "'llama.expert_count' is not a number ('eight')"),
    (metadata("llama", **{"llama.block_count": None}), [], "lacks 'llama.block_count'"),
])
def test_support_problem_names_what_is_missing(get, names, reason) -> None:
    assert reason in support_problem(get, names)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_every_table_entry_is_accepted(arch) -> None:
    # One layer that attends: qwen35's interval of 1 makes every layer FULL (others ignore it).
    get = metadata(arch, **{f"{arch}.full_attention_interval": 1})
    assert support_problem(get, layer_names(arch)) is None


def test_phi3_window_is_ignored_like_llama_cpp() -> None:
    get = metadata("phi3", **{"phi3.attention.sliding_window": 2047})
    assert support_problem(get, layer_names("phi3")) is None


def test_refused_model_file_is_one_line(tmp_path) -> None:
    path = tmp_path / "partial.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(1)
    w.add_key_length(32)
    w.add_tensor("token_embd.weight", np.zeros((8, 16), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedArchitectureError) as err:
        open_model(path)
    message = str(err.value)
    assert "\n" not in message and "missing tensor 'output_norm.weight'" in message
    assert str(path) in message


def test_ring_follows_context_and_memory_budget(tmp_path) -> None:
    from dataclasses import replace

    cfg = open_model(write(tmp_path, TinySpec(context_length=1000))).config
    assert RingPolicy.for_model(cfg).max_slots == 1000  # the trained context
    big = replace(cfg, n_layers=80, n_heads=64, n_kv_heads=8, head_dim=128, d_model=8192,
                  context_length=131072)  # a 70B-class geometry: 492 KB per f16/f32 slot
    per_slot = big.kv_bytes_per_slot(2, 4)
    policy = RingPolicy.for_model(big, per_slot)
    assert policy.max_slots == 2048 and policy.max_slots * per_slot <= 1 << 30
    assert RingPolicy.for_model(big, per_slot, slots=8192).max_slots == 8192  # asked for
    with pytest.raises(ValueError, match="longer than the model's trained context"):
        RingPolicy.for_model(cfg, slots=2048)


# A model whose features a GPU backend stand-in lacks (gated delta-net layers, gated queries,
# partial rotary: Qwen3.5's): the Vulkan shaders implement every architecture now, but `auto`
# must still leave a GPU backend for one it does not.
NOT_ON_VULKAN = TinySpec(architecture="qwen35", n_layers=4, head_dim=32, rope_dim=8,
                         conv_kernel=4, context_length=40)
QWEN35_FEATURES = frozenset({"delta_layers", "gated_query", "partial_rotary"})


def test_auto_leaves_vulkan_for_an_architecture_the_shaders_lack(tmp_path) -> None:
    from engine.backends.select import Choice, fit_to_model

    gpu = Choice(GpuBackendStandIn(VULKAN_FEATURES - QWEN35_FEATURES), None)
    llama = open_model(write(tmp_path, VARIANTS["llama3-scaled"], "l.gguf")).config
    qwen2 = open_model(write(tmp_path, VARIANTS["qwen2"], "q.gguf")).config
    qwen35 = open_model(write(tmp_path, NOT_ON_VULKAN, "g.gguf")).config
    assert fit_to_model(gpu, "auto", llama) is gpu
    assert fit_to_model(gpu, "auto", qwen2) is gpu  # split-half RoPE and QKV bias: implemented
    assert fit_to_model(gpu, "vulkan", qwen35) is gpu  # asked for by name: Vulkan refuses it
    assert fit_to_model(gpu, "auto", qwen35, tmp_path).backend.name in ("ggml", "numpy")


def test_auto_leaves_vulkan_for_a_model_whose_sizes_its_shaders_refuse(tmp_path) -> None:
    """Features Vulkan implements at sizes a shader cannot take (a delta-rule head no
    multiple of 4 wide): `auto` runs the model on a CPU backend rather than failing at its
    first pass; asked for by name, Vulkan still refuses it (make_forward)."""
    from engine.backends.select import Choice, fit_to_model

    def refuses(cfg):
        return "delta-rule heads too wide" if DELTA in cfg.kinds else None

    gpu = Choice(GpuBackendStandIn(VULKAN_FEATURES, refuses), None)
    qwen35 = open_model(write(tmp_path, NOT_ON_VULKAN, "g.gguf")).config
    llama = open_model(write(tmp_path, VARIANTS["llama3-scaled"], "l.gguf")).config
    assert fit_to_model(gpu, "auto", llama) is gpu
    assert fit_to_model(gpu, "vulkan", qwen35) is gpu
    assert fit_to_model(gpu, "auto", qwen35, tmp_path).backend.name in ("ggml", "numpy")


def test_auto_takes_numpy_for_a_model_ggml_lacks(tmp_path, monkeypatch) -> None:
    """Where ggml does not implement a model (hybrid layers, until it does), `auto` runs it
    on the numpy reference and says why; ggml keeps the models it runs."""
    from engine.backends import select
    from engine.backends.ggml.lib import available
    from engine.backends.select import Choice, fit_to_model

    if available() is not None:
        pytest.skip(f"ggml is not built here: {available()}")

    gpu = Choice(GpuBackendStandIn(VULKAN_FEATURES - QWEN35_FEATURES), None)
    qwen35 = open_model(write(tmp_path, NOT_ON_VULKAN, "g.gguf")).config
    assert fit_to_model(gpu, "auto", qwen35, tmp_path).backend.name == "ggml"
    monkeypatch.setattr(select, "GGML_FEATURES", select.GGML_FEATURES - {"delta_layers"})
    fitted = fit_to_model(gpu, "auto", qwen35, tmp_path)
    assert fitted.backend.name == "numpy"
    assert fitted.note == ("using the numpy reference backend: the ggml backend does not "
                           "implement gated delta-net layers (qwen35 needs it)")


def test_placement_fits_backend_and_ring_to_each_model(tmp_path) -> None:
    """One engine serves sessions on several models: each gets a backend that implements its
    architecture and a ring no longer than its trained context."""
    from engine.backends.select import Choice, Placement

    gpu = GpuBackendStandIn(VULKAN_FEATURES - QWEN35_FEATURES)
    placement = Placement(Choice(gpu, None), "auto", tmp_path, ring_slots=64)
    llama = open_model(write(tmp_path, VARIANTS["llama3-scaled"], "l.gguf")).config
    qwen35 = open_model(write(tmp_path, NOT_ON_VULKAN, "g.gguf")).config
    assert placement.backend(llama).name == "vulkan"
    cpu = placement.backend(qwen35)
    assert cpu.name in ("ggml", "numpy") and placement.backend(qwen35) is cpu  # made once
    assert placement.policy(qwen35).max_slots == 40  # its trained context, below the 64 asked
    assert Placement(Choice(cpu, None)).policy(qwen35) is None  # sized by the conversation


def test_metadata_of_the_wrong_type_is_one_line(tmp_path) -> None:
    path = write(tmp_path, TinySpec())
    reader = gguf.GGUFReader(path)
    bad = tmp_path / "bad.gguf"
    w = gguf.GGUFWriter(str(bad), "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        value, vtype, sub = field_value(field)
        if key == "llama.attention.head_count":
            value, vtype, sub = b"four", gguf.GGUFValueType.STRING, None
        w.add_key_value(key, value, vtype, sub_type=sub)
    for t in reader.tensors:
        w.add_tensor(t.name, np.asarray(t.data), raw_dtype=t.tensor_type)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(UnsupportedArchitectureError, match="value of the wrong type"):
        open_model(bad)


def test_ring_never_outgrows_a_sliding_window(tmp_path) -> None:
    from dataclasses import replace

    cfg = replace(open_model(write(tmp_path, TinySpec(context_length=16384))).config,
                  sliding_window=4096)  # Mistral 7B v0.1's
    assert RingPolicy.for_model(cfg).max_slots == 4096
    with pytest.raises(ValueError, match="longer than the model's attention window"):
        RingPolicy.for_model(cfg, slots=8192)
