"""Procedural houses for TVR: single rooms and 2-3-room houses, furnished, on a 0.25 m walk grid.

``generate_house(seed, kind, room_type)`` is deterministic: the same arguments give the same JSON
description, the same meshes and therefore the same rendered pixels. A house carries everything the
TVR env needs: ``reachable`` cells (cell (ix, iz) is the world point (ix*0.25, iz*0.25)), rooms with
their cells, the eye height, per-object instance ids (to count visible objects in a view) and
meshes/textures ready for ``Renderer.upload``.

Structure (walls, floors, ceilings, door frames) is instance 0; every furniture piece and item has
its own id, also the parts that are objects in AI2-THOR too (pillows, chairs, books, fruit, TVs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from spatialrl.render import Mesh
from spatialrl.render.primitives import MeshBuilder
from spatialrl.worlds import textures as tx
from spatialrl.worlds.furnish import Furnisher
from spatialrl.worlds.layout import (
    GRID,
    ROOM_TYPES,
    Door,
    Plan,
    Rect,
    WalkGrid,
    plan_multi,
    plan_single,
    wall_boxes,
)
from spatialrl.worlds.palette import WOOD_TINTS, Materials, object_materials

__all__ = ["GRID", "ROOM_TYPES", "House", "ObjectInfo", "Room", "count_visible_objects", "generate_house"]

GENERATOR_VERSION = 1
EYE_HEIGHT = 1.5
KINDS = ("single", "multi")


@dataclass(frozen=True)
class Room:
    name: str
    room_type: str
    x0: float
    z0: float
    x1: float
    z1: float
    cells: frozenset[tuple[int, int]]

    def contains_point(self, x: float, z: float) -> bool:
        return self.x0 - 1e-9 <= x <= self.x1 + 1e-9 and self.z0 - 1e-9 <= z <= self.z1 + 1e-9

    @property
    def centroid(self) -> tuple[float, float]:
        """Mean position of the room's reachable cells (TVR aims target views at it)."""
        if not self.cells:
            return (self.x0 + self.x1) / 2, (self.z0 + self.z1) / 2
        a = np.array(sorted(self.cells), dtype=np.float64) * GRID
        return float(a[:, 0].mean()), float(a[:, 1].mean())


@dataclass(frozen=True)
class ObjectInfo:
    """One object instance: id as in ``render_ids``, category, room name, bounding-box centre (x, y, z)
    and size (w along x, h along y, d along z), metres."""

    instance_id: int
    category: str
    room: str
    center: tuple[float, float, float]
    size: tuple[float, float, float]


@dataclass
class House:
    house_id: str
    seed: int
    kind: str
    rooms: list[Room]
    reachable: frozenset[tuple[int, int]]
    eye_height: float
    objects: list[ObjectInfo]
    meshes: list[Mesh] = field(repr=False)
    textures: list[np.ndarray] = field(repr=False)
    wall_height: float = 2.7
    doors: list[Door] = field(default_factory=list)
    walls: list[Rect] = field(default_factory=list, repr=False)  # wall footprints, for floor plans

    def cell_to_world(self, cell: tuple[int, int]) -> tuple[float, float]:
        return cell[0] * GRID, cell[1] * GRID

    def world_to_cell(self, x: float, z: float) -> tuple[int, int]:
        return int(round(x / GRID)), int(round(z / GRID))

    def room_of(self, cell: tuple[int, int]) -> Room | None:
        """The room whose reachable cells include ``cell``; for other cells, the first room whose
        rectangle contains the point (doorway cells on a shared wall line count for the first room)."""
        for r in self.rooms:
            if cell in r.cells:
                return r
        x, z = self.cell_to_world(cell)
        for r in self.rooms:
            if r.contains_point(x, z):
                return r
        return None

    @property
    def bounds(self) -> tuple[float, float, float, float]:
        """(x0, z0, x1, z1) of all rooms."""
        return (min(r.x0 for r in self.rooms), min(r.z0 for r in self.rooms),
                max(r.x1 for r in self.rooms), max(r.z1 for r in self.rooms))

    def to_json(self) -> dict[str, Any]:
        """JSON-able description (no meshes) for manifests; identical for identical houses."""
        return {
            "house_id": self.house_id,
            "seed": self.seed,
            "kind": self.kind,
            "generator_version": GENERATOR_VERSION,
            "grid": GRID,
            "eye_height": self.eye_height,
            "wall_height": self.wall_height,
            "rooms": [{"name": r.name, "room_type": r.room_type, "x0": r.x0, "z0": r.z0, "x1": r.x1, "z1": r.z1,
                       "cells": [list(c) for c in sorted(r.cells)]} for r in self.rooms],
            "doors": [{"rooms": [self.rooms[d.a].name, self.rooms[d.b].name], "along_z": d.along_z,
                       "line": d.line, "lo": d.lo, "hi": d.hi} for d in self.doors],
            "reachable": [list(c) for c in sorted(self.reachable)],
            "objects": [{"instance_id": o.instance_id, "category": o.category, "room": o.room,
                         "center": list(o.center), "size": list(o.size)} for o in self.objects],
            "n_triangles": int(sum(m.n_triangles for m in self.meshes)),
            "n_textures": len(self.textures),
        }


def generate_house(seed: int, kind: str, room_type: str | None = None) -> House:
    """Build a house. ``kind`` "single" = one room of ``room_type`` (random if None); "multi" = 2-3
    rooms of distinct types joined by doorways (``room_type``, if given, is the first room's type)."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    if room_type is not None and room_type not in ROOM_TYPES:
        raise ValueError(f"room_type must be one of {ROOM_TYPES} or None, got {room_type!r}")
    seed = int(seed)
    rng = np.random.default_rng(seed)
    if kind == "single":
        types = [room_type or ROOM_TYPES[int(rng.integers(len(ROOM_TYPES)))]]
    else:
        n = int(rng.integers(2, 4))
        rest = [t for t in ROOM_TYPES if t != room_type]
        picked = [rest[i] for i in rng.permutation(len(rest))]
        types = ([room_type] if room_type else []) + picked
        types = types[:n]
    plan = plan_single(rng, types[0]) if kind == "single" else plan_multi(rng, types)
    walls = wall_boxes(plan)
    grid = WalkGrid(plan, walls)
    mat = object_materials(rng)
    b = MeshBuilder()
    _structure(b, rng, mat, plan, walls)
    furnisher = Furnisher(plan, grid, b, rng, mat)
    furnisher.furnish()
    meshes = b.meshes()

    reachable_mask = grid.largest()
    ix, iz = np.nonzero(reachable_mask)
    reachable = frozenset(zip(ix.tolist(), iz.tolist(), strict=True))
    rooms: list[Room] = []
    taken: set[tuple[int, int]] = set()
    for name, rtype, r in plan.rooms:
        cells = frozenset(c for c in reachable if c not in taken
                          and r.x0 - 1e-9 <= c[0] * GRID <= r.x1 + 1e-9 and r.z0 - 1e-9 <= c[1] * GRID <= r.z1 + 1e-9)
        taken |= cells
        rooms.append(Room(name, rtype, r.x0, r.z0, r.x1, r.z1, cells))
    objects = _object_infos(meshes, furnisher.objects)
    suffix = f"{room_type}-" if room_type else ""
    return House(
        house_id=f"{kind}-{suffix}{seed}", seed=seed, kind=kind, rooms=rooms, reachable=reachable,
        eye_height=EYE_HEIGHT, objects=objects, meshes=meshes, textures=mat.textures, wall_height=plan.height,
        doors=list(plan.doors), walls=[w.rect for w in walls if w.kind == "wall"],
    )


def count_visible_objects(ids: np.ndarray, min_pixels: int = 20) -> int:
    """Number of distinct non-zero instance ids covering at least ``min_pixels`` pixels of one frame."""
    a = np.asarray(ids)
    if a.ndim != 2:
        raise ValueError(f"ids must be one (H, W) instance-id frame, got shape {a.shape}")
    if min_pixels < 1:
        raise ValueError(f"min_pixels must be >= 1, got {min_pixels}")
    values, counts = np.unique(a[a != 0], return_counts=True)
    return int((counts >= min_pixels).sum())


# ---------------------------------------------------------------------------- structure

WALL_COLORS = ((0.93, 0.9, 0.82), (0.82, 0.88, 0.92), (0.85, 0.92, 0.84), (0.95, 0.88, 0.85), (0.9, 0.9, 0.9),
               (0.95, 0.93, 0.75), (0.8, 0.75, 0.7), (0.88, 0.84, 0.93))
TILE_COLORS = ((0.92, 0.92, 0.9), (0.7, 0.72, 0.75), (0.76, 0.45, 0.32), (0.55, 0.68, 0.82), (0.3, 0.32, 0.35),
               (0.85, 0.8, 0.68))
CARPET_COLORS = ((0.72, 0.66, 0.56), (0.55, 0.58, 0.62), (0.45, 0.52, 0.68), (0.6, 0.5, 0.55))


def _pick(rng: np.random.Generator, options: tuple) -> Any:
    return options[int(rng.integers(len(options)))]


def _room_textures(rng: np.random.Generator, mat: Materials, room_type: str) -> dict[str, Any]:
    """Floor and wall looks of a room: (texture id or -1, colour, metres per texture repeat).

    Painted walls and ceilings are untextured colours (a nearly flat texture would look the same
    and costs a texture fetch per pixel); floors, tiles and wallpapers are textured."""
    wall_c = _pick(rng, WALL_COLORS)
    white = (1.0, 1.0, 1.0)
    if room_type == "bathroom":
        floor = (mat.add(tx.tiles(rng, _pick(rng, TILE_COLORS), (0.6, 0.6, 0.62), n=int(rng.integers(4, 7)))), white, 1.0)
        wall = (mat.add(tx.tiles(rng, _pick(rng, TILE_COLORS[:4] + WALL_COLORS[:3]), (0.85, 0.85, 0.85), n=4)), white, 0.6)
    elif room_type == "kitchen":
        a, c = _pick(rng, TILE_COLORS), _pick(rng, TILE_COLORS)
        img = tx.checker(a, c, n=4) if rng.random() < 0.4 else tx.tiles(rng, a, (0.4, 0.4, 0.42), n=3)
        floor = (mat.add(img), white, 1.2)
        wall = (-1, wall_c, 1.0)
    else:
        light, dark = _pick(rng, WOOD_TINTS)
        if room_type == "bedroom" and rng.random() < 0.4:
            floor = (mat.add(tx.plain(rng, _pick(rng, CARPET_COLORS), amount=0.25)), white, 1.0)
        else:
            floor = (mat.add(tx.wood(rng, light, dark, planks=5)), white, 1.0)
        if rng.random() < 0.45:
            c2 = tuple(v * 0.9 for v in wall_c)
            img = tx.stripes(rng, wall_c, c2, n=int(rng.integers(4, 9))) if rng.random() < 0.6 else tx.dots(rng, wall_c, c2, n=8)
            wall = (mat.add(img), white, 1.0)
        else:
            wall = (-1, wall_c, 1.0)
    ceiling = (-1, (0.96, 0.96, 0.95), 1.0)
    return {"floor": floor, "wall": wall, "ceiling": ceiling}


def _structure(b: MeshBuilder, rng: np.random.Generator, mat: Materials, plan: Plan, walls: list) -> None:
    """Walls, door frames, floors and ceilings, each in its room's zone. Walls are added before
    floors and ceilings so, within a zone, they are drawn first and hide what lies behind them."""
    h = plan.height
    looks = [_room_textures(rng, mat, rtype) for _, rtype, _ in plan.rooms]
    trim = _pick(rng, ((0.96, 0.96, 0.95), (0.45, 0.3, 0.18), (0.3, 0.3, 0.32)))
    for w in walls:
        r = w.rect
        center = ((r.x0 + r.x1) / 2, (w.y0 + w.y1) / 2, (r.z0 + r.z1) / 2)
        size = (r.width, w.y1 - w.y0, r.depth)
        with b.zone(w.room):
            if w.kind == "trim":
                b.box(center, size, trim)
            else:
                tex, color, tile = looks[w.room]["wall"]
                b.box(center, size, color, texture=tex, tile=tile)
                if w.kind == "wall":  # skirting board along the room-facing side
                    _skirting(b, w, plan, trim)
    for k, ((_, _, r), look) in enumerate(zip(plan.rooms, looks, strict=True)):
        (cx, cz), size = r.center, (r.width, 0.05, r.depth)
        with b.zone(k):
            for y, part in ((-0.025, "floor"), (h + 0.025, "ceiling")):
                tex, color, tile = look[part]
                b.box((cx, y, cz), size, color, texture=tex, tile=tile)


def _skirting(b: MeshBuilder, w, plan: Plan, color) -> None:
    r = w.rect
    room = plan.rooms[w.room][2]
    t, hgt = 0.012, 0.08
    if r.depth > r.width:  # wall runs along z: room is on the side away from the room edge
        x = r.x1 + t / 2 if abs(r.x0 - room.x0) < 1e-9 else r.x0 - t / 2
        b.box((x, hgt / 2, (r.z0 + r.z1) / 2), (t, hgt, r.depth), color)
    else:
        z = r.z1 + t / 2 if abs(r.z0 - room.z0) < 1e-9 else r.z0 - t / 2
        b.box(((r.x0 + r.x1) / 2, hgt / 2, z), (r.width, hgt, t), color)


def _object_infos(meshes: list[Mesh], registry: list[tuple[int, str, str]]) -> list[ObjectInfo]:
    lo: dict[int, np.ndarray] = {}
    hi: dict[int, np.ndarray] = {}
    for m in meshes:
        if m.instance_id == 0 or not len(m.positions):
            continue
        mn, mx = m.positions.min(0).astype(np.float64), m.positions.max(0).astype(np.float64)
        k = m.instance_id
        lo[k] = np.minimum(lo[k], mn) if k in lo else mn
        hi[k] = np.maximum(hi[k], mx) if k in hi else mx
    out = []
    for iid, category, room in registry:
        if iid not in lo:
            raise RuntimeError(f"object {iid} ({category}) has no geometry")
        c = (lo[iid] + hi[iid]) / 2
        s = hi[iid] - lo[iid]
        out.append(ObjectInfo(iid, category, room, tuple(round(float(v), 4) for v in c),
                              tuple(round(float(v), 4) for v in s)))
    return out
