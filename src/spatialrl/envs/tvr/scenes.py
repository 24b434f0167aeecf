"""Scenes for TVR: houses rebuilt from scene ids, their lattices, and a per-process render service.

Poses are discrete, so a frame is a pure function of (scene, pose, image size, badge): the service keeps
an in-memory LRU of finished frames (badge burned in, read-only arrays shared with the caller) and an LRU
of uploaded scenes (GPU buffers are freed on eviction). One service — one ``Renderer``, one GL context —
exists per process and image size, shared by every env instance (the eval runner keeps several).

The "CURRENT"/"TARGET" badge copies TVRBench's ``burn_label``: a dark (60, 60, 60) box in the top-right
corner with the label in white, font 32 px at width 1280 and 16 px at 640 (``max(12, even(32·W/1280))``).
We draw with Pillow's bundled font (``ImageFont.load_default(size)``) so no system font is needed, and
below 480 px width the 12 px floor is dropped (the tiny images of tests and the built-in model would
otherwise be covered by the badge). The box is opaque, so its pixels do not depend on the frame: it is
drawn once per (label, width) and pasted.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from spatialrl.envs.tvr.lattice import GRID, Lattice, Pose
from spatialrl.envs.tvr.tasks import SceneRef
from spatialrl.lru import LRU

BADGE_BG = (60, 60, 60)
FOV_DEG = 60.0  # TVRBench's fieldOfView
SEG_SIZE = (320, 180)  # resolution of the instance-id render that counts visible objects (seg_count)
SEG_MIN_PIXELS = 20  # an object counts as visible when it covers at least this many pixels at SEG_SIZE


# ---------------------------------------------------------------------------------------------- houses
@lru_cache(maxsize=16)
def load_house(scene_id: str) -> Any:
    """The house a scene id names, rebuilt deterministically from its seed (cached per process)."""
    from spatialrl.worlds.houses import generate_house

    ref = SceneRef.parse(scene_id)
    return generate_house(ref.seed, ref.kind, ref.room_type)


def house_fingerprint(house: Any) -> str:
    """A short hash of what a bench depends on in a house (walkable cells, eye height, objects, mesh size).

    Stored per scene in ``scenes.json``; the env refuses a bench whose houses no longer match (the house
    generator changed since the bench was made), instead of silently running tasks on other rooms."""
    payload = {
        "reachable": sorted(map(list, house.reachable)),
        "eye_height": float(house.eye_height),
        "objects": [[o.instance_id, o.category] for o in house.objects],
        "n_triangles": int(sum(m.n_triangles for m in house.meshes)),
    }
    return hashlib.sha1(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:16]


@lru_cache(maxsize=256)
def scene_fingerprint(scene_id: str) -> str:
    return house_fingerprint(load_house(scene_id))


@lru_cache(maxsize=64)
def scene_lattice(scene_id: str, mode: str = "navigation") -> Lattice:
    """The scene's reachable cells with the move rules of ``mode`` (cached; the transition table
    inside is what the oracle reuses across tasks of a scene)."""
    return Lattice(load_house(scene_id).reachable, mode=mode)


def camera_for(house: Any, pose: Pose, fov: float = FOV_DEG) -> Any:
    from spatialrl.render import Camera

    return Camera((pose.ix * GRID, float(house.eye_height), pose.iz * GRID), yaw_deg=float(pose.yaw),
                  pitch_deg=float(pose.pitch), fov_deg=fov)


# ---------------------------------------------------------------------------------------------- badges
def badge_font_size(width: int) -> int:
    scale = width / 1280
    size = round(32 * scale / 2) * 2
    return max(12, size) if width >= 480 else max(4, size)


@lru_cache(maxsize=32)
def badge_patch(label: str, width: int) -> tuple[np.ndarray, int, int]:
    """``(patch, x0, y0)``: the opaque badge box for ``label`` on a ``width``-pixel-wide image."""
    from PIL import Image, ImageDraw, ImageFont

    scale = width / 1280
    font = ImageFont.load_default(size=badge_font_size(width))
    pad = max(4, int(8 * scale)) if width >= 480 else max(1, int(8 * scale))
    inner = max(5, int(10 * scale)) if width >= 480 else max(1, int(10 * scale))
    left, top, right, bottom = ImageDraw.Draw(Image.new("RGB", (1, 1))).textbbox((0, 0), label, font=font)
    tw, th = right - left, bottom - top
    x1, y1 = width - tw - 2 * inner - pad, pad
    x2, y2 = width - pad, pad + th + 2 * inner
    box = Image.new("RGB", (x2 - x1 + 1, y2 - y1 + 1), BADGE_BG)
    ImageDraw.Draw(box).text(((x2 - x1) // 2, (y2 - y1) // 2), label, fill=(255, 255, 255), font=font, anchor="mm")
    patch = np.asarray(box, dtype=np.uint8)
    patch.setflags(write=False)
    return patch, max(0, x1), y1


def burn_badge(frame: np.ndarray, label: str) -> np.ndarray:
    """A copy of ``frame`` with the ``label`` badge in its top-right corner (cropped to the frame)."""
    return paste_badge(np.array(frame, dtype=np.uint8, copy=True), label)


def paste_badge(out: np.ndarray, label: str) -> np.ndarray:
    """Draw the ``label`` badge into ``out`` (H, W, 3) in place; returns ``out``."""
    patch, x0, y0 = badge_patch(label, out.shape[1])
    ph = min(patch.shape[0], out.shape[0] - y0)
    pw = min(patch.shape[1], out.shape[1] - x0)
    if ph > 0 and pw > 0:
        out[y0:y0 + ph, x0:x0 + pw] = patch[:ph, patch.shape[1] - pw:]
    return out


# ---------------------------------------------------------------------------------------------- rendering
@dataclass
class _Uploaded:
    house: Any
    scene: Any


@dataclass
class _Backend:
    """One Renderer (GL context) per process and image size, plus an LRU of uploaded scenes."""

    width: int
    height: int
    max_scenes: int = 16
    _renderer: Any = None
    _scenes: LRU | None = None

    @property
    def renderer(self) -> Any:
        if self._renderer is None:
            from spatialrl.render import Renderer

            self._renderer = Renderer(self.width, self.height)
        return self._renderer

    def scene(self, scene_id: str) -> _Uploaded:
        if self._scenes is None:
            self._scenes = LRU(self.max_scenes, on_evict=lambda old: self.renderer.release(old.scene))
        self._scenes.capacity = self.max_scenes  # a batch may have raised it (render_into)
        uploaded = self._scenes.get(scene_id)
        if uploaded is None:
            house = load_house(scene_id)
            uploaded = self._scenes.put(scene_id, _Uploaded(house, self.renderer.upload(house.meshes, house.textures)))
        return uploaded


_BACKENDS: dict[tuple[int, int], _Backend] = {}


def _backend(width: int, height: int) -> _Backend:
    if (width, height) not in _BACKENDS:
        _BACKENDS[(width, height)] = _Backend(width, height)
    return _BACKENDS[(width, height)]


@dataclass
class RenderService:
    """TVR frames of one image size: the shared backend plus a frame LRU of ``cache_frames`` entries
    (0 = cache off: every frame is rendered)."""

    width: int
    height: int
    cache_frames: int = 0
    fov: float = FOV_DEG
    hits: int = 0
    misses: int = 0
    _frames: LRU | None = None

    def __post_init__(self) -> None:
        self._frames = LRU(self.cache_frames)  # capacity 0 keeps nothing: cache off

    @property
    def backend(self) -> _Backend:
        return _backend(self.width, self.height)

    def render_raw(self, scene_id: str, poses: list[Pose]) -> np.ndarray:
        """Colour frames (N, H, W, 3) of ``poses``, uncached and without badges (one batched call)."""
        up = self.backend.scene(scene_id)
        return self.backend.renderer.render(up.scene, [camera_for(up.house, p, self.fov) for p in poses])

    def frame(self, scene_id: str, pose: Pose, label: str | None) -> np.ndarray:
        """The (read-only) frame at ``pose`` with badge ``label`` (None = no badge), cached."""
        key = (scene_id, pose, label)
        cached = self._frames.get(key)
        if cached is not None:
            self.hits += 1
            return cached
        self.misses += 1
        img = self.render_raw(scene_id, [pose])[0]
        img = burn_badge(img, label) if label else np.ascontiguousarray(img)
        img.setflags(write=False)
        return self._frames.put(key, img)

    def render_into(self, requests: list[tuple[str, Pose, str | None, np.ndarray]], readback: str | None = None) -> None:
        """Write the frame of each ``(scene_id, pose, label, dest)`` into ``dest`` (H, W, 3), as ``frame``
        would return it (same pixels, same cache), rendering every cache miss in one batch over all
        their scenes (``Renderer.render_batch``, with its ``readback``): the batch path of ``TVRVectorEnv``."""
        misses = []
        for scene_id, pose, label, dest in requests:
            cached = self._frames.get((scene_id, pose, label))
            if cached is not None:
                self.hits += 1
                dest[...] = cached
            else:
                misses.append((scene_id, pose, label, dest))
        if not misses:
            return
        self.misses += len(misses)
        backend = self.backend
        # Every scene of the batch stays uploaded until it is drawn; same-scene cameras sit together.
        backend.max_scenes = max(backend.max_scenes, len({m[0] for m in misses}))
        misses.sort(key=lambda m: m[0])
        items = []
        for scene_id, pose, _, _ in misses:
            up = backend.scene(scene_id)
            items.append((up.scene, camera_for(up.house, pose, self.fov)))
        backend.renderer.render_batch(items, [m[3] for m in misses], readback=readback)
        for scene_id, pose, label, dest in misses:
            if label:
                paste_badge(dest, label)
            if self.cache_frames > 0:
                img = dest.copy()
                img.setflags(write=False)
                self._frames.put((scene_id, pose, label), img)

    def clear(self) -> None:
        self._frames.clear()
        self.hits = self.misses = 0


_SERVICES: dict[tuple[int, int, int], RenderService] = {}


def render_service(width: int, height: int, cache_mb: float = 512.0) -> RenderService:
    """The process-wide service for this image size and frame-cache budget (MiB; 0 = off)."""
    frame_bytes = width * height * 3
    cache_frames = int(cache_mb * 2**20 // frame_bytes) if cache_mb > 0 else 0
    key = (width, height, cache_frames)
    if key not in _SERVICES:
        _SERVICES[key] = RenderService(width, height, cache_frames=cache_frames)
    return _SERVICES[key]
