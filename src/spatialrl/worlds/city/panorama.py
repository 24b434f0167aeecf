"""Street-view panoramas of a generated city, in the V-IRL equirectangular convention.

The V-IRL reader (``spatialrl.envs.virl.pixels``) puts compass heading ``h`` at panorama column
fraction ``(h + rotation) / 360`` (mod 1), ``rotation`` being the pano's north rotation from its
``.metadata.json``. ``Renderer.render_equirect(..., north_deg=180)`` puts heading ``h`` at column
fraction ``h / 360`` (its column ``x`` looks along ``360 (x + 0.5) / W``), so a panorama with north
rotation ``r = 360 k / W`` is that image rolled right by ``k`` columns. Rotations are whole columns:
the roll is exact and the renderer's cube-to-equirect tables are computed once per size.

Speed: every cube face runs the vertex shader over the whole uploaded scene, so a big city is
split into square tiles and each tile gets a scene holding only the triangles within the camera's
far plane of it (identical pixels, a third of the vertex work in a full-size city). Panoramas
should be rendered tile by tile (``order``). Landmark-visibility id views use small scenes of the
triangles near the camera, without textures.
"""

from __future__ import annotations

import numpy as np

from spatialrl.lru import LRU
from spatialrl.render import Lighting, Renderer
from spatialrl.render.camera import FAR
from spatialrl.render.mesh import Mesh
from spatialrl.worlds.city.geometry import CityMeshes, build_meshes
from spatialrl.worlds.city.visibility import VIEW_OFFSETS, VIEW_SIZE, view_cameras
from spatialrl.worlds.city.world import City

ID_VIEW_SIZE = 320  # id views for the visibility check; pixel counts are scaled to VIEW_SIZE views
TILE_SIZE = 160.0  # metres; cities wider than two tiles are rendered tile by tile
ID_RADIUS = 45.0  # metres of geometry around the camera in an id view (landmarks are within 18 m)


def rotation_deg(shift_cols: int, width: int) -> float:
    """North rotation (degrees) of a panorama rolled by ``shift_cols`` columns."""
    return 360.0 * (int(shift_cols) % width) / width


def city_lighting(city: City) -> Lighting:
    """Sky light from every side (brighter from above) plus the style's sun."""
    return Lighting(cube=(0.74, 0.6, 0.9, 0.55, 0.7, 0.64), key_dir=city.style.key_light, key=0.3)


class _TriangleIndex:
    """Every mesh with the ground-plane bounding box of each of its triangles, for cutting
    spatial subsets (tile scenes, id scenes) without changing triangle order."""

    def __init__(self, meshes: list[Mesh]):
        self.meshes = meshes
        self.boxes = []
        for m in meshes:
            tri = m.positions.reshape(-1, 3, 3)
            self.boxes.append(np.stack([tri[:, :, 0].min(1), tri[:, :, 2].min(1),
                                        tri[:, :, 0].max(1), tri[:, :, 2].max(1)], axis=1))

    def subset(self, lo: np.ndarray, hi: np.ndarray, textured: bool = True) -> list[Mesh]:
        out = []
        for m, box in zip(self.meshes, self.boxes, strict=True):
            keep = (box[:, 2] >= lo[0]) & (box[:, 0] <= hi[0]) & (box[:, 3] >= lo[1]) & (box[:, 1] <= hi[1])
            if not keep.any():
                continue
            if keep.all() and textured:
                out.append(m)
                continue
            v = np.repeat(keep, 3)
            tex = m.texture if textured else -1
            out.append(Mesh(m.positions[v], m.normals[v], m.colors[v],
                            m.uvs[v] if (textured and m.uvs is not None) else None, tex, m.instance_id, m.zone))
        return out


class PanoramaRenderer:
    """Uploads a city (whole, or tile by tile); renders its panoramas and visibility id views."""

    def __init__(self, city: City, meshes: CityMeshes | None = None, device: int | None = None,
                 tile_size: float = TILE_SIZE):
        self.city = city
        self.meshes = meshes if meshes is not None else build_meshes(city)
        self.renderer = Renderer(ID_VIEW_SIZE, ID_VIEW_SIZE, device=device)
        self.lighting = city_lighting(city)
        self.index = _TriangleIndex(self.meshes.meshes)
        xz = city.panos.xz
        self.lo = xz.min(0)
        span = xz.max(0) - self.lo
        self.tiled = bool(np.any(span > 2 * tile_size))
        self.tile_size = tile_size
        self._tile: tuple[int, int] | None = None
        self._scene = None
        self._id_scenes = LRU(8, on_evict=lambda old: self.renderer.release(old))
        self.uploads = 0

    @property
    def device_name(self) -> str:
        return self.renderer.device_name

    def tile_of(self, pano: int) -> tuple[int, int]:
        if not self.tiled:
            return (0, 0)
        k = np.floor((self.city.panos.xz[pano] - self.lo) / self.tile_size).astype(int)
        return (int(k[0]), int(k[1]))

    def order(self, panos: list[int]) -> list[int]:
        """``panos`` sorted tile by tile (each tile's scene is uploaded once)."""
        return sorted(panos, key=lambda p: (self.tile_of(p), p))

    def _upload(self, meshes: list[Mesh], textures: list[np.ndarray]):
        self.uploads += 1
        return self.renderer.upload(meshes, textures, sky=self.city.style.sky, lighting=self.lighting)

    def _scene_for(self, pano: int):
        tile = self.tile_of(pano)
        if tile != self._tile or self._scene is None:
            if self._scene is not None:
                self.renderer.release(self._scene)
                self._scene = None
            if not self.tiled:
                meshes, textures = self.meshes.meshes, self.meshes.textures
            else:
                lo = self.lo + np.asarray(tile) * self.tile_size - FAR - 1.0
                hi = self.lo + (np.asarray(tile) + 1) * self.tile_size + FAR + 1.0
                meshes = self.index.subset(lo, hi)
                used = sorted({m.texture for m in meshes if m.texture >= 0})
                remap = {t: k for k, t in enumerate(used)}
                meshes = [m if m.texture < 0 else Mesh(m.positions, m.normals, m.colors, m.uvs, remap[m.texture],
                                                       m.instance_id, m.zone) for m in meshes]
                textures = [self.meshes.textures[t] for t in used]
            self._scene = self._upload(meshes, textures)
            self._tile = tile
        return self._scene

    def panorama(self, pano: int, width: int, shift_cols: int = 0) -> np.ndarray:
        """RGB equirectangular panorama (width/2, width, 3) at pano ``pano`` with north rotation
        ``rotation_deg(shift_cols, width)``."""
        if width % 2:
            raise ValueError(f"panorama width must be even (height = width / 2), got {width}")
        base = self.renderer.render_equirect(self._scene_for(pano), self.city.camera_position(pano), width,
                                             width // 2, north_deg=180.0)
        return np.roll(base, int(shift_cols) % width, axis=1)

    def _id_scene(self, pano: int):
        if not self.tiled:  # a small city: its one scene is cheap to draw
            return self._scene_for(pano)
        scene = self._id_scenes.get(pano)
        if scene is None:
            c = self.city.panos.xz[pano]
            meshes = self.index.subset(c - ID_RADIUS, c + ID_RADIUS, textured=False)
            scene = self._id_scenes.put(pano, self._upload(meshes, []))
        return scene

    def sign_pixels(self, instance_id: int, pano: int, heading: float) -> float:
        """Pixels of ``instance_id`` in the best of the four V-IRL views at ``pano`` facing ``heading``,
        scaled to ``VIEW_SIZE`` x ``VIEW_SIZE`` views."""
        return max(self.view_pixels(instance_id, pano, heading))

    def view_pixels(self, instance_id: int, pano: int, heading: float,
                    offsets: tuple[float, ...] = VIEW_OFFSETS) -> list[float]:
        """Pixels of ``instance_id`` in each view (grid order of ``offsets``), scaled like ``sign_pixels``."""
        cams = view_cameras(self.city.camera_position(pano), heading, offsets)
        ids = self.renderer.render_ids(self._id_scene(pano), cams)
        scale = (VIEW_SIZE / ID_VIEW_SIZE) ** 2
        return [float((frame == instance_id).sum()) * scale for frame in ids]

    def close(self) -> None:
        self.renderer.close()

    def __enter__(self) -> PanoramaRenderer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
