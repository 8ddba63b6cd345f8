"""A bounded reader for the header of a GGUF file: its metadata and its tensor table.

gguf-py's GGUFReader materializes every metadata array (a 150k-entry vocabulary takes
seconds), which is right for loading a model and wrong for listing fifty of them. This reader
takes the scalar metadata and small arrays, steps over large arrays (the vocabulary, merges,
scores) without building them, and reads each tensor's name, type and shape. It reads the file
little-endian explicitly, checks every length against what is left of the file and against the
caps below, and turns every way a header can be bad into one GGUFHeaderError subclass with a
one-line message, so that a corrupt or hostile file costs a bounded amount of time and memory.

Format (GGUF v2 and v3): magic "GGUF", u32 version, u64 tensor count, u64 key-value count,
then the key-value pairs, then per tensor: name, u32 n_dims, u64 dims[n_dims], u32 type,
u64 offset.
"""

from __future__ import annotations

import mmap
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ModelError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
# Caps: far above any real model's header, far below what would hurt to read.
MAX_HEADER_BYTES = 256 << 20  # everything before the tensor data
MAX_KV_COUNT = 1 << 16
MAX_TENSOR_COUNT = 1 << 20
MAX_KEY_BYTES = 1 << 16
MAX_STRING_BYTES = 16 << 20  # a chat template is a few KB; this is generous
MAX_DIMS = 8  # ggml has 4
MAX_ARRAY_COUNT = 1 << 26
U64 = struct.Struct("<Q")
KEEP_ARRAY_ITEMS = 64  # arrays up to this long are kept; longer ones are only counted

# Value type codes -> (struct format, byte size); 8 (string) and 9 (array) are variable.
STRING, ARRAY = 8, 9
FIXED = {0: ("<B", 1), 1: ("<b", 1), 2: ("<H", 2), 3: ("<h", 2), 4: ("<I", 4), 5: ("<i", 4),
         6: ("<f", 4), 7: ("<?", 1), 10: ("<Q", 8), 11: ("<q", 8), 12: ("<d", 8)}


class GGUFHeaderError(ModelError):
    """A GGUF header that cannot be read; the message says why, in one line."""


class NotGGUFHeaderError(GGUFHeaderError):
    """The file does not start with the GGUF magic."""


class GGUFVersionError(GGUFHeaderError):
    """A GGUF version this reader does not know (or a big-endian file)."""


class TruncatedHeaderError(GGUFHeaderError):
    """The header claims more bytes than the file has."""


class HeaderLimitError(GGUFHeaderError):
    """The header is larger than the reader's caps allow."""


class MalformedHeaderError(GGUFHeaderError):
    """A value in the header is invalid (unknown type code, bad UTF-8, ...)."""


@dataclass(frozen=True)
class SkippedArray:
    """A metadata array too long to keep: its element type code and length."""

    item_type: int
    count: int


@dataclass(frozen=True)
class TensorHeader:
    name: str
    ggml_type: int  # a GGMLQuantizationType value (unknown codes are kept as read)
    shape: tuple[int, ...]  # GGUF order: fastest-varying dimension first
    offset: int  # relative to the start of the tensor data

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFHeader:
    version: int
    metadata: dict[str, object]  # scalars, strings, kept arrays (lists), SkippedArray
    tensors: list[TensorHeader] = field(default_factory=list)
    header_bytes: int = 0  # bytes read, up to the end of the tensor table

    def get(self, key: str, default=None):
        """A metadata value, or `default` when missing or a skipped (long) array."""
        value = self.metadata.get(key, default)
        return default if isinstance(value, SkippedArray) else value


class _Cursor:
    """Little-endian reads from a buffer, every one checked against the end and the cap."""

    def __init__(self, data, limit: int, where: str):
        self.data = data
        self.pos = 0
        self.end = min(len(data), limit)
        self.size = len(data)
        self.where = where

    def need(self, n: int, what: str) -> int:
        if n < 0 or self.pos + n > self.end:
            if self.pos + n > self.size or n < 0:
                raise TruncatedHeaderError(
                    f"truncated GGUF header: {what} needs {n} bytes at offset {self.pos}, "
                    f"file has {self.size}: {self.where}")
            raise HeaderLimitError(f"GGUF header larger than {self.end} bytes (at {what}): "
                                   f"{self.where}")
        at = self.pos
        self.pos += n
        return at

    def fixed(self, fmt: str, size: int, what: str):
        return struct.unpack_from(fmt, self.data, self.need(size, what))[0]

    def u32(self, what: str) -> int:
        return self.fixed("<I", 4, what)

    def u64(self, what: str) -> int:
        return self.fixed("<Q", 8, what)

    def string(self, what: str, cap: int) -> str:
        n = self.u64(f"{what} length")
        if n > cap:
            raise HeaderLimitError(f"{what} is {n} bytes, over the {cap}-byte limit: "
                                   f"{self.where}")
        at = self.need(n, what)
        try:
            return bytes(self.data[at : at + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedHeaderError(f"{what} at offset {at} is not valid UTF-8: "
                                       f"{self.where}") from None

    def skip_strings(self, count: int, what: str) -> None:
        """Step over `count` strings (a vocabulary: ~10 ms per 100k) without decoding them."""
        data, pos, end, unpack = self.data, self.pos, self.end, U64.unpack_from
        for _ in range(count):
            if pos + 8 > end:
                break
            pos += 8 + unpack(data, pos)[0]
            if pos > end:
                break
        else:
            self.pos = pos
            return
        self.pos = min(pos, end)  # report the string that runs past the end, as need() does
        self.need(max(pos - self.pos, 8), f"an item of {what}")


def read_header(path: str | os.PathLike, max_bytes: int = MAX_HEADER_BYTES) -> GGUFHeader:
    """Read a GGUF file's metadata and tensor table; raise a GGUFHeaderError naming the
    problem. Reads at most `max_bytes` of the file."""
    path = Path(path)
    # O_NONBLOCK: opening a FIFO planted among the models must not wait for a writer.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotGGUFHeaderError(f"not a regular file: {path}")
        if st.st_size < 4:
            raise NotGGUFHeaderError(f"not a GGUF file ({st.st_size} bytes): {path}")
        # The mmap object itself is the buffer (no memoryview), so closing it cannot fail on
        # a view an exception's traceback still holds.
        with mmap.mmap(fd, 0, access=mmap.ACCESS_READ) as data:
            return parse_header(data, str(path), max_bytes)
    finally:
        os.close(fd)


def parse_header(data, where: str = "<bytes>", max_bytes: int = MAX_HEADER_BYTES) -> GGUFHeader:
    """`read_header` on a buffer (bytes, or a memoryview of a mapped file)."""
    cur = _Cursor(data, max_bytes, where)
    if len(data) < 4 or bytes(data[:4]) != MAGIC:
        raise NotGGUFHeaderError(f"not a GGUF file (starts with {bytes(data[:4])!r}, expected "
                                 f"b'GGUF'): {where}")
    cur.pos = 4
    version = cur.u32("version")
    if version not in VERSIONS:
        swapped = int.from_bytes(version.to_bytes(4, "little"), "big")
        if swapped in VERSIONS:
            raise GGUFVersionError(f"big-endian GGUF files are not supported: {where}")
        raise GGUFVersionError(f"GGUF version {version} is not supported (2 or 3): {where}")
    n_tensors = cur.u64("tensor count")
    n_kv = cur.u64("metadata count")
    if n_tensors > MAX_TENSOR_COUNT:
        raise HeaderLimitError(f"{n_tensors} tensors, over the limit of {MAX_TENSOR_COUNT}: "
                               f"{where}")
    if n_kv > MAX_KV_COUNT:
        raise HeaderLimitError(f"{n_kv} metadata entries, over the limit of {MAX_KV_COUNT}: "
                               f"{where}")
    metadata: dict[str, object] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key", MAX_KEY_BYTES)
        metadata[key] = _value(cur, cur.u32(f"type of {key!r}"), key)
    tensors = []
    for _ in range(n_tensors):
        name = cur.string("tensor name", MAX_KEY_BYTES)
        n_dims = cur.u32(f"dimension count of {name!r}")
        if n_dims > MAX_DIMS:
            raise MalformedHeaderError(f"tensor {name!r} has {n_dims} dimensions (at most "
                                       f"{MAX_DIMS}): {where}")
        shape = tuple(cur.u64(f"shape of {name!r}") for _ in range(n_dims))
        ggml_type = cur.u32(f"type of {name!r}")
        offset = cur.u64(f"offset of {name!r}")
        tensors.append(TensorHeader(name, ggml_type, shape, offset))
    return GGUFHeader(version, metadata, tensors, cur.pos)


def _value(cur: _Cursor, kind: int, key: str):
    if kind in FIXED:
        fmt, size = FIXED[kind]
        return cur.fixed(fmt, size, repr(key))
    if kind == STRING:
        return cur.string(f"value of {key!r}", MAX_STRING_BYTES)
    if kind != ARRAY:
        raise MalformedHeaderError(f"metadata {key!r} has unknown value type {kind}: "
                                   f"{cur.where}")
    item = cur.u32(f"item type of {key!r}")
    count = cur.u64(f"length of {key!r}")
    if count > MAX_ARRAY_COUNT:
        raise HeaderLimitError(f"metadata {key!r} has {count} items, over the limit of "
                               f"{MAX_ARRAY_COUNT}: {cur.where}")
    if item in FIXED:
        fmt, size = FIXED[item]
        if count > KEEP_ARRAY_ITEMS:
            cur.need(count * size, repr(key))
            return SkippedArray(item, count)
        at = cur.need(count * size, repr(key))
        return list(struct.unpack_from(f"<{count}{fmt[1]}", cur.data, at))
    if item == STRING:
        # Each item is at least its 8-byte length: a count the file cannot hold is refused
        # before the loop, so a forged count cannot make us spin.
        cur.need(0, repr(key))
        if count * 8 > cur.end - cur.pos:
            cur.need(count * 8, f"{key!r} ({count} strings)")
        if count > KEEP_ARRAY_ITEMS:
            cur.skip_strings(count, repr(key))
            return SkippedArray(item, count)
        return [cur.string(f"item of {key!r}", MAX_STRING_BYTES) for _ in range(count)]
    # Arrays of arrays do not occur in models Channel can run; refusing them bounds the work.
    raise MalformedHeaderError(f"metadata {key!r} is an array of type {item}, which this "
                               f"reader does not take: {cur.where}")
