"""Create the headless OpenGL context (EGL) or fail with one clear message.

One code path serves both machines: on the CPU box EGL resolves to Mesa's llvmpipe, on a GPU box to
the NVIDIA driver's EGL. Which EGL device is used: the ``device`` argument, else the environment
variable ``SPATIALRL_EGL_DEVICE`` (an index into ``eglQueryDevicesEXT``), else glcontext's own
``GLCONTEXT_DEVICE_INDEX``, else device 0. On a multi-GPU host, give each worker process its own
index; the chosen device's name is in ``Renderer.device_name``.
"""

from __future__ import annotations

import os

import moderngl

from spatialrl.errors import RenderUnavailable

DEVICE_ENV = "SPATIALRL_EGL_DEVICE"
GL_VERSION = 330

INSTALL_HINT = (
    "Install the system EGL/OpenGL libraries: `apt-get install -y libegl1 libegl-mesa0 libgl1-mesa-dri` "
    "(Mesa, CPU rendering); on an NVIDIA GPU machine the driver's EGL library (libEGL_nvidia.so, part of "
    "the NVIDIA driver / libnvidia-gl package) must also be present."
)


def resolve_device(device: int | None) -> int | None:
    """The EGL device index to request: argument, then ``SPATIALRL_EGL_DEVICE``, then None (default)."""
    if device is None:
        raw = os.environ.get(DEVICE_ENV, "").strip()
        if not raw:
            return None
        try:
            device = int(raw)
        except ValueError:
            raise ValueError(f"environment variable {DEVICE_ENV} must be an integer, got {raw!r}") from None
    if isinstance(device, bool) or int(device) != device or device < 0:
        raise ValueError(f"EGL device index must be an int >= 0, got {device!r}")
    return int(device)


def create_egl_context(device: int | None = None) -> moderngl.Context:
    """A standalone moderngl context on EGL (no X display needed); raises ``RenderUnavailable``."""
    index = resolve_device(device)
    kwargs = {} if index is None else {"device_index": index}
    try:
        ctx = moderngl.create_context(standalone=True, backend="egl", require=GL_VERSION, **kwargs)
    except Exception as e:  # glcontext raises bare Exception for every EGL failure
        where = "" if index is None else f" (EGL device {index})"
        raise RenderUnavailable(
            f"cannot create an OpenGL {GL_VERSION // 100}.{GL_VERSION // 10 % 10} context through EGL"
            f"{where}: {e}. {INSTALL_HINT}"
        ) from e
    return ctx
