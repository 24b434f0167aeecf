"""Offscreen batch renderer: a whole scene in one vertex buffer, many cameras per call.

Why it is shaped like this (llvmpipe on 2 CPU cores is the slow case we design for):
- one vertex/index buffer per scene and one draw call per camera: draw-call overhead, not triangles,
  dominates small scenes;
- objects are stored before structure (walls, floor) so furniture fills the depth buffer first and
  the large wall/floor polygons behind it are rejected by the early depth test;
- all textures live in one texture array (a layer per texture), so switching textures costs nothing;
- a batch of cameras is drawn into the layers of one texture array (a full-size surface per camera, so
  a frame does not depend on its slot in the batch) and read back in one call per chunk, so the GL
  pipeline is waited on once per chunk, not once per camera (``render/layers.py``); with
  ``readback="pbo"`` not even that: a chunk's pixels travel while the next chunk is drawn;
- instance ids come from a second, untextured pass that writes the id as 24-bit colour.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import moderngl
import numpy as np

from spatialrl.render import equirect as _equirect
from spatialrl.render import shaders
from spatialrl.render.camera import Camera
from spatialrl.render.context import create_egl_context
from spatialrl.render.layers import LayerTarget, PendingRead, check_readback, resolve_readback
from spatialrl.render.mesh import Mesh

MAX_BATCH_PIXELS = 1 << 23  # frames drawn per readback (36 of 640x360): bounds the layer target's memory
# Flipping clip-space y renders images upside down in GL terms, i.e. top row first in memory.
_FLIP_Y = np.diag([1.0, -1.0, 1.0, 1.0])
# The GL context current on each thread. moderngl issues calls to whatever context is current, so a
# Renderer makes its own context current before working when another one was used last.
_current = threading.local()


@dataclass(frozen=True)
class Lighting:
    """Brightness of faces by orientation ("ambient cube") plus an optional directional key light.

    ``cube`` = brightness of faces whose normal is (+x, -x, +y, -y, +z, -z); oblique faces blend
    by the squared normal. The default makes floors brightest, ceilings a little darker and any
    two walls meeting at a corner differ by at least 0.08, so geometry reads without shadows.
    ``key_dir`` points *towards* the light (world space, y up); ``key`` is its intensity."""

    cube: tuple[float, float, float, float, float, float] = (0.86, 0.62, 0.95, 0.8, 0.74, 0.7)
    key_dir: tuple[float, float, float] = (0.4, 0.8, 0.45)
    key: float = 0.0

    def __post_init__(self) -> None:
        if len(self.cube) != 6 or not all(0.0 <= float(v) <= 4.0 for v in self.cube):
            raise ValueError(f"Lighting.cube must be 6 brightness values in 0..4, got {self.cube!r}")
        if not 0.0 <= float(self.key) <= 4.0:
            raise ValueError(f"Lighting.key must be in 0..4, got {self.key!r}")
        _unit(self.key_dir)


@dataclass(frozen=True)
class Sky:
    """Background: a vertical gradient zenith → horizon → ground (RGB 0..1). Equal colours = flat."""

    zenith: tuple[float, float, float]
    horizon: tuple[float, float, float]
    ground: tuple[float, float, float]

    @property
    def flat(self) -> bool:
        return self.zenith == self.horizon == self.ground


def parse_sky(sky: object) -> Sky:
    """``None`` → black; one RGB triple → flat colour; 2 or 3 triples → (zenith, horizon[, ground])."""
    if sky is None:
        return Sky((0.0, 0.0, 0.0), (0.0, 0.0, 0.0), (0.0, 0.0, 0.0))
    if isinstance(sky, Sky):
        return sky
    arr = np.asarray(sky, dtype=np.float64)
    if arr.shape == (3,):
        arr = arr[None]
    if arr.ndim != 2 or arr.shape[1] != 3 or not 1 <= len(arr) <= 3:
        raise ValueError(f"sky must be None, an RGB triple or 2-3 RGB triples (zenith, horizon[, ground]); got shape {arr.shape}")
    if not np.isfinite(arr).all() or arr.min() < 0.0 or arr.max() > 1.0:
        raise ValueError("sky colours must be RGB floats in 0..1")
    rows = [tuple(float(v) for v in row) for row in arr]
    if len(rows) == 1:
        rows = rows * 3
    elif len(rows) == 2:
        rows.append(rows[1])
    return Sky(*rows)


class Scene:
    """GPU-side geometry and textures of one uploaded scene; make with ``Renderer.upload``."""

    def __init__(self, owner: Renderer, vbo, ibo, vao_shaded, vao_ids, textures, n_indices: int,
                 zones: list[ZoneRange], n_triangles: int, n_textures: int, sky: Sky, lighting: Lighting,
                 bounds: np.ndarray):
        self._owner = owner
        self._vbo, self._ibo, self._textures = vbo, ibo, textures
        self.vao_shaded, self.vao_ids = vao_shaded, vao_ids
        self.n_indices = n_indices
        self.zones = zones
        self.n_triangles = n_triangles
        self.n_textures = n_textures
        self.sky = sky
        self.lighting = lighting
        self.bounds = bounds  # (2, 3) min/max corner of all geometry
        self.released = False

    @property
    def nbytes(self) -> int:
        """Bytes of GL memory the scene holds: vertex and index buffers, and its texture array with mipmaps
        (each level a quarter of the one above: 4/3 of the base level)."""
        tex = self._textures
        w, h, layers = tex.size
        return self._vbo.size + self._ibo.size + (w * h * layers * tex.components * 4) // 3

    def release(self) -> None:
        """Free the GPU buffers (safe to call twice; ``Renderer.close`` releases every scene)."""
        if self.released:
            return
        self._owner._check_open()  # its context must be current
        for obj in (self.vao_shaded, self.vao_ids, self._vbo, self._ibo, self._textures):
            obj.release()
        self.released = True


class Renderer:
    """Headless renderer for a fixed frame size; see ``docs/rendering.md``.

    ``device`` picks the EGL device (default: env ``SPATIALRL_EGL_DEVICE`` or device 0).
    ``samples`` > 0 turns on multisampling for colour frames (off by default: it costs speed and
    makes frames depend on the driver's MSAA pattern). ``cull`` drops back faces (meshes must be
    closed and wound outward, as every builder in ``spatialrl.render.primitives`` makes them).
    A Renderer is not thread-safe: use one per thread (several per process are fine).
    ``smooth_textures`` samples textures trilinearly from mipmaps; the default is plain bilinear
    sampling, ~15-30% cheaper per frame on llvmpipe (choosing a mip level per pixel is what costs)
    at the price of some shimmer on distant floors.
    ``readback`` is how chunks of frames come back to the host: ``"sync"`` waits for each chunk;
    ``"pbo"`` reads each chunk into a GL pixel buffer and picks it up after issuing the next chunk's
    draws, so the wait overlaps drawing (same pixels; see ``render/layers.py``); ``"pbo_rgb"``: the same
    with the GL packing RGB, so the host copies instead of converting; ``"auto"`` (default) is
    ``"pbo_rgb"`` on a GPU and ``"sync"`` on a software rasteriser (``resolve_readback``).
    """

    def __init__(self, width: int, height: int, *, device: int | None = None, samples: int = 0,
                 cull: bool = True, smooth_textures: bool = False, readback: str = "auto"):
        self.width = _check_size(width, "width")
        self.height = _check_size(height, "height")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise ValueError(f"samples must be an int >= 0, got {samples!r}")
        self.samples = samples
        self.cull = bool(cull)
        self.smooth_textures = bool(smooth_textures)
        check_readback(readback)
        self._targets: dict[tuple, LayerTarget] = {}
        self._scenes: list[Scene] = []
        self.ctx = create_egl_context(device)
        _current.ctx = self.ctx  # creating a context makes it current
        self.closed = False
        self.device_name = f"{self.ctx.info['GL_RENDERER']} / {self.ctx.info['GL_VERSION']}"
        self.readback = resolve_readback(readback, self.ctx.info["GL_RENDERER"])  # "sync" or "pbo_rgb"
        self._max_size = int(self.ctx.info["GL_MAX_TEXTURE_SIZE"])
        self._max_layers = int(self.ctx.info["GL_MAX_ARRAY_TEXTURE_LAYERS"])
        if self.width > self._max_size or self.height > self._max_size:
            size = (self.width, self.height)
            self.close()
            raise ValueError(f"frame size {size} exceeds this device's limit {self._max_size}")
        # camera.py's left-handed world flips on-screen winding once and _FLIP_Y flips it back, so
        # outward (counter-clockwise) faces stay counter-clockwise on screen.
        self.ctx.front_face = "ccw"
        self._shaded = self.ctx.program(vertex_shader=shaders.SHADED_VS, fragment_shader=shaders.SHADED_FS)
        self._ids = self.ctx.program(vertex_shader=shaders.ID_VS, fragment_shader=shaders.ID_FS)
        self._sky = self.ctx.program(vertex_shader=shaders.SKY_VS, fragment_shader=shaders.SKY_FS)
        self._sky_vao = self.ctx.vertex_array(self._sky, [])

    # ------------------------------------------------------------------ scenes
    def upload(self, meshes: Sequence[Mesh], textures: Sequence[np.ndarray] = (), sky: object = None,
               lighting: Lighting | None = None) -> Scene:
        """Merge ``meshes`` into one GPU buffer and ``textures`` (HxWx3 uint8) into one texture array.

        Textures of different sizes are resized to the largest width/height among them (they are
        sampled with repeat wrapping and mipmaps, so tileable patterns stay tileable).
        """
        self._check_open()
        meshes = list(meshes)
        if not meshes:
            raise ValueError("upload() needs at least one Mesh")
        for i, m in enumerate(meshes):
            if not isinstance(m, Mesh):
                raise TypeError(f"meshes[{i}] is {type(m).__name__}, expected spatialrl.render.Mesh")
            if m.texture >= len(textures):
                raise ValueError(f"meshes[{i}].texture={m.texture} but only {len(textures)} textures were given")
        sky_cfg = parse_sky(sky)
        lighting = lighting or Lighting()
        vertices, indices, zones = _pack(meshes)
        bounds = np.stack([vertices[:, :3].min(0), vertices[:, :3].max(0)])
        tex = self._texture_array(textures)
        vbo = self.ctx.buffer(vertices.tobytes())
        ibo = self.ctx.buffer(indices.tobytes())
        vao_shaded = self.ctx.vertex_array(self._shaded, [_layout(vbo, self._shaded)], index_buffer=ibo,
                                           index_element_size=4)
        vao_ids = self.ctx.vertex_array(self._ids, [_layout(vbo, self._ids)], index_buffer=ibo, index_element_size=4)
        scene = Scene(self, vbo, ibo, vao_shaded, vao_ids, tex, len(indices), zones,
                      sum(m.n_triangles for m in meshes), len(textures), sky_cfg, lighting, bounds)
        self._scenes.append(scene)
        return scene

    def gpu_bytes(self) -> dict[str, int]:
        """GL memory this renderer allocated, by kind: ``targets`` (render targets and pack buffers, reused
        for every chunk of frames: they grow with the chunk, not with the number of views), ``scenes``
        (geometry and textures of the uploaded scenes) and ``scene_count``. Counted from the objects'
        sizes, not asked of the driver (which adds its own overheads)."""
        return {"targets": sum(t.nbytes for t in self._targets.values()),
                "scenes": sum(sc.nbytes for sc in self._scenes), "scene_count": len(self._scenes)}

    def release(self, scene: Scene) -> None:
        """Free a scene's GPU memory (safe to call twice)."""
        scene.release()
        if scene in self._scenes:
            self._scenes.remove(scene)

    def _texture_array(self, textures: Sequence[np.ndarray]):
        if len(textures) > self._max_layers:
            raise ValueError(f"{len(textures)} textures exceed this device's {self._max_layers} array layers")
        imgs = []
        for i, t in enumerate(textures):
            a = np.asarray(t)
            if a.ndim != 3 or a.shape[2] != 3 or a.dtype != np.uint8 or min(a.shape[:2]) < 1:
                raise ValueError(f"textures[{i}] must be an HxWx3 uint8 array, got {a.dtype} {a.shape}")
            imgs.append(a)
        if not imgs:
            imgs = [np.full((1, 1, 3), 255, np.uint8)]
        h = min(max(a.shape[0] for a in imgs), self._max_size)
        w = min(max(a.shape[1] for a in imgs), self._max_size)
        stack = np.stack([a if a.shape[:2] == (h, w) else cv2.resize(a, (w, h), interpolation=cv2.INTER_LINEAR)
                          for a in imgs])
        # GL's first row is the bottom of the image: flip so uv (0,0) is the image's bottom-left.
        tex = self.ctx.texture_array((w, h, len(imgs)), 3, np.ascontiguousarray(stack[:, ::-1]).tobytes(),
                                     alignment=1)
        tex.build_mipmaps()
        tex.filter = (moderngl.LINEAR_MIPMAP_LINEAR if self.smooth_textures else moderngl.LINEAR, moderngl.LINEAR)
        tex.repeat_x = tex.repeat_y = True
        return tex

    # ------------------------------------------------------------------ rendering
    def render(self, scene: Scene, cameras: Sequence[Camera]) -> np.ndarray:
        """Colour frames, (N, H, W, 3) uint8, row 0 at the top."""
        return self._render(scene, cameras, self.width, self.height, ids=False)

    def render_ids(self, scene: Scene, cameras: Sequence[Camera]) -> np.ndarray:
        """Instance-id frames, (N, H, W) int32; 0 = structure or background."""
        return self._render(scene, cameras, self.width, self.height, ids=True)

    def render_batch(self, items: Sequence[tuple[Scene, Camera]], out: np.ndarray | Sequence[np.ndarray] | None = None,
                     readback: str | None = None) -> np.ndarray | Sequence[np.ndarray]:
        """Colour frames of ``(scene, camera)`` pairs over *many* scenes, in as few passes as possible.

        Every frame of a chunk (up to ``MAX_BATCH_PIXELS``: 36 frames at 640x360, 178 at 280x168) is
        drawn into its own layer of one texture array, whatever its scene, and the chunk is read back in
        one call: scenes stay resident (uploaded once), so switching scene between cameras costs a
        texture bind. A frame is bit-identical to ``render(scene, [camera])`` (same surface size, same
        state, same draw order).
        ``out``: an (N, H, W, 3) uint8 array or N such (H, W, 3) C-contiguous views to write into
        (e.g. slots of an observation buffer); returned. Default: a new (N, H, W, 3) array.
        ``readback``: ``"sync"``, ``"pbo"``, ``"pbo_rgb"`` or ``"auto"`` for this call (default: the
        renderer's ``readback``)."""
        self._check_open()
        readback = self.readback if readback is None else resolve_readback(check_readback(readback),
                                                                           self.ctx.info["GL_RENDERER"])
        items = list(items)
        for i, item in enumerate(items):
            if not (isinstance(item, tuple) and len(item) == 2):
                raise TypeError(f"items[{i}] must be a (Scene, Camera) pair, got {type(item).__name__}")
            self._check_scene(item[0])
        scenes = [sc for sc, _ in items]
        cameras = self._check_cameras([cam for _, cam in items])
        w, h = self.width, self.height
        if out is None:
            out = np.empty((len(items), h, w, 3), np.uint8)
        if len(out) != len(items):
            raise ValueError(f"out holds {len(out)} frames for {len(items)} items")
        for i, dest in enumerate(out):
            if dest.shape != (h, w, 3) or dest.dtype != np.uint8 or not dest.flags.c_contiguous:
                raise ValueError(f"out[{i}] must be a C-contiguous ({h}, {w}, 3) uint8 array, got "
                                 f"{dest.dtype} {dest.shape}")
        self._render_chunks(scenes, cameras, w, h, False, out, readback)
        return out

    def render_equirect(self, scene: Scene, position: Sequence[float], width: int = 1024, height: int = 512,
                        north_deg: float = 0.0) -> np.ndarray:
        """A full 360°x180° equirectangular panorama (H, W, 3) uint8 seen from ``position``.

        Column convention: the centre column (x = W/2) looks along yaw ``north_deg``; yaw grows to
        the right (x = 0 is ``north_deg - 180``, wrapping). Row 0 looks straight up, the middle row
        at the horizon, the last row straight down. Column x covers yaw
        ``north_deg - 180 + 360 * (x + 0.5) / W``. Made from 6 cube faces and ``cv2.remap``.
        """
        w, h = _check_size(width, "width"), _check_size(height, "height")
        face = max(8, math.ceil(w / 4))
        if face > self._max_size:
            raise ValueError(f"panorama width {w} needs cube faces of {face} px, over the device limit")
        cams = _equirect.cube_cameras(position)
        faces = self._render(scene, cams, face, face, ids=False)
        map_x, map_y = _equirect.remap_tables(w, h, face, float(north_deg))
        strip = faces.reshape(6 * face, face, 3)  # faces stacked top to bottom, no copy
        return cv2.remap(strip, map_x, map_y, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)

    def _check_scene(self, scene: object) -> None:
        if not isinstance(scene, Scene) or scene._owner is not self:
            raise ValueError("scene was not uploaded by this Renderer")
        if scene.released:
            raise ValueError("scene has been released")

    @staticmethod
    def _check_cameras(cameras: Sequence[Camera]) -> list[Camera]:
        cameras = list(cameras)
        for i, c in enumerate(cameras):
            if not isinstance(c, Camera):
                raise TypeError(f"cameras[{i}] is {type(c).__name__}, expected spatialrl.render.Camera")
        return cameras

    def _render(self, scene: Scene, cameras: Sequence[Camera], w: int, h: int, ids: bool) -> np.ndarray:
        self._check_open()
        self._check_scene(scene)
        cameras = self._check_cameras(cameras)
        n = len(cameras)
        out = np.empty((n, h, w), np.int32) if ids else np.empty((n, h, w, 3), np.uint8)
        self._render_chunks([scene] * n, cameras, w, h, ids, out, self.readback)
        return out

    def _target(self, w: int, h: int, n: int, multisample: bool) -> LayerTarget:
        """A :class:`LayerTarget` of at least ``n`` frames of w x h, kept per size.

        One surface per camera of a batch (not tiles of one big framebuffer): a frame then does not
        depend on its position in the batch, so batched and single renders are bit-identical. The
        surfaces are the layers of one texture array, read back in one call per chunk. Layer counts grow
        in powers of two up to a chunk (``MAX_BATCH_PIXELS``)."""
        key = (w, h, multisample)
        target = self._targets.get(key)
        if target is None or target.layers < n:
            if target is not None:
                target.release()
            layers = min(max(1, MAX_BATCH_PIXELS // (w * h)), 1 << (n - 1).bit_length())
            target = self._targets[key] = LayerTarget(self.ctx, w, h, max(n, layers),
                                                      self.samples if multisample else 0)
        if len(self._targets) > 3:  # frame size, cube faces and one more: drop the oldest size
            old = next(k for k in self._targets if k != key)
            self._targets.pop(old).release()
        return target

    def _render_chunks(self, scenes: list[Scene], cameras: list[Camera], w: int, h: int, ids: bool,
                       out: np.ndarray | Sequence[np.ndarray], readback: str) -> None:
        """Frame i of ``(scenes[i], cameras[i])`` into ``out[i]``, drawn and read back a chunk
        (``MAX_BATCH_PIXELS``) at a time.

        ``"sync"``: each chunk is read back (waiting for its draws) and converted before the next is drawn.
        ``"pbo"``: chunk k's readback is only queued; chunk k+1 is drawn and queued too, and only then is
        chunk k mapped and converted, so the GPU renders and copies while the CPU issues draws. Its
        layers are drawn over by chunk k+1 meanwhile, which is safe: GL runs the copy before those draws."""
        per_chunk = max(1, MAX_BATCH_PIXELS // (w * h))
        pending: tuple[PendingRead, np.ndarray | Sequence[np.ndarray]] | None = None
        for start in range(0, len(cameras), per_chunk):
            stop = start + per_chunk
            target = self._draw_chunk(scenes[start:stop], cameras[start:stop], w, h, ids)
            n = len(cameras[start:stop])
            if readback == "sync":
                rgba = target.scratch()
                target.read(n, rgba)
                _write_frames(rgba[:n], out[start:stop], ids)
                continue
            queued = (target.read_async(n, 3 if readback == "pbo_rgb" and not ids else 4), out[start:stop])
            if pending is not None:
                _write_mapped(*pending, ids)
            pending = queued
        if pending is not None:
            _write_mapped(*pending, ids)

    def _draw_chunk(self, scenes: list[Scene], cameras: list[Camera], w: int, h: int, ids: bool) -> LayerTarget:
        """Draw camera i of scene i into layer i of the size's target (returned, not read back).

        The projection is flipped vertically, so OpenGL's bottom-up rows come out top-down and a
        frame reads straight into (H, W, 4) memory."""
        n = len(cameras)
        multisample = self.samples > 0 and not ids
        target = self._target(w, h, n, multisample)
        ctx = self.ctx
        ctx.enable(moderngl.DEPTH_TEST)
        ctx.depth_func = "<"
        if self.cull:
            ctx.enable(moderngl.CULL_FACE)
        else:
            ctx.disable(moderngl.CULL_FACE)
        aspect = w / h
        prog = self._ids if ids else self._shaded
        mvp = prog["mvp"]
        bound = None
        for i, (scene, cam) in enumerate(zip(scenes, cameras, strict=True)):
            if scene is not bound:  # consecutive cameras of one scene share its bindings
                bound = scene
                sky = scene.sky
                bg = (0.0, 0.0, 0.0) if ids else sky.horizon
                vao = scene.vao_ids if ids else scene.vao_shaded
                if not ids:
                    scene._textures.use(0)
                    light = scene.lighting
                    prog["textures"].value = 0
                    px, nx, py, ny, pz, nz = (float(v) for v in light.cube)
                    prog["cube_pos"].value = (px, py, pz)
                    prog["cube_neg"].value = (nx, ny, nz)
                    prog["key_dir"].value = tuple(_unit(light.key_dir))
                    prog["key"].value = float(light.key)
            target.begin(i, bg)
            mvp.write((_FLIP_Y @ cam.view_projection(aspect)).T.astype("f4").tobytes())
            for zr in _draw_order(scene.zones, cam):
                vao.render(moderngl.TRIANGLES, vertices=zr.count, first=zr.first)
            if not ids and not sky.flat:
                self._draw_sky(cam, aspect, sky)
            target.resolve(i)
        return target

    def _draw_sky(self, cam: Camera, aspect: float, sky: Sky) -> None:
        ctx, prog = self.ctx, self._sky
        right, up, forward = cam.basis()
        t = math.tan(math.radians(cam.fov_deg) / 2.0)
        prog["cam_right"].value = tuple(right)
        prog["cam_up"].value = tuple(up)
        prog["cam_forward"].value = tuple(forward)
        prog["half_extent"].value = (t * aspect, t)
        prog["zenith"].value, prog["horizon"].value, prog["ground"].value = sky.zenith, sky.horizon, sky.ground
        ctx.depth_func = "<="
        ctx.depth_mask = False
        ctx.disable(moderngl.CULL_FACE)
        self._sky_vao.render(moderngl.TRIANGLES, vertices=3)
        ctx.depth_mask = True
        ctx.depth_func = "<"
        if self.cull:
            ctx.enable(moderngl.CULL_FACE)

    # ------------------------------------------------------------------ lifetime
    def _check_open(self) -> None:
        """Raise if closed; otherwise make this renderer's context current on this thread."""
        if self.closed:
            raise RuntimeError("Renderer is closed")
        if getattr(_current, "ctx", None) is not self.ctx:
            self.ctx.__enter__()
            _current.ctx = self.ctx

    def close(self) -> None:
        """Release every scene, framebuffer and the context (safe to call twice)."""
        if getattr(self, "closed", True):
            return
        self._check_open()
        for scene in list(self._scenes):
            scene.release()
        self._scenes.clear()
        for target in self._targets.values():
            target.release()
        self._targets.clear()
        self.ctx.release()
        _current.ctx = None
        self.closed = True

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        if sys.is_finalizing():  # EGL may already be torn down; the OS frees everything anyway
            return
        try:
            self.close()
        except Exception:
            pass


def _write_frames(rgba: np.ndarray, dest: np.ndarray | Sequence[np.ndarray], ids: bool) -> None:
    """A read-back chunk (n, H, W, 4) uint8 into ``dest``: colour frames drop alpha, id frames keep the
    24-bit id of R, G, B (see ``shaders.ID_FS``; alpha is 255).

    When ``dest`` is one C-contiguous array (``render``, ``render_ids``, ``render_batch`` into an array)
    the chunk is converted in one call, frames stacked as one tall image; a list of frame views (slots
    of an observation buffer, in any order) takes one call per frame. On llvmpipe, reading RGBA and
    dropping alpha with OpenCV is about twice as fast as asking the driver for RGB. A chunk read as RGB
    (``readback="pbo_rgb"``, colour frames only) is copied as it is."""
    channels = rgba.shape[3]
    if isinstance(dest, np.ndarray) and dest.flags.c_contiguous:
        w = rgba.shape[2]
        pairs = [(rgba.reshape(-1, w, channels), dest.reshape(-1, w) if ids else dest.reshape(-1, w, 3))]
    else:
        pairs = list(zip(rgba, dest, strict=True))
    for src, dst in pairs:
        if ids:
            np.bitwise_and(src.view("<u4")[..., 0], 0xFFFFFF, out=dst, casting="unsafe")
        elif channels == 3:
            np.copyto(dst, src)
        else:
            cv2.cvtColor(src, cv2.COLOR_RGBA2RGB, dst=dst)


def _write_mapped(read: PendingRead, dest: np.ndarray | Sequence[np.ndarray], ids: bool) -> None:
    """A ``"pbo"`` chunk into ``dest``, converted straight from the mapped pack buffer (no host copy)."""
    with read.mapped() as rgba:
        _write_frames(rgba, dest, ids)


def _check_size(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return int(value)


def _unit(v: Sequence[float]) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    n = np.linalg.norm(a)
    if not np.isfinite(n) or n == 0:
        raise ValueError(f"light direction must be a non-zero vector, got {v!r}")
    return a / n


@dataclass(frozen=True)
class ZoneRange:
    """A contiguous range of the index buffer holding one zone, and the zone's floor bounds."""

    zone: int
    first: int
    count: int
    x0: float
    z0: float
    x1: float
    z1: float

    def distance(self, x: float, z: float) -> float:
        return math.hypot(max(self.x0 - x, 0.0, x - self.x1), max(self.z0 - z, 0.0, z - self.z1))


def _pack(meshes: list[Mesh]) -> tuple[np.ndarray, np.ndarray, list[ZoneRange]]:
    """Interleave all meshes zone by zone (objects before structure inside each zone) and share
    identical vertices.

    Sharing turns a triangle soup into an indexed mesh: fewer vertex-shader runs (a box has 24
    distinct vertices, not 36) at the cost of one ``np.unique`` at upload. Index ranges stay
    contiguous per zone so ``render`` can draw zones in a camera-dependent order.
    """
    order = sorted(range(len(meshes)), key=lambda i: (meshes[i].zone < 0, meshes[i].zone, meshes[i].instance_id == 0))
    blocks, zones = [], []
    for i in order:
        m = meshes[i]
        n = len(m.positions)
        if n == 0:
            continue
        block = np.empty((n, shaders.FLOATS_PER_VERTEX), np.float32)
        block[:, 0:3] = m.positions
        block[:, 3:6] = m.normals
        block[:, 6:9] = m.colors
        block[:, 9:11] = 0.0 if m.uvs is None else m.uvs
        block[:, 11] = m.texture
        block[:, 12] = m.instance_id
        blocks.append(block)
        zones.append(m.zone)
    if not blocks:
        raise ValueError("upload() got meshes without any triangles")
    soup = np.concatenate(blocks)
    rows = np.ascontiguousarray(soup).view(np.dtype((np.void, soup.dtype.itemsize * soup.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    # Keep vertices in first-use order so the index stream stays in draw order and cache friendly.
    rank = np.empty(len(first), np.int64)
    by_first = np.argsort(first)
    rank[by_first] = np.arange(len(first))
    vertices = soup[first[by_first]]
    indices = rank[inverse.ravel()].astype(np.uint32)
    ranges: list[ZoneRange] = []
    start = 0
    for zone in dict.fromkeys(zones):
        count = sum(len(b) for b, z in zip(blocks, zones, strict=True) if z == zone)
        pts = soup[start:start + count, :3]
        ranges.append(ZoneRange(zone, start, count, float(pts[:, 0].min()), float(pts[:, 2].min()),
                                float(pts[:, 0].max()), float(pts[:, 2].max())))
        start += count
    return vertices, indices, ranges


def _draw_order(ranges: list[ZoneRange], cam: Camera) -> list[ZoneRange]:
    """The camera's zone first, then the other zones nearest first, then unzoned geometry."""
    if len(ranges) <= 1:
        return ranges
    x, z = cam.position[0], cam.position[2]
    zoned = sorted((r for r in ranges if r.zone >= 0),
                   key=lambda r: (r.distance(x, z), (r.x1 - r.x0) * (r.z1 - r.z0)))
    return zoned + [r for r in ranges if r.zone < 0]


def _layout(vbo, program) -> tuple:
    """Vertex layout for ``program``: attributes the program does not use become padding bytes."""
    fmt, names = [], []
    for part, name in zip(shaders.VERTEX_FORMAT.split(), shaders.VERTEX_ATTRS, strict=True):
        if name in program:
            fmt.append(part)
            names.append(name)
        else:
            fmt.append(f"{int(part[:-1]) * 4}x")
    return (vbo, " ".join(fmt), *names)

