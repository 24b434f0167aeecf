"""Write a generated city as a V-IRL dataset folder, plus its manifest.

Layout (the real ``nyc_1k_routes/`` layout, ``spec/citygen.md``)::

    route_infos.json              [route_list, n_destinations]
    gps_pano_mapping.pkl          {(lat, lng): pano_id}  (a plain pickle of dict/tuple/float/str)
    street_views/<pano>.jpg       equirectangular panoramas (2:1)
    street_views/<pano>.metadata.json   {"rotation": <north rotation, degrees>, ...}
    city.json                     manifest: style, seed, generator version, route statistics, graph, places
    contact_sheet.png             (written by the ``finish`` hook of ``spatialrl.envs.virl.city``)

Everything is written into a temporary sibling folder that is renamed into place at the end, so a
crash never leaves a half-written dataset; an existing folder is only replaced with ``force``.
Only the panoramas that routes pass through are rendered (relocating any rail point finds the same
pano as it would among all of the city's panos: the nearest one always lies on the route).

The world layer knows the V-IRL *file format* but not the V-IRL env: checking the written folder with
the env's own loader and drawing the contact sheet happen in :func:`spatialrl.envs.virl.city.make_city`,
which passes them in as ``finish`` (run on the temporary folder, before it is renamed into place).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from spatialrl.errors import DataError
from spatialrl.io import atomic_write_bytes, atomic_write_json, atomic_write_text
from spatialrl.worlds.city.geometry import build_meshes
from spatialrl.worlds.city.panorama import PanoramaRenderer, rotation_deg
from spatialrl.worlds.city.routes import (
    MILESTONE_SHARES,
    START_DISTANCE,
    Route,
    RouteSampler,
    route_record,
)
from spatialrl.worlds.city.visibility import MIN_SIGN_AREA_PX, SignVisibility
from spatialrl.worlds.city.world import STAGE_ROTATION, STAGE_ROUTES, City, build_city, stage_rng

GENERATOR_VERSION = "1.0.0"
JPEG_QUALITY = 90
DEFAULT_PANO_WIDTH = 2048
TINY_PANO_WIDTH = 512
TINY_ROUTES = 20


@dataclass(frozen=True)
class CityOptions:
    style: str
    routes: int
    seed: int
    tiny: bool = False
    pano_width: int | None = None  # default 2048, or 512 with tiny
    jpeg_quality: int = JPEG_QUALITY
    # Called with the written folder before the manifest (the V-IRL check and contact sheet; timed as check_s).
    finish: Callable[[Path], None] | None = None

    @property
    def width(self) -> int:
        return self.pano_width or (TINY_PANO_WIDTH if self.tiny else DEFAULT_PANO_WIDTH)


def pano_id(city: City, pano: int) -> str:
    return f"{city.style.name}-{city.seed}-{pano:05d}"


def place_id(city: City, place: int) -> str:
    return f"{city.style.name}-{city.seed}-place-{place:04d}"


def _stats(values: list[float]) -> dict[str, float]:
    a = np.asarray(values, dtype=np.float64)
    if a.size == 0:
        return {}
    q = np.percentile(a, [0, 25, 50, 75, 100])
    return {"min": round(float(q[0]), 1), "p25": round(float(q[1]), 1), "median": round(float(q[2]), 1),
            "mean": round(float(a.mean()), 1), "p75": round(float(q[3]), 1), "max": round(float(q[4]), 1)}


def route_statistics(routes: list[Route]) -> dict[str, Any]:
    """Milestones-per-route histogram, route length and start-destination distance (metres)."""
    hist = Counter(len(r.milestones) for r in routes)
    legs = [m.landmark is not None for r in routes for m in r.milestones[:-1]]
    return {
        "count": len(routes),
        "milestones_histogram": {str(k): hist.get(k, 0) for k in sorted(MILESTONE_SHARES)},
        "milestones_target_shares": {str(k): v for k, v in MILESTONE_SHARES.items()},
        "route_length_m": _stats([r.length for r in routes]),
        "start_dest_distance_m": _stats([float(np.linalg.norm(r.start.position - r.dest.position)) for r in routes]),
        "start_dest_range_m": list(START_DISTANCE),
        "intersection_landmark_share": round(float(np.mean(legs)), 3) if legs else None,
        "destinations": len({r.dest.index for r in routes}),
    }


def make_city(style: str, routes: int, seed: int, out: str | Path, *, tiny: bool = False, force: bool = False,
              pano_width: int | None = None, jpeg_quality: int = JPEG_QUALITY,
              progress: bool = True, device: int | None = None, finish: Callable[[Path], None] | None = None) -> Path:
    """Generate a city and write it as a V-IRL dataset at ``out``; returns the folder.

    ``finish(folder)`` runs on the written folder before the manifest and the rename (an error there
    leaves nothing behind); :func:`spatialrl.envs.virl.city.make_city` passes the V-IRL dataset check and
    the contact sheet. Raises ``FileExistsError`` if ``out`` exists and ``force`` is false (before any work)."""
    opts = CityOptions(style, int(routes), int(seed), tiny, pano_width, jpeg_quality, finish)
    if opts.routes < 1:
        raise ValueError(f"--routes must be >= 1, got {opts.routes}")
    if opts.width < 64 or opts.width % 4:
        raise ValueError(f"panorama width must be a multiple of 4 and >= 64, got {opts.width}")
    if not 1 <= opts.jpeg_quality <= 100:
        raise ValueError(f"jpeg quality must be in 1..100, got {opts.jpeg_quality}")
    out = Path(out)
    if out.exists() and not force:
        raise FileExistsError(f"{out} already exists; pass --overwrite to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    try:
        _write(opts, tmp, progress, device)
        _readable(tmp)
        _swap_into_place(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _readable(root: Path) -> None:
    """Give files the usual permissions (the atomic-write helpers create them owner-only)."""
    umask = os.umask(0)
    os.umask(umask)
    for f in root.rglob("*"):
        if f.is_file():
            f.chmod(0o666 & ~umask)


def _swap_into_place(tmp: Path, out: Path) -> None:
    old = None
    if out.exists():
        old = out.parent / f".{out.name}.old-{os.getpid()}"
        os.replace(out, old)
    os.replace(tmp, out)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


class _Progress:
    """A rich progress bar, or nothing."""

    def __init__(self, enabled: bool):
        self.bar = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

            self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeRemainingColumn(), transient=False)
            self.bar.start()

    def task(self, what: str, total: int):
        return None if self.bar is None else self.bar.add_task(what, total=total)

    def update(self, task, completed: int | None = None, advance: int = 0) -> None:
        if self.bar is not None and task is not None:
            if completed is not None:
                self.bar.update(task, completed=completed)
            else:
                self.bar.advance(task, advance)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _write(opts: CityOptions, root: Path, progress: bool, device: int | None) -> None:
    timing: dict[str, float] = {}
    t0 = time.perf_counter()
    bar = _Progress(progress)
    try:
        city = build_city(opts.style, opts.seed, opts.tiny)
        meshes = build_meshes(city)
        timing["world_s"] = time.perf_counter() - t0
        with PanoramaRenderer(city, meshes, device=device) as pr:
            t = time.perf_counter()
            vis = SignVisibility(city, meshes.signs, confirm=pr.sign_pixels)
            sampler = RouteSampler(city.graph, city.panos, city.places, city.place_pano, vis.visible)
            task = bar.task("routes", opts.routes)
            routes, sampling = sampler.sample(opts.routes, stage_rng(opts.seed, STAGE_ROUTES),
                                              progress=lambda n: bar.update(task, completed=n))
            if not routes:
                raise DataError(f"city {opts.style} seed {opts.seed}: no valid route could be sampled")
            timing["routes_s"] = time.perf_counter() - t
            used = sorted({p for r in routes for p in r.path})
            shifts = stage_rng(opts.seed, STAGE_ROTATION).integers(0, opts.width, size=len(city.panos))
            t = time.perf_counter()
            _write_panoramas(pr, city, used, shifts, opts, root / "street_views", bar)
            timing["panoramas_s"] = time.perf_counter() - t
            device_name = pr.device_name
        records = [route_record(r, k, city.graph, city.panos, city.frame, city.street_of_place,
                                lambda p: place_id(city, p.index)) for k, r in enumerate(routes)]
        n_dest = len({r.dest.index for r in routes})
        atomic_write_text(root / "route_infos.json", json.dumps([records, n_dest], indent=2, ensure_ascii=False) + "\n")
        geo = city.frame.to_latlng(city.panos.xz)
        mapping = {(float(geo[p, 0]), float(geo[p, 1])): pano_id(city, p) for p in used}
        if len(mapping) != len(used):
            raise DataError("two panoramas share a (lat, lng) key; the generator's pano spacing is broken")
        atomic_write_bytes(root / "gps_pano_mapping.pkl", pickle.dumps(mapping, protocol=4))
        if opts.finish is not None:
            t = time.perf_counter()
            opts.finish(root)
            timing["check_s"] = time.perf_counter() - t
        timing["total_s"] = time.perf_counter() - t0
        manifest = {
            "generator": "spatialrl.worlds.city",
            "generator_version": GENERATOR_VERSION,
            "style": city.style.name,
            "style_summary": city.style.summary,
            "seed": opts.seed,
            "tiny": opts.tiny,
            "origin_latlng": list(city.style.origin),
            "routes": {**route_statistics(routes), "sampling": sampling},
            "landmarks": {
                "radius_m": 18.0,
                "min_sign_area_px_in_640_view": MIN_SIGN_AREA_PX,
                "check": "geometric projection of the sign quads, then rendered instance ids of the 4 views",
            },
            "panoramas": {
                "count": len(used), "width": opts.width, "height": opts.width // 2, "format": "jpg",
                "jpeg_quality": opts.jpeg_quality, "camera_height_m": 2.5, "city_panos": len(city.panos),
                "convention": "heading h at column fraction (h + rotation) / 360; rotation whole columns",
            },
            "city": {"lots": len(city.lots), "places": len(city.places), "triangles": meshes.n_triangles,
                     "textures": len(meshes.textures), "render_device": device_name},
            "street_graph": city.graph.to_json(city.frame),
            "places": [p.to_json(city.frame.to_latlng(p.position)[0].tolist(), city.street_of_place(p))
                       for p in city.places],
            "timing_s": {k: round(v, 2) for k, v in timing.items()},
        }
        atomic_write_json(root / "city.json", manifest)
    finally:
        bar.close()


def _write_panoramas(pr: PanoramaRenderer, city: City, used: list[int], shifts: np.ndarray, opts: CityOptions,
                     folder: Path, bar: _Progress) -> None:
    """Render, encode and write the panoramas; JPEG encoding and file writes overlap rendering."""
    folder.mkdir(parents=True, exist_ok=True)
    geo = city.frame.to_latlng(city.panos.xz)
    task = bar.task("panoramas", len(used))
    params = [cv2.IMWRITE_JPEG_QUALITY, opts.jpeg_quality]

    def save(pid: str, rgb: np.ndarray, meta: dict) -> None:
        ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), params)
        if not ok:
            raise OSError(f"JPEG encoding failed for {pid}")
        (folder / f"{pid}.jpg").write_bytes(buf.tobytes())
        (folder / f"{pid}.metadata.json").write_text(json.dumps(meta) + "\n", encoding="utf-8")

    pending: list[Future] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        for p in pr.order(used):
            pid = pano_id(city, p)
            rgb = pr.panorama(p, opts.width, int(shifts[p]))
            meta = {"pano_id": pid, "rotation": rotation_deg(int(shifts[p]), opts.width),
                    "lat": float(geo[p, 0]), "lng": float(geo[p, 1]),
                    "elevation_m": round(city.camera_position(p)[1], 2), "generator": "spatialrl.worlds.city"}
            pending.append(pool.submit(save, pid, rgb, meta))
            if len(pending) > 8:
                pending.pop(0).result()
            bar.update(task, advance=1)
        for f in pending:
            f.result()
