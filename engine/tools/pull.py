"""`channel pull`: one GGUF from the Hugging Face hub, into the hub's own cache.

huggingface_hub does the talking (the repository's file list, the file's metadata, the
transfer with its retries and Range requests) and owns the cache layout: the file lands as
`models--ORG--NAME/blobs/<sha256>` with a `snapshots/<commit>/FILE` link, where `channel
models` and every other tool that uses the hub cache find it. Two things are Channel's:

- resuming across runs: huggingface_hub 2.x resumes a cut connection within one run but
  throws its partial file away when the run ends, so a 5 GB download cut at 90% by a lost
  network or Ctrl+C would start again. The transfer goes to `blobs/<sha256>.incomplete`
  (the name huggingface_hub 1.x resumed from) and the next run asks only for the rest;
- verifying: the bytes' sha256 (git's blob sha1 for a small file kept in git) must be the
  one the hub names in its ETag before the blob is moved into place. A mismatch deletes the
  download and nothing enters the cache.

Then the file's GGUF header is read with the catalog's checks (engine/model/catalog.py), so
the caller can say whether Channel runs it. Every failure is a PullError in one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import ChannelError
from .pull_choice import PullError, PullSpec, choose_gguf

# (phase, bytes done, bytes in all); phases are "download" and "verify".
Progress = Callable[[str, int, int], None]
SHA256 = re.compile(r"[0-9a-f]{64}")
GIT_SHA1 = re.compile(r"[0-9a-f]{40}")
HASH_CHUNK = 1 << 22


@dataclass(frozen=True)
class Pulled:
    """A GGUF in the hub cache, and what the catalog says of it."""

    repo: str
    file: str  # its path in the repository
    path: Path  # the snapshot link in the hub cache, which `channel models` lists
    size: int
    resumed_from: int  # bytes an earlier, cut run had kept; 0 when it started afresh
    downloaded: bool  # False when the cache held the file already
    name: str  # the catalog's display name
    problem: str | None  # why Channel cannot run it; None when it can

    def to_json(self) -> dict:
        return {"repo": self.repo, "file": self.file, "path": str(self.path),
                "size": self.size, "resumed_from": self.resumed_from,
                "downloaded": self.downloaded, "name": self.name,
                "supported": self.problem is None, "problem": self.problem}


def pull(spec: PullSpec, cache_dir: Path, endpoint: str,
         progress: Progress | None = None) -> Pulled:
    """Download the GGUF `spec` names from the hub at `endpoint` into the hub cache
    `cache_dir` (resuming what a cut run kept, verifying its hash) and describe it."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
    from huggingface_hub.file_download import repo_folder_name

    with hub_errors(spec, endpoint):
        info = HfApi(endpoint=endpoint, library_name="channel").model_info(spec.repo)
        file = choose_gguf(spec, [s.rfilename for s in info.siblings or []])
        meta = get_hf_file_metadata(hf_hub_url(spec.repo, file, endpoint=endpoint),
                                    endpoint=endpoint)
        if not meta.etag or not meta.location:
            raise PullError(f"the hub at {endpoint} gave no checksum for {file}; "
                            f"not downloaded")
        folder = repo_folder_name(repo_id=spec.repo, repo_type="model")
        blob = cache_dir / folder / "blobs" / meta.etag
        kept, downloaded = 0, not blob.exists()
        if downloaded:
            lock = cache_dir / ".locks" / folder / f"{meta.etag}.lock"
            kept = fetch_blob(meta.location, blob, meta.size, lock, progress)
            verify_blob(blob, meta.etag, f"{file} from {spec.repo}", progress)
        # The blob is in place: huggingface_hub only links it into the snapshot and
        # records the branch's commit, as it would have after its own download.
        path = Path(hf_hub_download(spec.repo, file, cache_dir=cache_dir, endpoint=endpoint))
    name, problem = describe_gguf(path)
    return Pulled(spec.repo, file, path, path.stat().st_size, kept, downloaded, name, problem)


def fetch_blob(url: str, blob: Path, size: int | None, lock: Path,
               progress: Progress | None) -> int:
    """Transfer `url` into `blob`.incomplete, asking only for what an earlier run did not
    keep; returns how many bytes that was. The lock is huggingface_hub's own for this blob,
    so a second `channel pull` (or another tool) waits instead of writing beside it."""
    from huggingface_hub.file_download import http_get
    from huggingface_hub.utils import WeakFileLock, build_hf_headers

    partial = incomplete_path(blob)
    blob.parent.mkdir(parents=True, exist_ok=True)
    lock.parent.mkdir(parents=True, exist_ok=True)
    with WeakFileLock(lock), open(partial, "ab") as f:
        kept = f.tell()
        if size is not None and kept > size:  # not a prefix of this file: start again
            f.truncate(0)
            kept = 0
        if size is not None and shutil.disk_usage(blob.parent).free < size - kept:
            raise PullError(f"not enough disk space for {size - kept:,} more bytes in "
                            f"{blob.parent}")
        http_get(url, f, resume_size=kept, headers=build_hf_headers(), expected_size=size,
                 displayed_filename=blob.name, tqdm_class=_progress_class(progress, kept))
    return kept


def incomplete_path(blob: Path) -> Path:
    return blob.with_name(blob.name + ".incomplete")


def verify_blob(blob: Path, etag: str, what: str, progress: Progress | None) -> None:
    """Move the finished download into place if its hash is the ETag; delete it and raise
    PullError if not, so a corrupt or substituted file never enters the cache."""
    partial = incomplete_path(blob)
    if SHA256.fullmatch(etag):
        digest, kind = hashlib.sha256(), "sha256"
    elif GIT_SHA1.fullmatch(etag):  # a file kept in git itself: its blob id
        digest, kind = hashlib.sha1(usedforsecurity=False), "git sha1"
        digest.update(f"blob {partial.stat().st_size}\0".encode())
    else:
        partial.unlink(missing_ok=True)
        raise PullError(f"cannot verify {what}: the hub's ETag {etag!r} is no sha256; "
                        f"the download was deleted")
    total, done = partial.stat().st_size, 0
    with open(partial, "rb") as f:
        while chunk := f.read(HASH_CHUNK):
            digest.update(chunk)
            done += len(chunk)
            if progress is not None:
                progress("verify", done, total)
    if digest.hexdigest() != etag:
        partial.unlink(missing_ok=True)
        raise PullError(f"{what} failed its checksum ({kind} {digest.hexdigest()[:16]}…, "
                        f"the hub says {etag[:16]}…); the download was deleted, nothing "
                        f"was kept")
    os.replace(partial, blob)


def describe_gguf(path: Path) -> tuple[str, str | None]:
    """The downloaded file's display name and why Channel cannot run it (None if it can):
    the loader's cheap checks first (a file that is no GGUF is an error), then the
    catalog's, from the header."""
    from ..model.catalog import describe
    from ..model.catalog_sources import HF, Found
    from ..model.model import checked_model_path

    checked_model_path(path)
    entry = describe(Found(HF, path))
    return entry.name, entry.problem


def _progress_class(progress: Progress | None, kept: int) -> type:
    """What http_get takes as its tqdm class: reports bytes to `progress`, prints nothing
    (huggingface_hub's own bar would be a second style beside Channel's)."""

    class Reporter:
        def __init__(self, *, total: int | None = None, initial: int = 0, **_: object):
            self.total = total or 0
            self.done = initial or kept
            self._report()

        def __enter__(self) -> Reporter:
            return self

        def __exit__(self, *exc: object) -> None:
            return None

        def update(self, n: int) -> None:
            self.done += n  # negative when the server ignored Range and it starts again
            self._report()

        def _report(self) -> None:
            if progress is not None:
                progress("download", self.done, max(self.total, self.done))

    return Reporter


def _transport_errors() -> tuple[type[BaseException], ...]:
    """The HTTP client's "no answer" errors: httpx2 under huggingface_hub 2.x."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    for module in ("httpx2", "httpx"):
        with contextlib.suppress(ImportError):
            errors.append(__import__(module).TransportError)
    return tuple(errors)


@contextlib.contextmanager
def hub_errors(spec: PullSpec, endpoint: str) -> Iterator[None]:
    """huggingface_hub's exceptions (several lines, some with a traceback's worth of
    advice) as one PullError line each."""
    from huggingface_hub import errors as hub

    try:
        yield
    except ChannelError:
        raise
    except hub.OfflineModeIsEnabled:
        raise PullError("HF_HUB_OFFLINE is set, so nothing can be downloaded; models "
                        "already here are listed by `channel models`") from None
    except hub.GatedRepoError:
        raise PullError(f"{spec.repo} is gated: accept its terms on its hub page, then log "
                        f"in with `hf auth login`") from None
    except hub.RepositoryNotFoundError:
        raise PullError(f"no model repository {spec.repo} at {endpoint} (a private one "
                        f"needs `hf auth login`)") from None
    except (hub.RevisionNotFoundError, hub.EntryNotFoundError) as exc:
        raise PullError(f"{spec} is not on the hub at {endpoint}: {_first_line(exc)}") \
            from None
    except hub.HfHubHTTPError as exc:
        status = exc.response.status_code if exc.response is not None else "?"
        raise PullError(f"the hub at {endpoint} answered {status}: {_first_line(exc)}") \
            from None
    except Exception as exc:
        cause = _transport_cause(exc)
        if cause is not None:
            raise PullError(f"cannot reach the Hugging Face hub at {endpoint}: "
                            f"{_first_line(cause) or type(cause).__name__} (offline? models "
                            f"already here are listed by `channel models`)") from None
        if isinstance(exc, OSError):
            raise PullError(f"downloading {spec}: {_first_line(exc)}") from None
        raise


def _transport_cause(exc: BaseException) -> BaseException | None:
    """The network error in `exc`'s chain (huggingface_hub wraps some in its own)."""
    transport = _transport_errors()
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, transport):
            return seen
        seen = seen.__cause__ or seen.__context__
    return None


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
