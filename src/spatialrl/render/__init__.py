"""The one offscreen renderer shared by houses (TVR) and cities (V-IRL): moderngl on EGL.

Quick use::

    from spatialrl.render import Renderer, Camera
    with Renderer(640, 360) as r:
        scene = r.upload(house.meshes, house.textures)
        frames = r.render(scene, [Camera((x, 1.5, z), yaw_deg=90, pitch_deg=0)])  # (1, 360, 640, 3)

Conventions (AI2-THOR): y up, yaw 0 looks along +z, yaw 90 along +x, positive pitch looks down.
See ``docs/rendering.md``.
"""

from spatialrl.errors import RenderUnavailable
from spatialrl.render.camera import Camera
from spatialrl.render.mesh import Mesh
from spatialrl.render.renderer import Lighting, Renderer, Scene, Sky

__all__ = ["Camera", "Lighting", "Mesh", "RenderUnavailable", "Renderer", "Scene", "Sky"]
