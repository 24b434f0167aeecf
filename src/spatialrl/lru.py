"""One least-recently-used map for every cache of the project (TVR frames and uploaded scenes, V-IRL
grids, city panorama scenes, vision features).

Bounded by a total *size* — bytes where ``size`` measures a value, items where it counts 1 — and
thread-safe (env threads share caches). A value larger than the whole bound is handed back but not
kept. ``on_evict`` receives each evicted value (e.g. to release its GL buffers). ``put(...,
trim=False)`` + :meth:`trim` (``keep=``) let a caller insert a batch and then evict without dropping
what the batch itself still needs (the vision cache). :class:`MegabyteCache` is the base of the caches
bounded in megabytes (vision features, prefix KV caches).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable
from typing import Any


class LRU:
    def __init__(self, capacity: int, size: Callable[[Any], int] = lambda value: 1,
                 on_evict: Callable[[Any], None] | None = None):
        self.capacity = int(capacity)
        self._size, self._on_evict = size, on_evict
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._total = 0
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._items

    @property
    def total(self) -> int:
        """Summed size of the kept values (bytes or items, as ``size`` measures)."""
        return self._total

    def get(self, key: Hashable, default: Any = None) -> Any:
        """The value (now most recently used), or ``default``."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return default
            self._items.move_to_end(key)
            return item[0]

    def put(self, key: Hashable, value: Any, trim: bool = True) -> Any:
        """Keep ``value`` under ``key`` (a value already there wins and is returned); evict the least
        recently used beyond ``capacity`` unless ``trim`` is False."""
        n = int(self._size(value))
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            if n > self.capacity:
                return value
            self._items[key] = (value, n)
            self._total += n
            if trim:
                self.trim()
            return value

    def trim(self, keep: Iterable[Hashable] = ()) -> None:
        """Evict least-recently-used values until the total fits ``capacity``, never those in ``keep``."""
        keep = set(keep)
        with self._lock:
            for key in list(self._items):
                if self._total <= self.capacity:
                    break
                if key in keep:
                    continue
                value, n = self._items.pop(key)
                self._total -= n
                if self._on_evict is not None:
                    self._on_evict(value)

    def items(self) -> list[tuple[Hashable, Any]]:
        """A snapshot of ``(key, value)`` pairs, least recently used first (no use is recorded)."""
        with self._lock:
            return [(key, item[0]) for key, item in self._items.items()]

    def pop(self, key: Hashable, default: Any = None) -> Any:
        """Remove ``key`` (no ``on_evict``) and return its value, or ``default``."""
        with self._lock:
            item = self._items.pop(key, None)
            if item is None:
                return default
            self._total -= item[1]
            return item[0]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._total = 0


class MegabyteCache:
    """Base of the caches bounded in megabytes over one :class:`LRU` (vision features, prefix KV caches):
    the bound's check, the entry count, the bytes kept and ``clear``. ``what`` names the cache in errors."""

    what = "cache"

    def __init__(self, max_mb: float, size: Callable[[Any], int]):
        if max_mb <= 0:
            raise ValueError(f"{self.what} size must be > 0 MB (got {max_mb}); pass no cache to turn it off")
        self.max_bytes = int(max_mb * 2**20)
        self._entries = LRU(self.max_bytes, size=size)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        return self._entries.total

    def clear(self) -> None:
        self._entries.clear()
