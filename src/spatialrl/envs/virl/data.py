"""The V-IRL dataset format: the one definition of what `route_infos.json`, `gps_pano_mapping.pkl` and
`street_views/` hold, shared by the env, `spatialrl virl check-data` and the city generator.

A dataset folder (the real `nyc_1k_routes/`, `VLN_mini/`, or a generated city)::

    route_infos.json                  [route_list, n]  (only element 0 is used)
    gps_pano_mapping.pkl              {(lat, lng): pano_id}
    street_views/<pano>.jpg           equirectangular panorama
    street_views/<pano>.metadata.json {"rotation": <north rotation, degrees>, ...}

Parsing here is exact (the reference's quirks included, e.g. how `milestone_info` is split) and never
executes anything from the user's files: the pickle goes through an unpickler that admits plain data
only. Problems are collected as :class:`Problem` values so `check-data` can list them all at once;
:func:`spatialrl.envs.virl.validate.load_dataset` turns them into one :class:`DataError`.
"""

from __future__ import annotations

import builtins
import io
import math
import pickle
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from spatialrl.envs.virl.geo import COMPASS_WORDS, LatLng, haversine_m
from spatialrl.errors import DataError
from spatialrl.io import read_json

ROUTE_INFOS = "route_infos.json"
PANO_MAPPING = "gps_pano_mapping.pkl"
STREET_VIEWS = "street_views"
MAPPING_RADIUS_M = 20.0  # relocation radius (the reference's OFFLINE.MAPPING_RADIUS)

# Keys a milestone block may carry (the V-IRL template). An unknown key is almost always a typo that
# would silently fall back to a default (e.g. "landmark" → "No landmark nearby"), so it is an error.
MILESTONE_KEYS = ("intersection_idx", "landmarks", "distance", "human_heading", "to_next_intersection_heading")
NO_LANDMARK = "No landmark nearby"  # the data's singular wording (the rail's own start text is plural)


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a dataset: where (file, route, point) and what."""

    where: str
    message: str
    route: int | None = None
    point: int | None = None

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"


@dataclass(frozen=True)
class Milestone:
    """One parsed `milestone_info` block: the heading to the next intersection and the landmark text."""

    heading_deg: int  # int part of "177 (south)"
    direction: str  # the word in parentheses, e.g. "south"
    landmark: str  # "X is on your Y", "No landmark nearby" or "The destination X is on your Y"
    fields: dict[str, str]


@dataclass(frozen=True)
class Route:
    """The fields of one route that the env reads (plus its position in the file)."""

    index: int
    start: LatLng  # start_place.relocated_geocode
    geocodes: tuple[LatLng, ...]  # route_results.geocode_list, one per milestone
    milestones: tuple[Milestone, ...]
    init_heading: float  # 0 (or missing) means: draw a random start heading
    dest_name: str


def parse_milestone_info(text: str) -> list[dict[str, str]]:
    """Split a `milestone_info` string into dicts exactly as the reference does.

    Split on ``}``, strip, drop the leading ``{``; per non-empty line ``rstrip(',')``, split on the first
    ``:``, strip whitespace and quotes from key and value. A ``}`` inside a landmark name breaks the
    block structure (as in the reference); validation catches it through the block count.
    Raises ``ValueError`` on a line without ``:``.
    """
    out: list[dict[str, str]] = []
    for block in text.split("}"):
        block = block.strip().lstrip("{")
        if not block.strip():
            continue
        d: dict[str, str] = {}
        for line in block.splitlines():
            line = line.strip()
            if not line:
                continue
            line = line.rstrip(",")
            if ":" not in line:
                raise ValueError(f"line {line!r} has no ':'")
            key, value = line.split(":", 1)
            d[key.strip().strip("\"'")] = value.strip().strip("\"'")
        out.append(d)
    return out


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _latlng(x: Any) -> LatLng | None:
    if isinstance(x, list | tuple) and len(x) == 2 and all(_is_number(v) for v in x):
        lat, lng = float(x[0]), float(x[1])
        if -90.0 <= lat <= 90.0 and -180.0 <= lng <= 180.0:
            return (x[0], x[1])  # keep the exact values (exact-key hits in the pano mapping)
    return None


def parse_milestone(d: dict[str, str]) -> Milestone:
    """Read one milestone dict; ``ValueError`` names the bad field."""
    unknown = [k for k in d if k not in MILESTONE_KEYS]
    if unknown:
        raise ValueError(f"unknown key(s) {unknown}; known: {list(MILESTONE_KEYS)}")
    if "to_next_intersection_heading" not in d:
        raise ValueError("missing 'to_next_intersection_heading'")
    value = d["to_next_intersection_heading"]
    if "(" not in value or ")" not in value.split("(", 1)[1]:
        raise ValueError(f"to_next_intersection_heading {value!r} is not '<int> (<direction>)'")
    direction = value.split("(")[1].split(")")[0]
    try:
        deg = int(value.split("(")[0].strip())
    except ValueError:
        raise ValueError(f"to_next_intersection_heading {value!r}: the heading is not an integer") from None
    if direction not in COMPASS_WORDS:
        raise ValueError(f"to_next_intersection_heading {value!r}: direction must be one of {list(COMPASS_WORDS)}")
    return Milestone(heading_deg=deg, direction=direction, landmark=d.get("landmarks", NO_LANDMARK), fields=dict(d))


def parse_route(raw: Any, index: int, where: str = ROUTE_INFOS) -> tuple[Route | None, list[Problem]]:
    """Parse one route dict. Returns the route (None if unusable) and every problem found."""
    problems: list[Problem] = []

    def bad(msg: str, point: int | None = None) -> None:
        problems.append(Problem(f"{where}: route {index}", msg, route=index, point=point))

    if not isinstance(raw, dict):
        bad(f"is a {type(raw).__name__}, expected an object")
        return None, problems
    start_place = raw.get("start_place")
    start = _latlng(start_place.get("relocated_geocode")) if isinstance(start_place, dict) else None
    if start is None:
        bad("start_place.relocated_geocode is missing or not [lat, lng]")
    results = raw.get("route_results")
    geocodes: list[LatLng] = []
    if not isinstance(results, dict):
        bad("route_results is missing or not an object")
    else:
        glist = results.get("geocode_list")
        if not isinstance(glist, list) or not glist:
            bad("route_results.geocode_list is missing or empty")
        else:
            for j, g in enumerate(glist):
                p = _latlng(g)
                if p is None:
                    bad(f"route_results.geocode_list[{j}] = {g!r} is not [lat, lng]", point=j + 1)
                else:
                    geocodes.append(p)
        if not isinstance(results.get("landmark_list"), list):
            bad("route_results.landmark_list is missing or not a list")
    dest = raw.get("dest_place")
    if not isinstance(dest, dict):
        bad("dest_place is missing or not an object")
    heading = raw.get("init_heading", 0)
    if heading is None:
        heading = 0
    if not _is_number(heading):
        bad(f"init_heading {heading!r} is not a number")
        heading = 0
    milestones: list[Milestone] = []
    info = raw.get("milestone_info")
    if not isinstance(info, str):
        bad("milestone_info is missing or not a string")
    else:
        try:
            blocks = parse_milestone_info(info)
        except ValueError as e:
            bad(f"milestone_info: {e}")
            blocks = []
        for k, block in enumerate(blocks):
            try:
                milestones.append(parse_milestone(block))
            except ValueError as e:
                bad(f"milestone_info block {k}: {e}")
        if blocks and isinstance(results, dict) and isinstance(results.get("geocode_list"), list):
            n_geo = len(results["geocode_list"])
            if len(blocks) != n_geo:
                bad(
                    f"milestone_info has {len(blocks)} blocks but geocode_list has {n_geo} points "
                    "(one milestone per point; a '}' inside a landmark name splits a block)"
                )
        if not blocks:
            bad("milestone_info holds no milestone block")
    if problems or start is None:
        return None, problems
    name = dest.get("name") if isinstance(dest, dict) else None
    return (
        Route(
            index=index,
            start=start,
            geocodes=tuple(geocodes),
            milestones=tuple(milestones),
            init_heading=heading,
            dest_name=str(name) if name is not None else "",
        ),
        problems,
    )


class _PlainDataUnpickler(pickle.Unpickler):
    """Admits only dict/tuple/list/float/int/str: a pickle that names any other class (or a persistent
    id) is refused before anything from it runs."""

    _ALLOWED = frozenset({"dict", "tuple", "list", "float", "int", "str"})

    def __init__(self, f: io.BufferedIOBase, path: Path):
        super().__init__(f)
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in self._ALLOWED:
            return getattr(builtins, name)
        raise DataError(
            f"{self.path}: refusing to unpickle {module}.{name}; the pano mapping may hold only plain data "
            "(dict/tuple/list/float/int/str)"
        )

    def persistent_load(self, pid: Any) -> Any:
        raise DataError(f"{self.path}: refusing a pickle persistent id; only plain data is accepted")


def load_pano_mapping(path: str | Path) -> dict[LatLng, str]:
    """Load ``gps_pano_mapping.pkl`` ({(lat, lng): pano_id}) without executing code from it."""
    path = Path(path)
    if not path.is_file():
        raise DataError(f"{path}: missing (the {{(lat, lng): pano_id}} mapping of the dataset)")
    try:
        with open(path, "rb") as f:
            obj = _PlainDataUnpickler(f, path).load()
    except DataError:
        raise
    except Exception as e:  # truncated / not a pickle
        raise DataError(f"{path}: not a readable pickle ({type(e).__name__}: {e})") from None
    if not isinstance(obj, dict):
        raise DataError(f"{path}: holds a {type(obj).__name__}, expected a dict {{(lat, lng): pano_id}}")
    for k, v in obj.items():
        if _latlng(k) is None or not isinstance(k, tuple):
            raise DataError(f"{path}: key {k!r} is not a (lat, lng) tuple of numbers")
        if not isinstance(v, str) or not v or "/" in v or "\\" in v or v.startswith("."):
            raise DataError(f"{path}: value {v!r} of key {k!r} is not a pano id (a file name stem)")
    if not obj:
        raise DataError(f"{path}: the mapping is empty")
    return obj


class PanoIndex:
    """Geocode → pano lookups with the reference's relocation rule.

    Relocation: an exact key wins; otherwise the nearest key by haversine if closer than 20 m; otherwise
    nothing. Searching only the 3×3 grid cells (each ≥ 27 m) around the point gives the same answer as
    the reference's full scan, including ties (lowest key order wins in both).
    """

    CELL_DEG = 0.00025  # ≥ 27.6 m of latitude on the R = 6371 km sphere

    def __init__(self, mapping: dict[LatLng, str], radius_m: float = MAPPING_RADIUS_M):
        self.mapping = mapping
        self.radius_m = radius_m
        self.keys: list[LatLng] = list(mapping)
        arr = np.asarray(self.keys, dtype=np.float64)
        self.lats, self.lngs = arr[:, 0].copy(), arr[:, 1].copy()
        max_lat = min(89.0, float(np.max(np.abs(self.lats))) + 0.01)
        self.cell_lat = self.CELL_DEG
        self.cell_lng = self.CELL_DEG / max(math.cos(math.radians(max_lat)), 0.01)
        cells: dict[tuple[int, int], list[int]] = {}
        for i, (lat, lng) in enumerate(zip(self.lats, self.lngs, strict=True)):
            cells.setdefault(self._cell(lat, lng), []).append(i)
        self._cells = {c: np.asarray(ix, dtype=np.int64) for c, ix in cells.items()}
        self._relocated: dict[LatLng, LatLng | None] = {}

    def __len__(self) -> int:
        return len(self.keys)

    def _cell(self, lat: float, lng: float) -> tuple[int, int]:
        return (math.floor(lat / self.cell_lat), math.floor(lng / self.cell_lng))

    def pano_id(self, key: LatLng) -> str:
        return self.mapping[key]

    def relocate(self, geocode: LatLng) -> LatLng | None:
        """The mapping key for ``geocode`` (exact hit, else nearest within 20 m), or None."""
        g = (geocode[0], geocode[1])
        if g in self.mapping:
            return g
        if g in self._relocated:
            return self._relocated[g]
        ci, cj = self._cell(g[0], g[1])
        parts = [self._cells[c] for c in ((ci + a, cj + b) for a in (-1, 0, 1) for b in (-1, 0, 1)) if c in self._cells]
        found: LatLng | None = None
        if parts:
            idx = np.sort(np.concatenate(parts))
            d = haversine_m(g, self.lats[idx], self.lngs[idx])
            j = int(np.argmin(d))
            if d[j] < self.radius_m:
                found = self.keys[int(idx[j])]
        self._relocated[g] = found
        return found

    def nearest(self, geocode: LatLng) -> tuple[LatLng, float]:
        """The nearest key at any distance (full scan), for error messages."""
        d = haversine_m((geocode[0], geocode[1]), self.lats, self.lngs)
        j = int(np.argmin(d))
        return self.keys[j], float(d[j])


@dataclass
class VirlDataset:
    """A parsed dataset folder. Images are read lazily (see :mod:`spatialrl.envs.virl.pixels`)."""

    root: Path
    routes: list[Route]
    route_count_field: Any  # element [1] of route_infos.json (destinations processed; unused)
    panos: PanoIndex
    _rotations: dict[str, float] = field(default_factory=dict, repr=False)
    geometry: dict[int, Any] = field(default_factory=dict, repr=False)  # rail geometry cache (rail.py)

    @property
    def street_views(self) -> Path:
        return self.root / STREET_VIEWS

    def image_path(self, pano_id: str) -> Path:
        return self.street_views / f"{pano_id}.jpg"

    def metadata_path(self, pano_id: str) -> Path:
        return self.street_views / f"{pano_id}.metadata.json"

    def rotation(self, pano_id: str) -> float:
        """North rotation (degrees) of a panorama, from its ``.metadata.json``."""
        if pano_id not in self._rotations:
            self._rotations[pano_id] = read_rotation(self.metadata_path(pano_id))
        return self._rotations[pano_id]


def read_rotation(path: Path) -> float:
    """The ``rotation`` field of a ``<pano>.metadata.json``; DataError names the file when it is bad."""
    meta = read_json(path, "missing panorama metadata")
    if not isinstance(meta, dict) or not _is_number(meta.get("rotation")):
        raise DataError(f"{path}: needs a numeric 'rotation' (north rotation in degrees)")
    return float(meta["rotation"])


def read_routes(path: Path) -> tuple[list[Route], Any, list[Problem]]:
    """Parse ``route_infos.json``: every route that parses, element [1], and all problems."""
    top = read_json(path, "missing (the dataset's route list)")
    if not isinstance(top, list) or len(top) != 2 or not isinstance(top[0], list):
        raise DataError(f"{path}: expected a 2-element list [route_list, n]")
    if not top[0]:
        raise DataError(f"{path}: the route list is empty")
    routes: list[Route] = []
    problems: list[Problem] = []
    for i, raw in enumerate(top[0]):
        route, probs = parse_route(raw, i, where=path.name)
        problems += probs
        if route is not None:
            routes.append(route)
    return routes, top[1], problems


def read_dataset(root: str | Path) -> tuple[VirlDataset, list[Problem]]:
    """Read the two index files of a dataset folder (no image access). Unreadable files raise
    :class:`DataError`; per-route problems are returned so they can be listed together."""
    root = Path(root)
    if not root.is_dir():
        raise DataError(f"{root}: not a folder (expected a V-IRL dataset with {ROUTE_INFOS}, {PANO_MAPPING})")
    routes, n_field, problems = read_routes(root / ROUTE_INFOS)
    mapping = load_pano_mapping(root / PANO_MAPPING)
    return VirlDataset(root=root, routes=routes, route_count_field=n_field, panos=PanoIndex(mapping)), problems
