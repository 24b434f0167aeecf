"""A batch's frames as the layers of one texture array: each frame its own w x h surface, one readback.

moderngl attaches a texture array to a framebuffer only as a whole (layered rendering, where a geometry
shader picks the layer), so the per-layer framebuffers are made with the few raw GL calls below, loaded
through ``eglGetProcAddress`` (the renderer's context is always EGL; with libglvnd these are dispatch
stubs that go to whichever context is current, Mesa's or NVIDIA's).

Why layers and not tiles of one large framebuffer: a frame drawn into layer i has exactly the framebuffer
size, viewport and state of a frame drawn alone, so it is bit-identical whatever its slot in the batch
(a viewport offset changes the float rounding of window coordinates and can move an edge pixel). And
the whole chunk comes back in one ``glGetTextureSubImage`` call (GL 4.5, or ARB_get_texture_sub_image)
instead of one ``glReadPixels`` per frame: one wait on the GL pipeline and one transfer per chunk. Where
that call is missing the layers are read one by one (``glReadPixels``), same pixels.

Two ways to read a chunk back (``READBACK_MODES``, the renderer's ``readback`` option):

- ``"sync"`` (:meth:`LayerTarget.read`): the pixels go straight into a host array; the call returns when
  the chunk's draws are done and the pixels copied, so the CPU waits for the GPU once per chunk.
- ``"pbo"`` (:meth:`LayerTarget.read_async`): the pixels go into one of two pixel pack buffers (GL buffer
  objects the driver fills on its own time) and the call returns at once; the renderer issues the next
  chunk's draws before mapping this chunk's buffer (:meth:`PendingRead.mapped`), so the GPU finishes and
  copies chunk k while the CPU works on chunk k+1. Two buffers, because chunk k's buffer is still mapped
  (being converted) when chunk k+1's copy is queued. Same bytes as ``"sync"``.

- ``"pbo_rgb"``: ``"pbo"`` with the GL packing RGB (3 bytes a pixel) instead of RGBA, so the host only
  copies what it maps instead of converting it (colour frames; id frames are read as RGBA). On llvmpipe
  the driver's packing costs more than OpenCV's conversion (5-8% fewer steps/s than ``"sync"``); the
  NVIDIA driver packs it at no visible cost.

``"auto"`` (the default) picks per GL device (:func:`resolve_readback`): ``"pbo_rgb"`` on a hardware GPU,
``"sync"`` on a software rasteriser (llvmpipe), where nothing overlaps and ``"pbo"`` measured 0-15% slower
(``benchmarks/results/tvr_vector_speed-*readback*.json``). On the H100 (640x360, the vector env during
the data stage, 2026-12-05, one sample per row under load) sync / pbo / pbo_rgb ran N = 256: 1,367 /
2,776 / 2,805 steps/s (0.75 / 0.38 / 0.36 host ms a step), N = 1,024: 1,208 / 3,079 / 3,593 (0.73 / 0.34 /
0.28) (``-h100-data-stage-rgb.json``).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

GL_FRAMEBUFFER = 0x8D40
GL_READ_FRAMEBUFFER = 0x8CA8
GL_DRAW_FRAMEBUFFER = 0x8CA9
GL_COLOR_ATTACHMENT0 = 0x8CE0
GL_DEPTH_ATTACHMENT = 0x8D00
GL_RENDERBUFFER = 0x8D41
GL_FRAMEBUFFER_COMPLETE = 0x8CD5
GL_COLOR_BUFFER_BIT = 0x4000
GL_DEPTH_BUFFER_BIT = 0x100
GL_NEAREST = 0x2600
GL_RGB = 0x1907
GL_RGBA = 0x1908
GL_UNSIGNED_BYTE = 0x1401
GL_PACK_ALIGNMENT = 0x0D05
GL_PIXEL_PACK_BUFFER = 0x88EB
GL_STREAM_READ = 0x88E1
GL_MAP_READ_BIT = 0x0001

READBACK_MODES = ("sync", "pbo", "pbo_rgb")
READBACK_CHOICES = ("auto", *READBACK_MODES)
SOFTWARE_RASTERISERS = ("llvmpipe", "softpipe", "swiftshader", "swrast", "lavapipe")

_U, _I, _F, _P, _S = ctypes.c_uint, ctypes.c_int, ctypes.c_float, ctypes.c_void_p, ctypes.c_ssize_t
_SIGNATURES: dict[str, tuple[Any, ...]] = {
    "glGenFramebuffers": (None, _I, ctypes.POINTER(_U)),
    "glDeleteFramebuffers": (None, _I, ctypes.POINTER(_U)),
    "glBindFramebuffer": (None, _U, _U),
    "glFramebufferTextureLayer": (None, _U, _U, _U, _I, _I),
    "glFramebufferRenderbuffer": (None, _U, _U, _U, _U),
    "glCheckFramebufferStatus": (_U, _U),
    "glViewport": (None, _I, _I, _I, _I),
    "glClearColor": (None, _F, _F, _F, _F),
    "glClearDepth": (None, ctypes.c_double),
    "glClear": (None, _U),
    "glBlitFramebuffer": (None, _I, _I, _I, _I, _I, _I, _I, _I, _U, _U),
    "glPixelStorei": (None, _U, _I),
    "glReadPixels": (None, _I, _I, _I, _I, _U, _U, _P),
    "glGetTextureSubImage": (None, _U, _I, _I, _I, _I, _I, _I, _I, _U, _U, _I, _P),
    "glFlush": (None,),
    "glGenBuffers": (None, _I, ctypes.POINTER(_U)),
    "glDeleteBuffers": (None, _I, ctypes.POINTER(_U)),
    "glBindBuffer": (None, _U, _U),
    "glBufferData": (None, _U, _S, _P, _U),
    "glMapBufferRange": (_P, _U, _S, _S, _U),
    "glUnmapBuffer": (ctypes.c_ubyte, _U),
}


class _GL:
    """The raw entry points above (``None`` for one the driver does not give)."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("EGL") or "libEGL.so.1"
        egl = ctypes.CDLL(name)
        egl.eglGetProcAddress.restype = _P
        egl.eglGetProcAddress.argtypes = [ctypes.c_char_p]
        for fn, (restype, *args) in _SIGNATURES.items():
            address = egl.eglGetProcAddress(fn.encode())
            setattr(self, fn, ctypes.CFUNCTYPE(restype, *args)(address) if address else None)
        missing = [fn for fn in _SIGNATURES if fn != "glGetTextureSubImage" and getattr(self, fn) is None]
        if missing:
            raise RuntimeError(f"the EGL library gives no {', '.join(missing)}")


_gl: _GL | None = None


def gl() -> _GL:
    global _gl
    if _gl is None:
        _gl = _GL()
    return _gl


def check_readback(value: object, owner: str = "Renderer") -> str:
    """``value`` if it names a readback choice (``READBACK_CHOICES``), else a ValueError that lists them."""
    if not isinstance(value, str) or value not in READBACK_CHOICES:
        raise ValueError(f"{owner} readback must be one of {', '.join(map(repr, READBACK_CHOICES))}, got {value!r}")
    return value


def resolve_readback(value: str, gl_renderer: str) -> str:
    """The mode ``value`` stands for on the GL device named ``gl_renderer`` (``GL_RENDERER``): ``"auto"`` is
    ``"sync"`` on a software rasteriser and ``"pbo_rgb"`` on a GPU; a named mode stays as it is."""
    if value != "auto":
        return value
    return "sync" if any(name in gl_renderer.lower() for name in SOFTWARE_RASTERISERS) else "pbo_rgb"


def can_read_sub_image(ctx: Any) -> bool:
    """Whether ``ctx`` has ``glGetTextureSubImage`` (GL 4.5 or ARB_get_texture_sub_image)."""
    return gl().glGetTextureSubImage is not None and (
        ctx.version_code >= 450 or "GL_ARB_get_texture_sub_image" in ctx.extensions)


class LayerTarget:
    """``layers`` frames of ``w`` x ``h``: layer i of one RGBA8 texture array with its own depth buffer
    (and, with ``samples``, its own multisample framebuffer, resolved into the layer)."""

    def __init__(self, ctx: Any, w: int, h: int, layers: int, samples: int = 0):
        self.ctx, self.w, self.h, self.layers = ctx, w, h, layers
        self.sub_image = can_read_sub_image(ctx)
        self._scratch: np.ndarray | None = None
        self._packs: list[int] = []  # the two pixel pack buffers of read_async, made on its first call
        self._next_pack = 0
        self.texture = ctx.texture_array((w, h, layers), 4)
        self.depth = [ctx.depth_renderbuffer((w, h)) for _ in range(layers)]
        self.msaa = [ctx.framebuffer(ctx.renderbuffer((w, h), 4, samples=samples),
                                     ctx.depth_renderbuffer((w, h), samples=samples)) if samples else None
                     for _ in range(layers)]
        g = gl()
        names = (_U * layers)()
        g.glGenFramebuffers(layers, names)
        self.fbos = list(names)
        try:
            for i, fbo in enumerate(self.fbos):
                g.glBindFramebuffer(GL_FRAMEBUFFER, fbo)
                g.glFramebufferTextureLayer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, self.texture.glo, 0, i)
                g.glFramebufferRenderbuffer(GL_FRAMEBUFFER, GL_DEPTH_ATTACHMENT, GL_RENDERBUFFER, self.depth[i].glo)
                status = g.glCheckFramebufferStatus(GL_FRAMEBUFFER)
                if status != GL_FRAMEBUFFER_COMPLETE:
                    raise RuntimeError(f"layer framebuffer {i} of {w}x{h}x{layers} is incomplete (status {status:#x})")
        except Exception:
            self.release()
            raise
        finally:
            g.glBindFramebuffer(GL_FRAMEBUFFER, 0)

    @property
    def nbytes(self) -> int:
        """Bytes of GL memory this target holds: the RGBA8 layers, a 32-bit depth buffer per layer, the
        multisample buffers (colour + depth per sample) and, once made, the two pack buffers."""
        frame = self.w * self.h
        samples = sum(m.color_attachments[0].samples for m in self.msaa if m is not None)
        return (frame * 4 * self.layers + frame * 4 * len(self.depth) + frame * 8 * samples
                + len(self._packs) * self.layers * frame * 4)

    def begin(self, i: int, clear: tuple[float, float, float]) -> None:
        """Make frame ``i`` the draw target (its multisample framebuffer when there is one) and clear it."""
        msaa = self.msaa[i]
        if msaa is not None:
            msaa.use()
            msaa.clear(*clear, 1.0, depth=1.0)
            return
        g = gl()
        g.glBindFramebuffer(GL_FRAMEBUFFER, self.fbos[i])
        g.glViewport(0, 0, self.w, self.h)
        g.glClearColor(*clear, 1.0)
        g.glClearDepth(1.0)
        g.glClear(GL_COLOR_BUFFER_BIT | GL_DEPTH_BUFFER_BIT)

    def resolve(self, i: int) -> None:
        """Copy frame ``i``'s multisample framebuffer into its layer (nothing without multisampling)."""
        msaa = self.msaa[i]
        if msaa is None:
            return
        g = gl()
        g.glBindFramebuffer(GL_READ_FRAMEBUFFER, msaa.glo)
        g.glBindFramebuffer(GL_DRAW_FRAMEBUFFER, self.fbos[i])
        g.glBlitFramebuffer(0, 0, self.w, self.h, 0, 0, self.w, self.h, GL_COLOR_BUFFER_BIT, GL_NEAREST)
        g.glBindFramebuffer(GL_FRAMEBUFFER, 0)

    def scratch(self) -> np.ndarray:
        """The host array a chunk is read into, (layers, h, w, 4) uint8, made once per target."""
        if self._scratch is None:
            self._scratch = np.empty((self.layers, self.h, self.w, 4), np.uint8)
        return self._scratch

    def read(self, n: int, out: np.ndarray) -> None:
        """Frames ``0..n-1`` into ``out`` ((>= n, h, w, 4) uint8, C-contiguous): one call for all of them,
        which returns once the pixels are there (readback ``"sync"``)."""
        assert out.dtype == np.uint8 and out.flags.c_contiguous and out.shape[1:] == (self.h, self.w, 4)
        assert 0 < n <= min(self.layers, len(out))
        self._read_to(n, out.ctypes.data)

    def read_async(self, n: int, channels: int = 4) -> PendingRead:
        """Queue frames ``0..n-1`` for copying into the next pixel pack buffer and return without waiting
        (readback ``"pbo"``; ``channels=3``: packed as RGB, ``"pbo_rgb"``); the pixels are the returned
        read's, once mapped. The layers may be drawn again at once: GL orders the copy before later draws."""
        assert 0 < n <= self.layers and channels in (3, 4)
        g = gl()
        if not self._packs:
            names = (_U * 2)()
            g.glGenBuffers(2, names)
            self._packs = list(names)
            for buf in self._packs:  # STREAM_READ: written by the GL, read once by the host
                g.glBindBuffer(GL_PIXEL_PACK_BUFFER, buf)
                g.glBufferData(GL_PIXEL_PACK_BUFFER, self.layers * self.h * self.w * 4, None, GL_STREAM_READ)
        buf = self._packs[self._next_pack]
        self._next_pack ^= 1
        g.glBindBuffer(GL_PIXEL_PACK_BUFFER, buf)
        try:
            self._read_to(n, 0, channels)  # with a pack buffer bound, the "pointer" is an offset into it
        finally:
            g.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0)  # moderngl's own reads expect none bound
        g.glFlush()  # start the GPU on this chunk now, not when the driver's command buffer fills
        return PendingRead(self, buf, n, channels)

    def _read_to(self, n: int, address: int, channels: int = 4) -> None:
        """The one readback of frames ``0..n-1`` as RGBA (or RGB, ``channels=3``): to host memory at
        ``address``, or, with a pixel pack buffer bound, to that offset in the buffer."""
        g = gl()
        g.glPixelStorei(GL_PACK_ALIGNMENT, 1)
        size = self.w * self.h * channels
        fmt = GL_RGBA if channels == 4 else GL_RGB
        if self.sub_image:
            g.glGetTextureSubImage(self.texture.glo, 0, 0, 0, 0, self.w, self.h, n, fmt, GL_UNSIGNED_BYTE,
                                   n * size, address)
        else:
            for i in range(n):
                g.glBindFramebuffer(GL_READ_FRAMEBUFFER, self.fbos[i])
                g.glReadPixels(0, 0, self.w, self.h, fmt, GL_UNSIGNED_BYTE, address + i * size)
            g.glBindFramebuffer(GL_FRAMEBUFFER, 0)

    def release(self) -> None:
        if self.fbos:
            names = (_U * len(self.fbos))(*self.fbos)
            gl().glDeleteFramebuffers(len(self.fbos), names)
            self.fbos = []
        if self._packs:
            gl().glDeleteBuffers(2, (_U * 2)(*self._packs))
            self._packs = []
        for obj in [self.texture, *self.depth, *(m for m in self.msaa if m is not None)]:
            if obj is None:
                continue
            if hasattr(obj, "color_attachments"):  # a multisample framebuffer: its attachments too
                for att in [*obj.color_attachments, obj.depth_attachment]:
                    if att is not None:
                        att.release()
            obj.release()
        self.depth, self.msaa, self.texture = [], [], None


@dataclass(frozen=True)
class PendingRead:
    """A chunk queued by :meth:`LayerTarget.read_async`: ``n`` frames of ``channels`` bytes a pixel (RGBA 4,
    RGB 3) on their way into pack buffer ``buffer``."""

    target: LayerTarget
    buffer: int
    n: int
    channels: int = 4

    @contextlib.contextmanager
    def mapped(self) -> Iterator[np.ndarray]:
        """The frames as a read-only (n, h, w, channels) uint8 view of the mapped buffer (mapping waits for
        the copy). The view is valid inside the ``with`` only: the buffer is unmapped on exit, and its
        memory is the driver's, so convert from it there rather than copy it out first."""
        t, g = self.target, gl()
        size = self.n * t.h * t.w * self.channels
        g.glBindBuffer(GL_PIXEL_PACK_BUFFER, self.buffer)
        address = g.glMapBufferRange(GL_PIXEL_PACK_BUFFER, 0, size, GL_MAP_READ_BIT)
        g.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0)
        if not address:
            raise RuntimeError(f"glMapBufferRange gave no pointer for a {size}-byte pixel pack buffer")
        try:
            frames = np.frombuffer((ctypes.c_uint8 * size).from_address(address), np.uint8)
            frames.flags.writeable = False
            yield frames.reshape(self.n, t.h, t.w, self.channels)
        finally:
            g.glBindBuffer(GL_PIXEL_PACK_BUFFER, self.buffer)
            g.glUnmapBuffer(GL_PIXEL_PACK_BUFFER)
            g.glBindBuffer(GL_PIXEL_PACK_BUFFER, 0)
