"""Which GGUF `channel pull REPO[:FILE or QUANT]` means: the spec read, the file chosen.

Nothing here touches the network: `choose_gguf` takes the repository's file list, so the
rules (a file name, a quantization tag, or the one GGUF there is) are tested on lists.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import ChannelError

# A hub repository id: ORG/NAME, the characters the hub allows (huggingface_hub's rule).
REPO_ID = re.compile(r"[A-Za-z0-9][\w.-]{0,95}/[\w.-]{1,96}")
# Prefixes a person may paste with the id: a model page's address, or Ollama's hf.co form.
HUB_PREFIXES = ("https://huggingface.co/", "http://huggingface.co/", "huggingface.co/",
                "hf.co/")
# llama.cpp's gguf-split names its parts NAME-00001-of-00003.gguf; Channel reads one file.
SPLIT_PART = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
EXAMPLE = "bartowski/Qwen2.5-0.5B-Instruct-GGUF:Q4_K_M"
MAX_LISTED = 10  # file names an error lists before it says how many more


class PullError(ChannelError):
    """`channel pull` cannot fetch what was asked; the message is one line."""


@dataclass(frozen=True)
class PullSpec:
    repo: str  # ORG/NAME
    want: str | None  # a file name, a file stem or a quantization tag; None: the only GGUF

    def __str__(self) -> str:
        return self.repo if self.want is None else f"{self.repo}:{self.want}"


def parse_spec(text: str) -> PullSpec:
    """REPO[:FILE or QUANT] as typed (a pasted hub address works too); PullError if not."""
    spec = text.strip()
    for prefix in HUB_PREFIXES:
        if spec.lower().startswith(prefix):
            spec = spec[len(prefix):]
            break
    repo, _, want = spec.partition(":")
    repo = repo.strip().strip("/")
    if not REPO_ID.fullmatch(repo) or ".." in repo:
        raise PullError(f"{text!r} is not a Hugging Face model repository: give ORG/NAME, "
                        f"optionally :FILE or :QUANT (e.g. {EXAMPLE})")
    return PullSpec(repo, want.strip() or None)


def _listed(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_LISTED])
    more = len(names) - MAX_LISTED
    return f"{shown}, and {more} more" if more > 0 else shown


def _basename(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _is_projector(path: str) -> bool:
    """A vision model's projector (mmproj-*.gguf) sits beside the language model; it is
    never what a bare REPO or a quant tag means."""
    return _basename(path).lower().startswith("mmproj")


def quant_matches(tag: str, path: str) -> bool:
    """Whether file `path` carries quantization `tag` (any case) as a whole part of its
    name: Q4_K matches model-Q4_K.gguf but not model-Q4_K_M.gguf."""
    stem = _basename(path).lower()
    pattern = rf"(?:^|[-._]){re.escape(tag.lower())}(?=$|[-.])"
    return re.search(pattern, stem) is not None


def choose_gguf(spec: PullSpec, files: list[str]) -> str:
    """The one GGUF in `files` that `spec` names: an exact file name or stem, else the one
    file tagged with the quantization, else the only GGUF. PullError, listing the choices,
    when it names none or several."""
    ggufs = sorted(f for f in files if f.lower().endswith(".gguf"))
    if not ggufs:
        raise PullError(f"{spec.repo} has no GGUF file ({len(files)} files; Channel runs "
                        f"GGUF models: look for a repository named …-GGUF)")
    models = [f for f in ggufs if not _is_projector(f)] or ggufs
    if spec.want is None:
        if len(models) == 1:
            return _single_file(spec, models[0])
        raise PullError(f"{spec.repo} has {len(models)} GGUF files; name one after a colon, "
                        f"a file or a quantization (e.g. {spec.repo}:Q4_K_M): "
                        f"{_listed([_basename(f) for f in models])}")
    want = spec.want
    for same in (lambda a, b: a == b, lambda a, b: a.lower() == b.lower()):
        named = [f for f in ggufs if same(f, want) or same(_basename(f), want)
                 or same(_basename(f)[:-5], want)]
        if len(named) == 1:
            return _single_file(spec, named[0])
    tagged = [f for f in models if quant_matches(want, f)]
    parts = {SPLIT_PART.sub(".gguf", f) for f in tagged}
    if len(tagged) == 1 or (tagged and len(parts) == 1):
        return _single_file(spec, tagged[0])
    if len(tagged) > 1:
        raise PullError(f"{spec} matches {len(tagged)} files; name one: "
                        f"{_listed([_basename(f) for f in tagged])}")
    raise PullError(f"{spec.repo} has no GGUF named or tagged {want!r}; its GGUF files: "
                    f"{_listed([_basename(f) for f in ggufs])}")


def _single_file(spec: PullSpec, path: str) -> str:
    """`path`, unless it is one part of a split GGUF, which Channel cannot load."""
    split = SPLIT_PART.search(path)
    if split:
        raise PullError(f"{_basename(path)} in {spec.repo} is part {int(split.group(1))} of "
                        f"a GGUF split into {int(split.group(2))} files; Channel reads "
                        f"single-file GGUFs (llama.cpp's gguf-split --merge joins them)")
    return path
