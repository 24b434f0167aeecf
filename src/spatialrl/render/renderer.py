"""Offscreen batch renderer: a whole scene in one vertex buffer, many cameras per call.

Why it is shaped like this (llvmpipe on 2 CPU cores is the slow case we design for):
- one vertex/index buffer per scene and one draw call per camera: draw-call overhead, not triangles,
  dominates small scenes;
- objects are stored before structure (walls, floor) so furniture fills the depth buffer first and
  the large wall/floor polygons behind it are rejected by the early depth test;
- all textures live in one texture array (a layer per texture), so switching textures costs nothing;
- a batch of cameras is drawn into one tiled framebuffer (a viewport per camera) and read back once,
  which lets llvmpipe rasterise all tiles in one go instead of stalling on a readback per camera;
- instance ids come from a second, untextured pass that writes the id as 24-bit colour.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import cv2
import moderngl
import numpy as np

from spatialrl.render import equirect as _equirect
from spatialrl.render import shaders
from spatialrl.render.camera import Camera
from spatialrl.render.context import create_egl_context
from spatialrl.render.mesh import Mesh

MAX_ATLAS_PIXELS = 1 << 23  # ~8.4 Mpx per tiled readback (32 frames of 640x360); bounds memory


@dataclass(frozen=True)
class Lighting:
    """Directional key + fill light and ambient (intensities add up to about 1 for a lit face).

    Directions point *towards* the light, in world space (y up)."""

    key_dir: tuple[float, float, float] = (0.45, 0.8, 0.3)
    fill_dir: tuple[float, float, float] = (-0.55, 0.1, -0.8)
    ambient: float = 0.42
    key: float = 0.55
    fill: float = 0.25


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
                 n_triangles: int, n_textures: int, sky: Sky, lighting: Lighting, bounds: np.ndarray):
        self._owner = owner
        self._vbo, self._ibo, self._textures = vbo, ibo, textures
        self.vao_shaded, self.vao_ids = vao_shaded, vao_ids
        self.n_indices = n_indices
        self.n_triangles = n_triangles
        self.n_textures = n_textures
        self.sky = sky
        self.lighting = lighting
        self.bounds = bounds  # (2, 3) min/max corner of all geometry
        self.released = False

    def release(self) -> None:
        if self.released:
            return
        for obj in (self.vao_shaded, self.vao_ids, self._vbo, self._ibo, self._textures):
            obj.release()
        self.released = True


class Renderer:
    """Headless renderer for a fixed frame size; see ``docs/rendering.md``.

    ``device`` picks the EGL device (default: env ``SPATIALRL_EGL_DEVICE`` or device 0).
    ``samples`` > 0 turns on multisampling for colour frames (off by default: it costs speed and
    makes frames depend on the driver's MSAA pattern). ``cull`` drops back faces (meshes must be
    closed and wound outward, as every builder in ``spatialrl.worlds`` makes them).
    """

    def __init__(self, width: int, height: int, *, device: int | None = None, samples: int = 0,
                 cull: bool = True):
        self.width = _check_size(width, "width")
        self.height = _check_size(height, "height")
        if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
            raise ValueError(f"samples must be an int >= 0, got {samples!r}")
        self.samples = samples
        self.cull = bool(cull)
        self.ctx = create_egl_context(device)
        self.device_name = f"{self.ctx.info['GL_RENDERER']} / {self.ctx.info['GL_VERSION']}"
        self._max_size = int(self.ctx.info["GL_MAX_TEXTURE_SIZE"])
        self._max_layers = int(self.ctx.info["GL_MAX_ARRAY_TEXTURE_LAYERS"])
        if self.width > self._max_size or self.height > self._max_size:
            size = (self.width, self.height)
            self.close()
            raise ValueError(f"frame size {size} exceeds this device's limit {self._max_size}")
        self.ctx.front_face = "cw"  # see camera.py: the left-handed world flips on-screen winding
        self._shaded = self.ctx.program(vertex_shader=shaders.SHADED_VS, fragment_shader=shaders.SHADED_FS)
        self._ids = self.ctx.program(vertex_shader=shaders.ID_VS, fragment_shader=shaders.ID_FS)
        self._sky = self.ctx.program(vertex_shader=shaders.SKY_VS, fragment_shader=shaders.SKY_FS)
        self._sky_vao = self.ctx.vertex_array(self._sky, [])
        self._fbos: dict[tuple, tuple] = {}
        self._scenes: list[Scene] = []
        self.closed = False

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
        vertices, indices = _pack(meshes)
        bounds = np.stack([vertices[:, :3].min(0), vertices[:, :3].max(0)])
        tex = self._texture_array(textures)
        vbo = self.ctx.buffer(vertices.tobytes())
        ibo = self.ctx.buffer(indices.tobytes())
        vao_shaded = self.ctx.vertex_array(self._shaded, [_layout(vbo, self._shaded)], index_buffer=ibo,
                                           index_element_size=4)
        vao_ids = self.ctx.vertex_array(self._ids, [_layout(vbo, self._ids)], index_buffer=ibo, index_element_size=4)
        scene = Scene(self, vbo, ibo, vao_shaded, vao_ids, tex, len(indices),
                      sum(m.n_triangles for m in meshes), len(textures), sky_cfg, lighting, bounds)
        self._scenes.append(scene)
        return scene

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
        tex.filter = (moderngl.LINEAR_MIPMAP_LINEAR, moderngl.LINEAR)
        tex.repeat_x = tex.repeat_y = True
        return tex

    # ------------------------------------------------------------------ rendering
    def render(self, scene: Scene, cameras: Sequence[Camera]) -> np.ndarray:
        """Colour frames, (N, H, W, 3) uint8, row 0 at the top."""
        return self._render(scene, cameras, self.width, self.height, ids=False)

    def render_ids(self, scene: Scene, cameras: Sequence[Camera]) -> np.ndarray:
        """Instance-id frames, (N, H, W) int32; 0 = structure or background."""
        return self._render(scene, cameras, self.width, self.height, ids=True)

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
        strip = np.ascontiguousarray(faces.transpose(1, 0, 2, 3).reshape(face, 6 * face, 3))
        return cv2.remap(strip, map_x, map_y, interpolation=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)

    def _render(self, scene: Scene, cameras: Sequence[Camera], w: int, h: int, ids: bool) -> np.ndarray:
        self._check_open()
        if not isinstance(scene, Scene) or scene._owner is not self:
            raise ValueError("scene was not uploaded by this Renderer")
        if scene.released:
            raise ValueError("scene has been released")
        cameras = list(cameras)
        for i, c in enumerate(cameras):
            if not isinstance(c, Camera):
                raise TypeError(f"cameras[{i}] is {type(c).__name__}, expected spatialrl.render.Camera")
        out = np.empty((len(cameras), h, w) if ids else (len(cameras), h, w, 3), np.int32 if ids else np.uint8)
        per_atlas = self._tiles_per_atlas(w, h)
        for start in range(0, len(cameras), per_atlas):
            chunk = cameras[start:start + per_atlas]
            tiles = self._draw_atlas(scene, chunk, w, h, ids)
            out[start:start + len(chunk)] = _decode_ids(tiles) if ids else tiles[..., :3]
        return out

    def _tiles_per_atlas(self, w: int, h: int) -> int:
        by_pixels = max(1, MAX_ATLAS_PIXELS // (w * h))
        by_size = max(1, self._max_size // w) * max(1, self._max_size // h)
        return min(by_pixels, by_size)

    def _atlas_fbo(self, cols: int, rows: int, w: int, h: int, multisample: bool):
        key = (cols, rows, w, h, multisample)
        if key not in self._fbos:
            size = (cols * w, rows * h)
            fbo = self.ctx.framebuffer(self.ctx.renderbuffer(size, 4), self.ctx.depth_renderbuffer(size))
            msaa = None
            if multisample:
                msaa = self.ctx.framebuffer(self.ctx.renderbuffer(size, 4, samples=self.samples),
                                            self.ctx.depth_renderbuffer(size, samples=self.samples))
            if len(self._fbos) >= 4:  # keep a few sizes (frame, cube face, partial batches)
                old = self._fbos.pop(next(iter(self._fbos)))
                for f in old:
                    if f is not None:
                        _release_fbo(f)
            self._fbos[key] = (fbo, msaa)
        return self._fbos[key]

    def _draw_atlas(self, scene: Scene, cameras: list[Camera], w: int, h: int, ids: bool) -> np.ndarray:
        n = len(cameras)
        cols = min(n, max(1, self._max_size // w), max(1, math.ceil(math.sqrt(n * h / w))))
        rows = math.ceil(n / cols)
        multisample = self.samples > 0 and not ids
        fbo, msaa = self._atlas_fbo(cols, rows, w, h, multisample)
        target = msaa if multisample else fbo
        target.use()
        ctx = self.ctx
        ctx.enable(moderngl.DEPTH_TEST)
        ctx.depth_func = "<"
        if self.cull:
            ctx.enable(moderngl.CULL_FACE)
        else:
            ctx.disable(moderngl.CULL_FACE)
        sky = scene.sky
        bg = (0.0, 0.0, 0.0) if ids else sky.horizon
        target.clear(*bg, 1.0, depth=1.0)
        aspect = w / h
        prog, vao = (self._ids, scene.vao_ids) if ids else (self._shaded, scene.vao_shaded)
        if not ids:
            scene._textures.use(0)
            light = scene.lighting
            prog["textures"].value = 0
            prog["key_dir"].value = tuple(_unit(light.key_dir))
            prog["fill_dir"].value = tuple(_unit(light.fill_dir))
            prog["light"].value = (light.ambient, light.key, light.fill)
        mvp = prog["mvp"]
        for i, cam in enumerate(cameras):
            r, c = divmod(i, cols)
            target.viewport = (c * w, r * h, w, h)
            mvp.write(cam.view_projection(aspect).T.astype("f4").tobytes())
            vao.render(moderngl.TRIANGLES, vertices=scene.n_indices)
            if not ids and not sky.flat:
                self._draw_sky(cam, aspect, sky)
        if multisample:
            ctx.copy_framebuffer(fbo, msaa)
        raw = np.frombuffer(fbo.read(viewport=(0, 0, cols * w, rows * h), components=4, alignment=1), np.uint8)
        atlas = raw.reshape(rows, h, cols, w, 4).transpose(0, 2, 1, 3, 4).reshape(rows * cols, h, w, 4)
        return atlas[:n, ::-1]  # GL rows run bottom-up

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
        if self.closed:
            raise RuntimeError("Renderer is closed")

    def close(self) -> None:
        """Release every scene, framebuffer and the context (safe to call twice)."""
        if getattr(self, "closed", True):
            return
        for scene in list(self._scenes):
            scene.release()
        self._scenes.clear()
        for fbos in self._fbos.values():
            for f in fbos:
                if f is not None:
                    _release_fbo(f)
        self._fbos.clear()
        self.ctx.release()
        self.closed = True

    def __enter__(self) -> Renderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


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


def _pack(meshes: list[Mesh]) -> tuple[np.ndarray, np.ndarray]:
    """Interleave all meshes (objects first, then structure) and share identical vertices.

    Sharing turns a triangle soup into an indexed mesh: fewer vertex-shader runs (a box has 24
    distinct vertices, not 36) at the cost of one ``np.unique`` at upload.
    """
    order = sorted(range(len(meshes)), key=lambda i: meshes[i].instance_id == 0)
    blocks = []
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
    if not blocks:
        raise ValueError("upload() got meshes without any triangles")
    soup = np.concatenate(blocks)
    rows = np.ascontiguousarray(soup).view(np.dtype((np.void, soup.dtype.itemsize * soup.shape[1]))).ravel()
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    # Keep vertices in first-use order so the index stream stays objects-first and cache friendly.
    rank = np.empty(len(first), np.int64)
    by_first = np.argsort(first)
    rank[by_first] = np.arange(len(first))
    vertices = soup[first[by_first]]
    indices = rank[inverse.ravel()].astype(np.uint32)
    return vertices, indices


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


def _decode_ids(tiles: np.ndarray) -> np.ndarray:
    t = tiles.astype(np.int32)
    return t[..., 0] | (t[..., 1] << 8) | (t[..., 2] << 16)


def _release_fbo(fbo) -> None:
    for att in list(fbo.color_attachments) + ([fbo.depth_attachment] if fbo.depth_attachment else []):
        att.release()
    fbo.release()
