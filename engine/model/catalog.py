"""The model catalog: every GGUF on this machine, what it is, and whether Channel can run it.

`scan` describes each file that catalog_sources.py finds from its header alone (gguf_header.py:
about 12 ms for the shipped 98 MB model, whose 49k-entry vocabulary is stepped over, and about
as long again to compile and try its chat template), so a listing costs milliseconds per model
whatever their size. Nothing is cached. The same file
reached by two routes (an Ollama blob linked into ~/models, a hub snapshot link) is listed
once, under the first route, with every Ollama name it has. A file that cannot be read is
listed with the reason, like a model Channel does not support: a listing never fails.

`resolve` turns what a person typed after --model into a path: a path, or a listed name.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gguf import GGMLQuantizationType

from ..errors import ModelError
from .architecture import metadata_features, metadata_layer_kinds
from .catalog_sources import Found, Roots, find_ggufs
from .chat_template import ChatTemplate, ChatTemplateError
from .display_name import display_name, quant_label
from .gguf_extent import truncation_problem
from .gguf_header import GGUFHeader, GGUFHeaderError, read_header
from .layer_kinds import layer_summary
from .pretokenizers import pre_tokenizer_spec
from .support import support_problem
from .tensor_types import tensor_type_problem, type_features, type_names
from .vocab import UnsupportedTokenizerError

SUPPORTED = "supported"


class ModelChoiceError(ModelError):
    """--model names no listed model, or more than one; the message lists candidates."""


@dataclass(frozen=True)
class CatalogEntry:
    name: str  # display name, e.g. "SmolLM2 135M Instruct · Q4_1"
    path: str  # as found (the route listed)
    source: str  # bundled, ollama, hf, lmstudio, gpt4all, folder
    architecture: str | None = None
    parameters: int | None = None  # sum of the tensors' element counts
    quantization: str | None = None
    file_size: int = 0
    context_length: int | None = None
    problem: str | None = None  # why Channel cannot run it; None when it can
    aliases: list[str] = field(default_factory=list)  # Ollama names of this file
    # What a backend must implement to run it (architecture.FEATURES, and a `<type>_weights`
    # per tensor type: tensor_types.py); empty if unsupported.
    features: list[str] = field(default_factory=list)
    layers: str = ""  # what a hybrid's layers keep (layer_kinds.layer_summary); "" otherwise

    @property
    def supported(self) -> bool:
        return self.problem is None

    @property
    def status(self) -> str:
        return SUPPORTED if self.problem is None else self.problem

    @property
    def label(self) -> str:
        """What a person would type: the Ollama name if it has one, else the display name."""
        return self.aliases[0] if self.aliases else self.name

    def to_json(self) -> dict:
        return {**asdict(self), "supported": self.supported, "status": self.status}


def scan(roots: Roots) -> list[CatalogEntry]:
    """Every GGUF under `roots`, described; supported first, then by label."""
    entries: dict[str, CatalogEntry] = {}
    for found in find_ggufs(roots):
        try:
            key = os.path.realpath(found.path)
        except (OSError, ValueError):
            key = str(found.path)
        if key in entries:
            if found.alias and found.alias not in entries[key].aliases:
                entries[key].aliases.append(found.alias)
            continue
        entries[key] = describe(found)
    return sorted(entries.values(), key=lambda e: (not e.supported, e.label.lower(), e.path))


def describe(found: Found) -> CatalogEntry:
    """One file's entry, from its header; an unreadable file's entry says why."""
    path = found.path
    aliases = [found.alias] if found.alias else []
    try:
        size = path.stat().st_size
        header = read_header(path)
    except FileNotFoundError:
        return CatalogEntry(path.name, str(path), found.source, problem="file not found "
                            "(a dangling link?)", aliases=aliases)
    except OSError as exc:
        return CatalogEntry(path.name, str(path), found.source,
                            problem=f"cannot read: {exc.strerror or exc}", aliases=aliases)
    except GGUFHeaderError as exc:
        return CatalogEntry(path.name, str(path), found.source, file_size=size,
                            problem=_strip_path(str(exc), path), aliases=aliases)
    arch = header.get("general.architecture")
    arch = str(arch) if arch is not None else None
    context = header.get(f"{arch}.context_length")
    quant = quantization(header)
    return CatalogEntry(
        name=display_name(path, header.get, quant), path=str(path), source=found.source,
        architecture=arch, parameters=sum(t.n_elements for t in header.tensors),
        quantization=quant, file_size=size,
        context_length=int(context) if isinstance(context, int) else None,
        problem=(problem := problem_of(header, size)), aliases=aliases,
        features=[] if problem else sorted(metadata_features(header.get) | type_features(
            type_names(t.ggml_type for t in header.tensors))),
        layers="" if problem else hybrid_layers(header),
    )


def hybrid_layers(header: GGUFHeader) -> str:
    """layer_summary of a supported GGUF's header."""
    arch = header.get("general.architecture")
    n_layers = header.get(f"{arch}.block_count")
    if not isinstance(n_layers, int):
        return ""
    window = header.get(f"{arch}.attention.sliding_window")
    return layer_summary(metadata_layer_kinds(header.get),
                         window if isinstance(window, int) else 0)


def problem_of(header: GGUFHeader, file_size: int | None = None) -> str | None:
    """Why Channel cannot run this model, in the words open_model would use, or None.
    With the file's size, a file too short for its tensors is refused too."""
    names = [t.name for t in header.tensors]
    problem = support_problem(header.get, names)
    if problem is not None:
        return problem
    for t in header.tensors:
        if problem := tensor_type_problem(t.name, t.ggml_type):
            return problem
    if file_size is not None and (problem := truncation_problem(header, file_size)):
        return problem
    return tokenizer_problem(header) or template_problem(header)


def tokenizer_problem(header: GGUFHeader) -> str | None:
    """The tokenizer checks loading makes (vocab.py, pretokenizers.py) that a header can
    answer: the tokenizer kind, a vocabulary, and a byte-level BPE's pre-tokenizer."""
    kind = header.get("tokenizer.ggml.model")
    if kind not in ("gpt2", "llama"):
        return (f"tokenizer model {kind!r} is not supported (byte-level BPE 'gpt2' and "
                f"SentencePiece 'llama' are)")
    if not header.metadata.get("tokenizer.ggml.tokens"):
        return "GGUF has no tokenizer.ggml.tokens"
    if kind == "gpt2":
        try:
            pre_tokenizer_spec(header.get("tokenizer.ggml.pre"))
        except UnsupportedTokenizerError as exc:
            return str(exc)
    return None


# Conversations a chat template must render one of: with a system message, and without (a
# template may refuse system messages, or fold one into the first user turn).
_SAMPLES = ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}],
            [{"role": "user", "content": "Hi?"}, {"role": "assistant", "content": "Hello."},
             {"role": "user", "content": "Bye?"}])


def template_problem(header: GGUFHeader) -> str | None:
    """Why the GGUF's chat template cannot carry a conversation: it does not compile, or
    fails on both sample conversations (every turn would fail). None without a template:
    loading uses plain ChatML then."""
    source = header.get("tokenizer.chat_template")
    if source is None:
        return None
    if not isinstance(source, str):
        return "tokenizer.chat_template is not a string"
    try:
        template = ChatTemplate(source)
    except ChatTemplateError as exc:
        return str(exc)
    failure = None
    for messages in _SAMPLES:
        try:
            template.render(messages, add_generation_prompt=True)
            return None
        except ChatTemplateError as exc:
            failure = failure or exc
    return f"{failure} (on every sample conversation)"


def quantization(header: GGUFHeader) -> str | None:
    """general.file_type's name (Q4_K_M, F16, ...), else the type most weights are in."""
    label = quant_label(header.get("general.file_type"))
    if label is not None:
        return label
    weights: Counter[int] = Counter()
    for t in header.tensors:
        weights[t.ggml_type] += t.n_elements
    if not weights:
        return None
    code = weights.most_common(1)[0][0]
    try:
        return GGMLQuantizationType(code).name
    except ValueError:
        return f"type {code}"


def _strip_path(message: str, path: Path) -> str:
    return message.removesuffix(f": {path}")


def resolve(text: str, entries: list[CatalogEntry]) -> CatalogEntry:
    """The entry `text` names: an exact display or Ollama name, or its file's name or stem
    (any case: what `channel pull` prints), else the one entry whose name contains it (any
    case). Raises ModelChoiceError listing the candidates."""
    exact = [e for e in entries if text == e.name or text in e.aliases]
    if not exact:
        file_name = text.lower()
        exact = [e for e in entries if file_name in (Path(e.path).name.lower(),
                                                     Path(e.path).stem.lower())]
    if len(exact) == 1:
        return exact[0]
    if not exact:
        needle = text.lower()
        exact = [e for e in entries
                 if needle in e.name.lower() or any(needle in a.lower() for a in e.aliases)]
        if len(exact) == 1:
            return exact[0]
    if not exact:
        known = ", ".join(repr(e.label) for e in entries if e.supported) or "none found"
        raise ModelChoiceError(f"no model named {text!r} (a path, or one of: {known}; "
                               f"`channel models` lists them)")
    listed = "; ".join(f"{e.label} ({e.source}: {e.path})" for e in exact)
    raise ModelChoiceError(f"{text!r} names {len(exact)} models: {listed}; give more of the "
                           f"name, or the path")


def looks_like_path(text: str) -> bool:
    """Whether --model's value is meant as a file path rather than a listed name. A bare
    file name (`qwen2.5-0.5b-instruct-q4_k_m.gguf`) that is no file here names a listed
    model's file."""
    return (os.sep in text or (os.altsep or os.sep) in text or text.startswith("~")
            or Path(text).exists())


def resolve_model(text: str, roots: Roots) -> Path:
    """--model's value as a path: itself if it looks like one, else a listed model's, which
    must be one Channel can run."""
    if looks_like_path(text):
        return Path(text).expanduser()
    entry = resolve(text, scan(roots))
    if not entry.supported:
        raise ModelChoiceError(f"{entry.label} cannot run: {entry.problem} ({entry.path})")
    return Path(entry.path)
