"""Can a policy *see* a landmark? The sign-visibility check behind every milestone landmark.

V-IRL's observation at a rail point is four perspective views (FOV 90, 640x640) at headings
``h-135, h-45, h+45, h+135`` around the arriving heading ``h``. A place counts as visible there if
one of its sign faces covers at least ``MIN_SIGN_AREA_PX`` pixels of one view. Two ways to measure:

* ``SignVisibility`` (used while sampling routes): each sign quad is clipped to each view frustum
  and its projected area summed by the shoelace formula; a face whose line of sight crosses another
  building's footprint does not count. Pure geometry, microseconds per check.
* ``PanoramaRenderer.sign_pixels`` (``confirm`` below): render instance ids of the four views and
  count the place's sign pixels, so trees, lamps and roofs occlude as they do in the pixels. Only
  places that pass the geometric test are rendered.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from spatialrl.render.camera import NEAR, Camera
from spatialrl.worlds.city.geometry import SignQuad, sign_instance_id
from spatialrl.worlds.city.world import City

VIEW_SIZE = 640
VIEW_FOV = 90.0
VIEW_OFFSETS = (-135.0, -45.0, 45.0, 135.0)  # V-IRL's 2x2 grid order: TL, TR, BL, BR
MIN_SIGN_AREA_PX = 900.0  # of a 640x640 view: e.g. a 90 x 10 px sign


def view_cameras(position: tuple[float, float, float], heading: float,
                 offsets: tuple[float, ...] = VIEW_OFFSETS) -> list[Camera]:
    """The grid's views at ``heading``; ``offsets`` (degrees, grid order) default to V-IRL's own layout
    (the V-IRL env's ``rail_mode=grid_order`` lays the views out at 0, 90, 180, 270 instead)."""
    return [Camera(position, (heading + off) % 360.0, 0.0, VIEW_FOV) for off in offsets]


def _clip(poly: np.ndarray, plane: np.ndarray) -> np.ndarray:
    """Sutherland-Hodgman: keep the part of ``poly`` (K, 3 eye coords) where ``plane @ [p, 1] >= 0``."""
    if len(poly) == 0:
        return poly
    d = poly @ plane[:3] + plane[3]
    out = []
    for k in range(len(poly)):
        a, b, da, db = poly[k - 1], poly[k], d[k - 1], d[k]
        if db >= 0:
            if da < 0:
                out.append(a + (b - a) * (da / (da - db)))
            out.append(b)
        elif da >= 0:
            out.append(a + (b - a) * (da / (da - db)))
    return np.array(out) if out else np.zeros((0, 3))


def projected_area(corners: np.ndarray, normal: np.ndarray, camera: Camera, size: int = VIEW_SIZE) -> float:
    """Pixels covered by the quad ``corners`` (4, 3) in a ``size``-square view of ``camera``
    (0 if it faces away). Exact for a planar quad: clip to the frustum, project, shoelace."""
    c = np.asarray(camera.position)
    if float(normal @ (c - corners.mean(0))) <= 0:
        return 0.0  # back face: culled by the renderer
    right, up, forward = camera.basis()
    rel = corners - c
    eye = np.stack([rel @ right, rel @ up, rel @ forward], axis=1)  # x right, y up, z forward
    t = math.tan(math.radians(camera.fov_deg) / 2)
    for plane in ((0, 0, 1, -NEAR), (-1, 0, t, 0), (1, 0, t, 0), (0, -1, t, 0), (0, 1, t, 0)):
        eye = _clip(eye, np.asarray(plane, dtype=np.float64))
        if len(eye) < 3:
            return 0.0
    f = size / (2 * t)
    u, v = f * eye[:, 0] / eye[:, 2], f * eye[:, 1] / eye[:, 2]
    return 0.5 * abs(float(np.sum(u * np.roll(v, -1) - np.roll(u, -1) * v)))


class SignVisibility:
    """Geometric visibility of places' signs from panos, cached per (place, pano, heading)."""

    def __init__(self, city: City, signs: list[SignQuad], min_area: float = MIN_SIGN_AREA_PX,
                 confirm: Callable[[int, int, float], float] | None = None):
        """``confirm(instance_id, pano, heading)`` → rendered sign pixels (640-view scale), or None
        for the geometric test alone."""
        self.city = city
        self.min_area = min_area
        self.confirm = confirm
        self._confirmed: dict[tuple[int, int, int], float] = {}
        self.by_place: dict[int, list[SignQuad]] = {}
        for s in signs:
            self.by_place.setdefault(s.place, []).append(s)
        self.lot_polys = [lot.polygon for lot in city.lots]
        self.lot_centre = np.array([p.mean(0) for p in self.lot_polys])
        self.lot_radius = np.array([np.linalg.norm(p - p.mean(0), axis=1).max() for p in self.lot_polys])
        self._cache: dict[tuple[int, int, int], float] = {}

    def _blocked(self, a: np.ndarray, b: np.ndarray, own_lot: int) -> bool:
        """Does the ground segment a → b (x, z) cross a building footprint other than ``own_lot``?"""
        seg = b - a
        length = float(np.linalg.norm(seg))
        # Footprints whose bounding circle reaches the segment.
        rel = self.lot_centre - a
        t = np.clip(rel @ seg / max(length * length, 1e-9), 0.0, 1.0)
        near = np.flatnonzero(np.linalg.norm(rel - t[:, None] * seg, axis=1) < self.lot_radius)
        near = near[near != own_lot]
        if len(near) == 0:
            return False
        pts = a + np.linspace(0.0, 1.0, max(2, int(length / 0.25)))[:, None] * seg  # (S, 2)
        for k in near:
            poly = self.lot_polys[k]
            e = np.roll(poly, -1, 0) - poly
            r = pts[:, None] - poly[None]
            inside = np.all(e[None, :, 0] * r[..., 1] - e[None, :, 1] * r[..., 0] > 1e-6, axis=1)
            if inside.any():
                return True
        return False

    def best_area(self, place_index: int, pano: int, heading: float) -> float:
        """Largest projected area (px) of any of the place's sign faces in any of the four views."""
        key = (place_index, pano, int(round(heading * 10)))
        if key not in self._cache:
            self._cache[key] = max(self.view_areas(place_index, pano, heading))
        return self._cache[key]

    def view_areas(self, place_index: int, pano: int, heading: float,
                   offsets: tuple[float, ...] = VIEW_OFFSETS) -> list[float]:
        """Per view (grid order of ``offsets``), the largest projected area (px) of any of the place's
        unblocked sign faces: which view shows the sign, not only whether one does."""
        city = self.city
        cams = view_cameras(city.camera_position(pano), heading, offsets)
        own = city.places[place_index].lot
        areas = [0.0] * len(cams)
        for s in self.by_place.get(place_index, []):
            centre = s.corners.mean(0)
            if self._blocked(city.panos.xz[pano], centre[[0, 2]], own):
                continue
            for k, cam in enumerate(cams):
                areas[k] = max(areas[k], projected_area(s.corners, s.normal, cam))
        return areas

    def rendered_area(self, place_index: int, pano: int, heading: float) -> float:
        """Rendered sign pixels (640-view scale) via ``confirm``; cached."""
        if self.confirm is None:
            raise ValueError("SignVisibility has no renderer to confirm with")
        key = (place_index, pano, int(round(heading * 10)))
        if key not in self._confirmed:
            self._confirmed[key] = self.confirm(sign_instance_id(place_index), pano, heading)
        return self._confirmed[key]

    def visible(self, place, pano: int, heading: float) -> bool:
        if self.best_area(place.index, pano, heading) < self.min_area:
            return False
        return self.confirm is None or self.rendered_area(place.index, pano, heading) >= self.min_area
