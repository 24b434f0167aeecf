"""Small V-IRL-format datasets with hand-chosen geometry, for tests, demos and benchmarks.

Routes are polylines in local metres (east, north) around an origin; panoramas sit at every vertex and
every ``spacing_m`` along each segment. Each panorama is a colour wheel that makes orientation visible
and checkable: the pixel at compass heading ``h`` on the horizon has
``R = 128 + 100·cos h``, ``G = 128 + 100·sin h`` (so :func:`decode_heading` recovers ``h``), the sky is
bright blue-ish and the ground dark, and a dark tick in the sky marks north. Every pano gets its own
north ``rotation``, which the renderer must undo.

The files are written exactly like the real data (and like generated cities): ``route_infos.json`` as
``[routes, n]`` with the V-IRL ``milestone_info`` blocks, ``gps_pano_mapping.pkl``, ``street_views/``.
"""

from __future__ import annotations

import json
import math
import pickle
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from spatialrl.envs.virl.data import NO_LANDMARK, PANO_MAPPING, ROUTE_INFOS, STREET_VIEWS
from spatialrl.envs.virl.geo import LatLng, bearing_deg, compass_word, geodesic_m, offset_m

SPATIAL_WORDS = ("front", "right front", "right", "right behind", "behind", "left behind", "left", "left front")
DEFAULT_ORIGIN: LatLng = (40.7411, -73.9897)


@dataclass(frozen=True)
class ToyRoute:
    """A route: ``path_m[0]`` is the start, then one vertex per milestone (the last = destination).

    ``landmarks[i]`` is ``(name, spatial)`` or None (→ "No landmark nearby"); the last one must name the
    destination. ``raw_offsets_m[i]`` shifts milestone i's raw geocode off its pano (relocation).
    """

    path_m: tuple[tuple[float, float], ...]
    landmarks: tuple[tuple[str, str] | None, ...]
    init_heading: float = 0
    raw_offsets_m: tuple[tuple[float, float], ...] = ()
    shift_m: tuple[float, float] = (0.0, 0.0)  # where the route sits in the city (keeps routes apart)


def _polar(bearing: float, dist: float) -> tuple[float, float]:
    return (dist * math.sin(math.radians(bearing)), dist * math.cos(math.radians(bearing)))


def _add(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return (a[0] + b[0], a[1] + b[1])


def golden_routes() -> list[ToyRoute]:
    """The hand-made routes the golden tests pin (see tests/virl/test_golden.py)."""
    # 0: an L (60 m north, then 50 m east); random start heading; milestone 0 raw geocode 2.2 m off its pano.
    r0 = ToyRoute(
        path_m=((0, 0), (0, 60), (50, 60)),
        landmarks=(("Joe's Pizza", "right"), ("Cafe Uno", "left")),
        raw_offsets_m=((2.0, -1.0), (0.0, 0.0)),
    )
    # 1: heading wrap: start facing 350.5°, go 350.5° then 10.5° (a +20° turn the reference calls "left"),
    #    then east. Milestone 0's landmark contains "intersection" (the verifier's other −1.5 branch).
    a = _polar(350.5, 60)
    b = _add(a, _polar(10.5, 60))
    c = _add(b, (45, 0))
    r1 = ToyRoute(
        path_m=((0, 0), a, b, c),
        landmarks=(("Pizza at the intersection", "left"), None, ("Hotel Lumen", "right front")),
        init_heading=350.5,
        shift_m=(300, 0),
    )
    # 2: a 3 m segment (no interpolation, so the instruction index lags) between two long ones.
    r2 = ToyRoute(
        path_m=((0, 0), (60, 0), (60, 3), (60, 53)),
        landmarks=(None, ("Grand Pharmacy", "behind"), ("Bank of Ash", "right")),
        init_heading=90,
        shift_m=(600, 0),
    )
    # 3: one milestone (no "First," sentence), random heading.
    r3 = ToyRoute(path_m=((0, 0), (0, 45)), landmarks=(("Bluebird Books", "right front"),), shift_m=(900, 0))
    return [r0, r1, r2, r3]


def random_routes(n: int, seed: int = 0, shift_m: tuple[float, float] = (0.0, 300.0)) -> list[ToyRoute]:
    """``n`` random routes of 1–4 milestones with 8-way headings, 4–80 m legs and random landmarks."""
    rng = random.Random(seed)
    names = ["Cafe Uno", "Joe's Pizza", "Hotel Lumen", "Bank of Ash", "Grand Pharmacy", "Bluebird Books",
             "Union Deli", "City Museum", "Red Lantern Bar", "Pier Market", "Saint Mark Church", "Olive Bakery"]
    out = []
    for k in range(n):
        pts = [(0.0, 0.0)]
        bearing = rng.choice(range(0, 360, 45))
        for _ in range(rng.randint(1, 4)):
            bearing = (bearing + rng.choice([-90, -45, 0, 45, 90])) % 360
            pts.append(_add(pts[-1], _polar(bearing, rng.choice([rng.uniform(20, 80), rng.uniform(20, 80), 4.0]))))
        lms: list[tuple[str, str] | None] = [
            (rng.choice(names), rng.choice(SPATIAL_WORDS)) if rng.random() < 0.6 else None for _ in pts[2:]
        ]
        lms.append((rng.choice(names), rng.choice(SPATIAL_WORDS)))
        out.append(ToyRoute(path_m=tuple(pts), landmarks=tuple(lms), init_heading=0,
                            shift_m=(shift_m[0] + 400.0 * k, shift_m[1])))
    return out


def heading_colour(heading_deg: np.ndarray | float) -> np.ndarray:
    """RGB of the horizon at compass ``heading_deg`` (see module docstring)."""
    h = np.radians(np.asarray(heading_deg, dtype=np.float64))
    return np.stack([128 + 100 * np.cos(h), 128 + 100 * np.sin(h), np.full_like(h, 128.0)], axis=-1)


def decode_heading(rgb: np.ndarray) -> float:
    """Inverse of :func:`heading_colour` (mean over the given pixels), degrees in [0, 360)."""
    px = np.asarray(rgb, dtype=np.float64).reshape(-1, 3).mean(axis=0)
    return math.degrees(math.atan2(px[1] - 128, px[0] - 128)) % 360.0


def panorama(width: int, height: int, rotation: float, tint: tuple[int, int, int] = (0, 0, 0)) -> np.ndarray:
    """An equirectangular colour-wheel panorama (RGB) whose column ``u`` shows compass heading
    ``u/(width-1)·360 − rotation`` — the renderer's convention."""
    u = np.arange(width)
    headings = (u / (width - 1) * 360.0 - rotation) % 360.0
    row = heading_colour(headings)  # (W, 3)
    img = np.repeat(row[None], height, axis=0)
    lat = (np.arange(height) / (height - 1) - 0.5) * 180.0  # +90 = straight down
    sky = lat < -12
    ground = lat > 12
    img[sky] = img[sky] * 0.35 + np.array([150, 190, 255]) * 0.65
    img[ground] = img[ground] * 0.45 + np.array([40, 40, 40]) * 0.55
    d = np.abs(((headings + 180.0) % 360.0) - 180.0)  # angular distance to north
    tick = (d < 3.0)[None, :] & (lat < -30)[:, None]
    img[tick] = (20, 20, 20)
    img = img + np.asarray(tint, dtype=np.float64)
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _place(name: str, at: LatLng) -> dict:
    return {"name": name, "geocode": list(at), "relocated_geocode": list(at), "place_id": name.lower().replace(" ", "_")}


def _milestone_block(i: int, landmark: str, distance_m: float, human_heading: int, heading: int) -> str:
    return (
        "{\n"
        f'"intersection_idx": "{i}",\n'
        f'"landmarks": "{landmark}",\n'
        f'"distance": "{int(round(distance_m))} meters",\n'
        f'"human_heading": "{human_heading}",\n'
        f'"to_next_intersection_heading": "{heading} ({compass_word(heading)})",\n'
        "}"
    )


@dataclass
class _Panos:
    origin: LatLng
    keys: dict[tuple[float, float], LatLng] = field(default_factory=dict)  # rounded metres → lat/lng

    def add(self, east: float, north: float) -> LatLng:
        k = (round(east * 2) / 2, round(north * 2) / 2)
        if k not in self.keys:
            self.keys[k] = offset_m(self.origin, east, north)
        return self.keys[k]


def route_record(route: ToyRoute, panos: _Panos, spacing_m: float) -> dict:
    """The route_infos.json entry for ``route``, adding its panoramas to ``panos``."""
    sx, sy = route.shift_m
    verts = [panos.add(e + sx, n + sy) for e, n in route.path_m]
    for (e0, n0), (e1, n1) in zip(route.path_m, route.path_m[1:], strict=False):
        length = math.hypot(e1 - e0, n1 - n0)
        steps = int(length // spacing_m)
        for s in range(1, steps + 1):
            f = s * spacing_m / length
            if length - s * spacing_m > 1.0:
                panos.add(e0 + (e1 - e0) * f + sx, n0 + (n1 - n0) * f + sy)
    offsets = list(route.raw_offsets_m) + [(0.0, 0.0)] * (len(verts) - 1 - len(route.raw_offsets_m))
    raw = []
    for v, (oe, on) in zip(verts[1:], offsets, strict=True):
        raw.append(offset_m(v, oe, on) if (oe or on) else v)
    blocks, landmark_list = [], []
    human = 0
    last = len(verts) - 2
    for i in range(len(verts) - 1):
        heading = int(bearing_deg(verts[i], verts[i + 1]))
        lm = route.landmarks[i]
        if i == last:
            if lm is None:
                raise ValueError("the last milestone must name the destination")
            text = f"The destination {lm[0]} is on your {lm[1]}"
        else:
            text = NO_LANDMARK if lm is None else f"{lm[0]} is on your {lm[1]}"
            landmark_list.append(None if lm is None else _place(lm[0], verts[i + 1]))
        blocks.append(_milestone_block(i, text, geodesic_m(verts[i], verts[i + 1]), human, heading))
        human = heading
    dest_name = route.landmarks[-1][0]
    return {
        "start_place": _place("Start", verts[0]),
        "dest_place": _place(dest_name, verts[-1]),
        "route_results": {
            "geocode_list": [list(g) for g in raw],
            "landmark_list": landmark_list,
            "polyline": "",
            "instructions": [],
            "distance_list": [geodesic_m(a, b) for a, b in zip(verts, verts[1:], strict=False)],
            "n_landmarks": sum(x is not None for x in landmark_list),
        },
        "init_heading": route.init_heading,
        "instruction": "",
        "milestone_info": "\n".join(blocks),
    }


def write_dataset(
    out: str | Path,
    routes: list[ToyRoute] | None = None,
    *,
    origin: LatLng = DEFAULT_ORIGIN,
    pano_size: tuple[int, int] = (128, 64),
    spacing_m: float = 10.0,
    seed: int = 0,
    tint: tuple[int, int, int] = (0, 0, 0),
    overwrite: bool = False,
) -> Path:
    """Write a V-IRL-format dataset folder (atomically: temp folder, then rename) and return its path.

    ``tint`` shifts every panorama's colours (a cheap "other city" look for visual-OOD tests).
    """
    out = Path(out)
    routes = golden_routes() if routes is None else routes
    if out.exists():
        if not overwrite:
            raise FileExistsError(f"{out} exists; pass overwrite=True to replace it")
        shutil.rmtree(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        panos = _Panos(origin)
        records = [route_record(r, panos, spacing_m) for r in routes]
        (tmp / ROUTE_INFOS).write_text(json.dumps([records, len(records)], indent=1), encoding="utf-8")
        rng = random.Random(seed)
        mapping: dict[LatLng, str] = {}
        views = tmp / STREET_VIEWS
        views.mkdir()
        for i, key in enumerate(panos.keys.values()):
            pano_id = f"toy{i:04d}"
            mapping[key] = pano_id
            rotation = rng.uniform(-180.0, 180.0)
            rgb = panorama(pano_size[0], pano_size[1], rotation, tint)
            cv2.imwrite(str(views / f"{pano_id}.jpg"), cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR),
                        [cv2.IMWRITE_JPEG_QUALITY, 95])
            (views / f"{pano_id}.metadata.json").write_text(json.dumps({"rotation": rotation, "pano_id": pano_id}))
        with open(tmp / PANO_MAPPING, "wb") as f:
            pickle.dump(mapping, f)
        tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out
