"""Street-view pixels: equirectangular panorama → four perspective views → one 2×2 grid image.

The maths is the reference's (Equirec2Perspec, notes §1.3): pinhole camera with FOV 90° at 640×640,
pitch 0, rotated about the vertical axis by the *effective* heading
``((h - 180) % 360 + rotation) % 360`` (``rotation`` = the pano's north rotation), sampled with
``cv2.remap`` (INTER_CUBIC, BORDER_WRAP). So compass heading ``h`` sits at panorama column fraction
``(h + rotation) / 360`` (mod 1) — the convention a generated city must follow.

Grid: views at ``[h-135, h-45, h+45, h+135]`` (left-behind, left-front, right-front, right-behind) go
to top-left, top-right, bottom-left, bottom-right; each view is resized (PIL bicubic) to a square tile
and pasted on black with a gutter. At ``grid_size`` 2405 that is the reference's 1200 px tiles and 5 px
gutters; smaller grids (for small models) render their views at 2× the tile instead of 640 px
(:func:`view_size`). The prompt's "[front, right / back, left]" does not describe this layout; the
``grid_order`` fix renders ``[h, h+90, h+180, h+270]`` instead, which does.

The reference re-renders on every call (twice per correct step); :class:`GridCache` keeps rendered
grids in a byte-bounded memory LRU and optionally on disk, keyed by everything that affects pixels.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from PIL import Image

from spatialrl.envs.virl.data import VirlDataset
from spatialrl.errors import DataError
from spatialrl.io import atomic_write_bytes
from spatialrl.lru import LRU

FOV_DEG = 90.0
VIEW_SIZE = 640  # each perspective view, before resizing to a tile
PITCH_DEG = 0.0  # the reference's pitch; :func:`perspective` is specialised to it
REFERENCE_GRID = 2405  # 2 × 1200 + 5
GUTTER = 5


def effective_heading(heading: float, rotation: float) -> float:
    """The camera yaw used in the panorama's own frame."""
    return ((heading - 180.0) % 360.0 + rotation) % 360.0


def view_headings(heading: float, prompt_order: bool = False) -> list[float]:
    """Compass headings of the four views, in grid order (TL, TR, BL, BR)."""
    offsets = (0.0, 90.0, 180.0, 270.0) if prompt_order else (-135.0, -45.0, 45.0, 135.0)
    return [(heading + o) % 360.0 for o in offsets]


def grid_layout(grid_size: int) -> tuple[int, int]:
    """(tile, gutter) for a square grid of ``grid_size`` px: 2405 → (1200, 5); 448 → (221, 6)."""
    if grid_size < 2 * 8 + GUTTER:
        raise ValueError(f"grid_size must be at least {2 * 8 + GUTTER}, got {grid_size}")
    tile = (grid_size - GUTTER) // 2
    return tile, grid_size - 2 * tile


_RAYS: dict[tuple[float, int, int], np.ndarray] = {}
_LEVEL: dict[tuple[float, int, int], tuple[np.ndarray, np.ndarray]] = {}


def _camera_rays(fov_deg: float, height: int, width: int) -> np.ndarray:
    """Un-normalised camera-frame ray per pixel (x right, y down, z forward): ``[u, v, 1] @ K⁻¹ᵀ``."""
    key = (fov_deg, height, width)
    if key not in _RAYS:
        f = 0.5 * width / np.tan(0.5 * np.radians(fov_deg))
        cx, cy = (width - 1) / 2.0, (height - 1) / 2.0
        k = np.array([[f, 0, cx], [0, f, cy], [0, 0, 1]], np.float32)
        u, v = np.meshgrid(np.arange(width), np.arange(height))
        pix = np.stack([u, v, np.ones_like(u)], axis=-1)
        _RAYS[key] = pix @ np.linalg.inv(k).T
    return _RAYS[key]


def _to_maps(lon: np.ndarray, lat: np.ndarray, pano_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    h, w = pano_shape[:2]
    map_x = ((lon / (2 * np.pi) + 0.5) * (w - 1)).astype(np.float32)
    map_y = ((lat / np.pi + 0.5) * (h - 1)).astype(np.float32)
    return map_x, map_y


def perspective_reference(pano: np.ndarray, fov_deg: float, yaw_deg: float, pitch_deg: float, height: int,
                          width: int) -> np.ndarray:
    """One pinhole view of an equirectangular image, computed literally as the reference does
    (rotate the rays by ``R2 @ R1`` from Rodrigues, normalise, ``atan2``/``asin``, remap).

    ``yaw_deg`` is in the panorama's frame (0 = its centre column); use :func:`effective_heading`.
    """
    y_axis = np.array([0.0, 1.0, 0.0], np.float32)
    x_axis = np.array([1.0, 0.0, 0.0], np.float32)
    r1, _ = cv2.Rodrigues(y_axis * np.radians(yaw_deg))
    r2, _ = cv2.Rodrigues(np.dot(r1, x_axis) * np.radians(pitch_deg))
    xyz = _camera_rays(fov_deg, height, width) @ (r2 @ r1).T
    xyz = xyz / np.linalg.norm(xyz, axis=-1, keepdims=True)
    map_x, map_y = _to_maps(np.arctan2(xyz[..., 0], xyz[..., 2]), np.arcsin(xyz[..., 1]), pano.shape)
    return cv2.remap(pano, map_x, map_y, cv2.INTER_CUBIC, borderMode=cv2.BORDER_WRAP)


def perspective(pano: np.ndarray, fov_deg: float, yaw_deg: float, height: int, width: int) -> np.ndarray:
    """The same view at pitch 0 (the only pitch V-IRL uses), ~5× faster.

    A yaw-only rotation leaves each ray's latitude unchanged and adds the yaw to its longitude, so both
    are computed once per camera and the per-view work is one add, one wrap into [-π, π) and the
    remap. The sampling maps agree with :func:`perspective_reference` to ~1e-9 px (tested).
    """
    key = (fov_deg, height, width)
    if key not in _LEVEL:
        xyz = _camera_rays(fov_deg, height, width)
        xyz = xyz / np.linalg.norm(xyz, axis=-1, keepdims=True)
        _LEVEL[key] = (np.arctan2(xyz[..., 0], xyz[..., 2]), np.arcsin(xyz[..., 1]))
    lon0, lat = _LEVEL[key]
    lon = np.remainder(lon0 + np.radians(yaw_deg) + np.pi, 2 * np.pi) - np.pi
    map_x, map_y = _to_maps(lon, lat, pano.shape)
    return cv2.remap(pano, map_x, map_y, cv2.INTER_CUBIC, borderMode=cv2.BORDER_WRAP)


def compose_grid(views_rgb: list[np.ndarray], grid_size: int) -> np.ndarray:
    """Resize four RGB views to tiles (PIL bicubic) and paste them TL, TR, BL, BR on black."""
    tile, gap = grid_layout(grid_size)
    canvas = np.zeros((grid_size, grid_size, 3), np.uint8)
    for i, view in enumerate(views_rgb):
        img = Image.fromarray(view)
        if img.size != (tile, tile):
            img = img.resize((tile, tile), Image.Resampling.BICUBIC)
        x, y = (i % 2) * (tile + gap), (i // 2) * (tile + gap)
        canvas[y : y + tile, x : x + tile] = np.asarray(img)
    return canvas


def read_panorama(path: Path) -> np.ndarray:
    """Decode a panorama JPEG (BGR, as cv2 reads it); DataError names the file if it is missing/bad."""
    if not path.is_file():
        raise DataError(f"{path}: missing panorama image")
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None or img.ndim != 3 or img.shape[0] < 2 or img.shape[1] < 2:
        raise DataError(f"{path}: cannot be decoded as an image")
    return img


def view_size(grid_size: int) -> int:
    """Pixels of each perspective view before it is resized to a tile.

    640 (the reference) whenever the tile is at least 320 px, so 2405² grids are the reference's
    pixels. Smaller grids render each view at twice the tile size and downsample (anti-aliased): the
    same picture as shrinking a 640 view, up to ~100× cheaper for thumbnail-sized grids.
    """
    tile, _ = grid_layout(grid_size)
    return min(VIEW_SIZE, 2 * tile)


def render_grid(pano_bgr: np.ndarray, heading: float, rotation: float, grid_size: int = REFERENCE_GRID,
                prompt_order: bool = False) -> np.ndarray:
    """The 2×2 grid (uint8 RGB, ``grid_size``²) seen at compass ``heading`` from one panorama."""
    views = []
    px = view_size(grid_size)
    for h in view_headings(heading, prompt_order):
        bgr = perspective(pano_bgr, FOV_DEG, effective_heading(h, rotation), px, px)
        views.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
    return compose_grid(views, grid_size)


class GridCache:
    """Rendered grids: a memory LRU bounded in bytes, plus an optional folder of ``.npy`` files.

    Cached arrays are returned read-only (no copy per step); a caller that wants to draw on one copies.
    Thread-safe, so env slots in one process can share it.
    """

    def __init__(self, max_bytes: int = 1 << 30, disk_dir: str | Path | None = None):
        self.max_bytes = int(max_bytes)
        self.disk_dir = Path(disk_dir) if disk_dir else None
        self._items = LRU(self.max_bytes, size=lambda arr: arr.nbytes)
        self.hits = self.disk_hits = self.misses = 0

    @staticmethod
    def digest(key: tuple[Any, ...]) -> str:
        return hashlib.sha1(repr(key).encode()).hexdigest()

    def get(self, key: tuple[Any, ...]) -> np.ndarray | None:
        k = self.digest(key)
        arr = self._items.get(k)
        if arr is not None:
            self.hits += 1
            return arr
        if self.disk_dir is not None:
            path = self.disk_dir / f"{k}.npy"
            if path.is_file():
                try:
                    arr = np.load(path, allow_pickle=False)
                except (ValueError, OSError):
                    arr = None  # a torn file: re-render and overwrite
                if arr is not None:
                    self.disk_hits += 1
                    self._remember(k, arr)
                    return self._items.get(k, arr)
        self.misses += 1
        return None

    def put(self, key: tuple[Any, ...], arr: np.ndarray) -> np.ndarray:
        k = self.digest(key)
        if self.disk_dir is not None:
            buf = io.BytesIO()
            np.save(buf, arr, allow_pickle=False)
            atomic_write_bytes(self.disk_dir / f"{k}.npy", buf.getvalue())
        return self._remember(k, arr)

    def _remember(self, k: str, arr: np.ndarray) -> np.ndarray:
        arr.flags.writeable = False
        return self._items.put(k, arr)

    def clear(self) -> None:
        self._items.clear()


_SHARED: dict[tuple[int, str | None], GridCache] = {}


def shared_cache(max_mb: float = 1024, disk_dir: str | Path | None = None) -> GridCache:
    """One cache per (size, folder) per process, so the runner's env slots share rendered grids."""
    key = (int(max_mb * (1 << 20)), str(disk_dir) if disk_dir else None)
    if key not in _SHARED:
        _SHARED[key] = GridCache(key[0], disk_dir)
    return _SHARED[key]


class GridRenderer:
    """Renders (and caches) the grid seen from a dataset's pano at a heading."""

    def __init__(self, dataset: VirlDataset, grid_size: int = REFERENCE_GRID, prompt_order: bool = False,
                 cache: GridCache | None = None):
        grid_layout(grid_size)  # validate
        self.dataset = dataset
        self.grid_size = grid_size
        self.prompt_order = prompt_order
        self.cache = cache

    def key(self, pano_id: str, heading: float) -> tuple[Any, ...]:
        path = self.dataset.image_path(pano_id)
        st = path.stat() if path.exists() else None
        return (
            "virl-grid-v1", str(path.resolve()), st.st_size if st else None, st.st_mtime_ns if st else None,
            self.dataset.rotation(pano_id), float(heading), self.grid_size, self.prompt_order, FOV_DEG,
            view_size(self.grid_size),
        )

    def render(self, pano_id: str, heading: float) -> np.ndarray:
        key = self.key(pano_id, heading) if self.cache is not None else None
        if key is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return hit
        grid = render_grid(
            read_panorama(self.dataset.image_path(pano_id)), heading, self.dataset.rotation(pano_id),
            self.grid_size, self.prompt_order,
        )
        if key is not None:
            return self.cache.put(key, grid)
        return grid
