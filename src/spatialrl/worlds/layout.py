"""Floor plans: room rectangles, walls with doorways, and the walkable 0.25 m grid.

Geometry rules that make the grid come out right:
- room rectangles have corners on multiples of 0.25 m and are joined edge to edge;
- every room owns a 5 cm wall slab along each of its four sides, *inside* its rectangle, so two
  neighbouring rooms' slabs form a 10 cm wall centred on their shared line, and no wall ever pokes
  into another room;
- a cell centre 0.25 m from a room edge is then exactly ``AGENT_RADIUS`` = 0.2 m from the wall face
  and is walkable, and cells on the shared line inside a doorway join the two rooms.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

GRID = 0.25
AGENT_RADIUS = 0.2
HALF_WALL = 0.05
DOOR_HEIGHT = 2.05
TRIM = 0.07  # door-frame trim width; the trim also sticks out 1.5 cm from each wall face
_EPS = 1e-6

ROOM_TYPES = ("kitchen", "living_room", "bedroom", "bathroom")
# (width range, depth range) in metres, on the 0.25 m lattice; "roughly 3-6 m per side".
ROOM_SIZES = {
    "kitchen": ((3.0, 5.0), (3.0, 4.75)),
    "living_room": ((4.0, 6.0), (3.75, 6.0)),
    "bedroom": ((3.25, 5.0), (3.25, 5.0)),
    "bathroom": ((3.0, 4.0), (3.0, 3.75)),
}


@dataclass(frozen=True)
class Rect:
    """Axis-aligned rectangle on the floor (x0 <= x1, z0 <= z1), metres."""

    x0: float
    z0: float
    x1: float
    z1: float

    @property
    def width(self) -> float:
        return self.x1 - self.x0

    @property
    def depth(self) -> float:
        return self.z1 - self.z0

    @property
    def center(self) -> tuple[float, float]:
        return (self.x0 + self.x1) / 2, (self.z0 + self.z1) / 2

    def overlaps(self, other: Rect, margin: float = 0.0) -> bool:
        return (self.x0 < other.x1 + margin and other.x0 < self.x1 + margin
                and self.z0 < other.z1 + margin and other.z0 < self.z1 + margin)

    def shrunk(self, m: float) -> Rect:
        return Rect(self.x0 + m, self.z0 + m, self.x1 - m, self.z1 - m)

    def contains(self, other: Rect, tol: float = 1e-9) -> bool:
        return (other.x0 >= self.x0 - tol and other.x1 <= self.x1 + tol
                and other.z0 >= self.z0 - tol and other.z1 <= self.z1 + tol)

    def distance(self, px: np.ndarray, pz: np.ndarray) -> np.ndarray:
        """Euclidean distance from points to the rectangle (0 inside)."""
        dx = np.maximum(np.maximum(self.x0 - px, px - self.x1), 0.0)
        dz = np.maximum(np.maximum(self.z0 - pz, pz - self.z1), 0.0)
        return np.hypot(dx, dz)


@dataclass(frozen=True)
class Door:
    """A doorway in the wall on a shared line between rooms ``a`` and ``b``.

    ``along_z``: the wall runs along z at x = ``line`` (else along x at z = ``line``); the opening
    spans ``lo..hi`` along the wall."""

    a: int
    b: int
    along_z: bool
    line: float
    lo: float
    hi: float

    @property
    def width(self) -> float:
        return self.hi - self.lo


@dataclass(frozen=True)
class WallBox:
    """A box of structure: footprint, vertical extent, the room it faces, and what it is."""

    rect: Rect
    y0: float
    y1: float
    room: int
    kind: str  # "wall", "lintel", "trim"


@dataclass
class Plan:
    rooms: list[tuple[str, str, Rect]]  # (name, room_type, rect)
    doors: list[Door]
    height: float

    def side_segments(self, i: int) -> dict[str, list[tuple[float, float, bool]]]:
        """Per side of room i ('S','N','W','E'): (t0, t1, exterior) intervals along the side."""
        _, _, r = self.rooms[i]
        out = {}
        for side, (line, lo, hi, along_z) in _sides(r).items():
            shared = []
            for j, (_, _, o) in enumerate(self.rooms):
                if j == i:
                    continue
                for oside, (oline, olo, ohi, oz) in _sides(o).items():
                    if oz == along_z and abs(oline - line) < 1e-9 and _opposite(side) == oside:
                        a, b = max(lo, olo), min(hi, ohi)
                        if b - a > 1e-9:
                            shared.append((a, b))
            out[side] = _split(lo, hi, sorted(shared))
        return out


def _sides(r: Rect) -> dict[str, tuple[float, float, float, bool]]:
    """side -> (line coordinate, span lo, span hi, wall runs along z)."""
    return {"S": (r.z0, r.x0, r.x1, False), "N": (r.z1, r.x0, r.x1, False),
            "W": (r.x0, r.z0, r.z1, True), "E": (r.x1, r.z0, r.z1, True)}


def _opposite(side: str) -> str:
    return {"S": "N", "N": "S", "W": "E", "E": "W"}[side]


def _split(lo: float, hi: float, shared: list[tuple[float, float]]) -> list[tuple[float, float, bool]]:
    out, t = [], lo
    for a, b in shared:
        if a > t + 1e-9:
            out.append((t, a, True))
        out.append((a, b, False))
        t = b
    if hi > t + 1e-9:
        out.append((t, hi, True))
    return out


def _q(v: float) -> float:
    return round(v / GRID) * GRID


def _size(rng: np.random.Generator, room_type: str) -> tuple[float, float]:
    (w0, w1), (d0, d1) = ROOM_SIZES[room_type]
    return _q(rng.uniform(w0, w1)), _q(rng.uniform(d0, d1))


def plan_single(rng: np.random.Generator, room_type: str) -> Plan:
    w, d = _size(rng, room_type)
    height = _q(rng.uniform(2.5, 2.9) * 20) / 20
    return Plan([(room_type, room_type, Rect(0.0, 0.0, w, d))], [], height)


def plan_multi(rng: np.random.Generator, room_types: list[str]) -> Plan:
    """2-3 rooms: in a row (along x or z) or, for 3 rooms, an L; doors on every shared wall used."""
    n = len(room_types)
    sizes = [_size(rng, t) for t in room_types]
    shape = "row" if n == 2 or rng.random() < 0.5 else "L"
    along_x = bool(rng.random() < 0.5)
    rects: list[Rect] = []
    links: list[tuple[int, int]] = []
    if shape == "row":
        pos = 0.0
        for k, (w, d) in enumerate(sizes):
            rects.append(Rect(pos, 0.0, pos + w, d) if along_x else Rect(0.0, pos, d, pos + w))
            pos += w
            if k:
                links.append((k - 1, k))
    else:  # A at the corner, B beside A, C above A
        (wa, da), (wb, db), (wc, dc) = sizes
        wc = min(wc, wa)  # C sits on A only, so it never touches B
        rects = [Rect(0.0, 0.0, wa, da), Rect(wa, 0.0, wa + wb, db), Rect(0.0, da, wc, da + dc)]
        links = [(0, 1), (0, 2)]
    names = _names(room_types)
    height = _q(rng.uniform(2.5, 2.9) * 20) / 20
    plan = Plan([(names[k], room_types[k], rects[k]) for k in range(n)], [], height)
    for a, b in links:
        plan.doors.append(_door(rng, rects[a], rects[b], a, b))
    return plan


def _names(room_types: list[str]) -> list[str]:
    seen: dict[str, int] = {}
    out = []
    for t in room_types:
        seen[t] = seen.get(t, 0) + 1
        out.append(t if room_types.count(t) == 1 else f"{t}_{seen[t]}")
    return out


def _door(rng: np.random.Generator, ra: Rect, rb: Rect, a: int, b: int) -> Door:
    if abs(ra.x1 - rb.x0) < 1e-9:
        along_z, line, lo, hi = True, ra.x1, max(ra.z0, rb.z0), min(ra.z1, rb.z1)
    elif abs(ra.z1 - rb.z0) < 1e-9:
        along_z, line, lo, hi = False, ra.z1, max(ra.x0, rb.x0), min(ra.x1, rb.x1)
    else:
        raise ValueError(f"rooms {a} and {b} do not share a wall")
    width = 1.0 if rng.random() < 0.6 else 1.25
    starts = np.arange(lo + 0.5, hi - 0.5 - width + 1e-9, GRID)
    if len(starts) == 0:
        raise ValueError(f"shared wall of rooms {a} and {b} is too short for a {width} m door")
    g0 = float(starts[int(rng.integers(len(starts)))])
    return Door(a, b, along_z, line, g0, g0 + width)


def wall_boxes(plan: Plan) -> list[WallBox]:
    """All structure boxes except floors and ceilings: room-owned wall slabs, lintels and trims."""
    out: list[WallBox] = []
    h = plan.height
    for i, (_, _, r) in enumerate(plan.rooms):
        for side, (line, lo, hi, along_z) in _sides(r).items():
            gaps = sorted((d.lo, d.hi) for d in plan.doors if i in (d.a, d.b) and d.along_z == along_z
                          and abs(d.line - line) < 1e-9)
            inward = 1.0 if side in ("S", "W") else -1.0
            a, b = sorted((line, line + inward * HALF_WALL))
            t = lo
            for g0, g1 in gaps + [(hi, hi)]:
                if g0 > t + 1e-9:
                    out.append(WallBox(_box(along_z, a, b, t, g0), 0.0, h, i, "wall"))
                if g1 > g0:
                    out.append(WallBox(_box(along_z, a, b, g0, g1), DOOR_HEIGHT, h, i, "lintel"))
                t = g1
    for d in plan.doors:  # frames: two jambs and a head, through the wall, shared by both rooms
        a, b = d.line - HALF_WALL - 0.015, d.line + HALF_WALL + 0.015
        out.append(WallBox(_box(d.along_z, a, b, d.lo - TRIM, d.lo + 0.01), 0.0, DOOR_HEIGHT + TRIM, d.a, "trim"))
        out.append(WallBox(_box(d.along_z, a, b, d.hi - 0.01, d.hi + TRIM), 0.0, DOOR_HEIGHT + TRIM, d.a, "trim"))
        out.append(WallBox(_box(d.along_z, a, b, d.lo - TRIM, d.hi + TRIM), DOOR_HEIGHT, DOOR_HEIGHT + TRIM, d.a,
                           "trim"))
    return out


def _box(along_z: bool, a: float, b: float, t0: float, t1: float) -> Rect:
    return Rect(a, t0, b, t1) if along_z else Rect(t0, a, t1, b)


class WalkGrid:
    """Candidate cells of a plan and which of them keep the agent radius clear of obstacles."""

    def __init__(self, plan: Plan, walls: list[WallBox]):
        xs = [r.x1 for _, _, r in plan.rooms]
        zs = [r.z1 for _, _, r in plan.rooms]
        self.nx, self.nz = int(round(max(xs) / GRID)) + 1, int(round(max(zs) / GRID)) + 1
        ix, iz = np.meshgrid(np.arange(self.nx), np.arange(self.nz), indexing="ij")
        self.px, self.pz = ix * GRID, iz * GRID
        inside = np.zeros((self.nx, self.nz), bool)
        for _, _, r in plan.rooms:
            inside |= (self.px >= r.x0 - 1e-9) & (self.px <= r.x1 + 1e-9) & (self.pz >= r.z0 - 1e-9) & (
                self.pz <= r.z1 + 1e-9)
        self.free = inside
        for w in walls:
            if w.y0 < 1.0:  # lintels and door heads are above the agent
                self.block(w.rect)

    def blocked_by(self, rect: Rect) -> np.ndarray:
        return rect.distance(self.px, self.pz) < AGENT_RADIUS - _EPS

    def block(self, rect: Rect) -> None:
        self.free = self.free & ~self.blocked_by(rect)

    def components(self, free: np.ndarray | None = None) -> tuple[np.ndarray, int]:
        """(labels, label of the largest 4-connected component; 0 if none)."""
        free = self.free if free is None else free
        n, labels, stats, _ = cv2.connectedComponentsWithStats(free.astype(np.uint8), connectivity=4)
        if n <= 1:
            return labels, 0
        return labels, int(1 + np.argmax(stats[1:, cv2.CC_STAT_AREA]))

    def largest(self, free: np.ndarray | None = None) -> np.ndarray:
        labels, best = self.components(free)
        return labels == best if best else np.zeros_like(self.free)
