"""A checked, sealable byte layout: named regions at exact, aligned, non-overlapping offsets.

Every size is computed with explicit integer checks (dimensions must be non-negative ints and
the product must stay under MAX_ARENA_BYTES), so a bad geometry fails here with a named error
rather than as a short buffer later. Once sealed the layout is immutable, and only a sealed
layout can back an arena.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..align import align_up
from ..errors import LayoutError, LayoutSealedError

MAX_ARENA_BYTES = 1 << 40  # 1 TiB: far above any real geometry, far below int64 overflow


@dataclass(frozen=True)
class Region:
    name: str
    offset: int  # bytes from the arena's aligned base; a multiple of ALIGN
    dtype: np.dtype
    shape: tuple[int, ...]  # as stored
    # The order the arena's views present the stored axes in (None: as stored). Values kept
    # by dimension are stored (L, kv_dim, S) and seen (L, S, kv_dim): state/kv_format.py.
    view_axes: tuple[int, ...] | None = None

    @property
    def nbytes(self) -> int:
        return self.dtype.itemsize * _checked_count(self.shape, self.name)

    @property
    def end(self) -> int:
        return self.offset + self.nbytes


def _checked_count(shape: tuple[int, ...], name: str) -> int:
    count = 1
    for dim in shape:
        if not isinstance(dim, (int, np.integer)) or isinstance(dim, bool) or dim < 0:
            raise LayoutError(f"region {name!r}: dimension {dim!r} is not a non-negative int")
        count *= int(dim)
        if count > MAX_ARENA_BYTES:
            raise LayoutError(f"region {name!r}: {shape} exceeds {MAX_ARENA_BYTES} elements")
    return count


class ArenaLayout:
    """Regions are appended in order; seal() freezes the map and fixes the total size."""

    def __init__(self) -> None:
        self._regions: dict[str, Region] = {}
        self._cursor = 0
        self._sealed = False

    def add(self, name: str, dtype: np.dtype | type | str, shape: tuple[int, ...],
            view_axes: tuple[int, ...] | None = None) -> Region:
        if self._sealed:
            raise LayoutSealedError(f"layout is sealed; cannot add region {name!r}")
        if name in self._regions:
            raise LayoutError(f"region {name!r} already exists")
        _checked_count(shape, name)
        if view_axes is not None and sorted(view_axes) != list(range(len(shape))):
            raise LayoutError(f"region {name!r}: view axes {view_axes} do not permute {shape}")
        region = Region(name, self._cursor, np.dtype(dtype), tuple(int(d) for d in shape),
                        view_axes)
        end = region.end
        if end > MAX_ARENA_BYTES:
            raise LayoutError(f"layout exceeds {MAX_ARENA_BYTES} bytes at region {name!r}")
        self._regions[name] = region
        self._cursor = align_up(end)
        return region

    def seal(self) -> ArenaLayout:
        self._sealed = True
        return self

    @property
    def sealed(self) -> bool:
        return self._sealed

    @property
    def total_bytes(self) -> int:
        return self._cursor

    @property
    def regions(self) -> tuple[Region, ...]:
        return tuple(self._regions.values())

    def __getitem__(self, name: str) -> Region:
        return self._regions[name]

    def __contains__(self, name: str) -> bool:
        return name in self._regions

    def describe(self) -> list[dict]:
        """The offset map, for benchmarks, snapshots' identity and debugging."""
        return [
            {"name": r.name, "offset": r.offset, "nbytes": r.nbytes, "dtype": r.dtype.str,
             "shape": list(r.shape)}
            for r in self._regions.values()
        ]
