"""Building lots along the streets: convex footprints that never touch a street and never overlap.

Every street segment has two frontages (its left and right building lines, half a road plus a
sidewalk from the centreline). The street corridors (curb-to-curb road plus both sidewalks, as flat
ended rectangles) go into a spatial index first; then

1. every acute corner (a diagonal meeting the lattice) gets a triangular "flatiron" lot filling the
   wedge between the two building lines;
2. every other corner goes to one of its two frontages (drawn at random), which gets the corner
   building;
3. each frontage is filled between its free ends with lots of random width that add up to the free
   length.

A lot is kept only if it overlaps nothing in the index (a separating-axis test, vectorised over
the nearby polygons); when it pokes into a street behind it, its depth shrinks. Free ends are found
by stepping then bisecting, so neighbouring buildings meet with gaps of about a centimetre.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spatialrl.worlds.city.graph import StreetGraph
from spatialrl.worlds.city.styles import CityStyle

_EPS = 0.02  # metres of tolerated overlap (walls may touch)
_BISECT_STEPS = 9
_HASH = 40.0  # spatial hash cell, metres
_NEXT = {3: np.array([1, 2, 0]), 4: np.array([1, 2, 3, 0])}
ACUTE_DEG = 70.0  # corners sharper than this get a flatiron wedge
MIN_DEPTH = 4.0


@dataclass
class Lot:
    """One building footprint. ``polygon`` is convex, counter-clockwise seen from above (x east, z north)."""

    polygon: np.ndarray  # (K, 2), K = 3 (wedge) or 4
    edge: int  # street edge whose building line the front wall stands on
    front: np.ndarray  # (2, 2) front wall endpoints, in the edge's direction of travel
    normal: np.ndarray  # (2,) unit normal of the front wall, pointing to the street
    exposed: tuple[bool, bool]  # is the side wall at front[0] / front[1] on another street?
    wedge: bool = False

    @property
    def width(self) -> float:
        return float(np.linalg.norm(self.front[1] - self.front[0]))

    @property
    def depth(self) -> float:
        return float(np.max((self.polygon - self.front[0]) @ -self.normal))


def _ccw(poly: np.ndarray) -> np.ndarray:
    q = poly[_NEXT[len(poly)]]
    area = 0.5 * float(np.sum(poly[:, 0] * q[:, 1] - q[:, 0] * poly[:, 1]))
    return poly if area > 0 else poly[::-1].copy()


class _PolygonIndex:
    """Convex polygons (streets and lots) in a spatial hash, with a vectorised separating-axis test."""

    def __init__(self) -> None:
        self.cells: dict[tuple[int, int], list[int]] = {}
        self.polys: list[np.ndarray] = []  # each padded to 4 vertices

    def _keys(self, poly: np.ndarray) -> list[tuple[int, int]]:
        lo = np.floor(poly.min(0) / _HASH).astype(int)
        hi = np.floor(poly.max(0) / _HASH).astype(int)
        return [(i, j) for i in range(lo[0], hi[0] + 1) for j in range(lo[1], hi[1] + 1)]

    def add(self, poly: np.ndarray) -> None:
        k = len(self.polys)
        self.polys.append(np.concatenate([poly, poly[-1:]]) if len(poly) == 3 else poly)
        for key in self._keys(poly):
            self.cells.setdefault(key, []).append(k)

    def overlaps(self, poly: np.ndarray) -> bool:
        near = sorted({k for key in self._keys(poly) for k in self.cells.get(key, ())})
        if not near:
            return False
        p = np.concatenate([poly, poly[-1:]]) if len(poly) == 3 else poly
        q = np.stack([self.polys[k] for k in near])  # (K, 4, 2)
        axes = np.concatenate([np.broadcast_to(p[_NEXT[4]] - p, q.shape), q[:, _NEXT[4]] - q], axis=1)
        axes = np.stack([-axes[..., 1], axes[..., 0]], -1)  # edge normals, (K, 8, 2)
        norm = np.hypot(axes[..., 0], axes[..., 1])
        axes = axes / np.maximum(norm, 1e-9)[..., None]
        proj_p = axes @ p.T  # (K, 8, 4)
        proj_q = np.einsum("kad,kvd->kav", axes, q)
        gap = np.minimum(proj_p.max(-1), proj_q.max(-1)) - np.maximum(proj_p.min(-1), proj_q.min(-1))
        gap = np.where(norm > 1e-9, gap, np.inf)  # degenerate (repeated-vertex) axes separate nothing
        return bool(np.any(gap.min(axis=1) > _EPS))


@dataclass
class FrontageEnd:
    """Where a frontage meets the next street around one of its nodes."""

    t: float  # distance along the edge (from its first node) where the two building lines meet
    corner: tuple | None  # key shared by the two frontages of this corner; None = open end
    acute: bool
    other: int = -1  # the neighbouring street edge around the corner
    phi: float = 180.0  # angle between the two edges on this side, degrees


def frontage_ends(graph: StreetGraph) -> dict[tuple[int, int], tuple[FrontageEnd, FrontageEnd]]:
    """For each frontage (edge, side ±1 = left/right of travel) its start and end constraints.

    Two building lines at angle phi with offsets o_e, o_f meet at
    ``t = (o_f + o_e cos phi) / sin phi`` along e."""
    order = []
    for node, nbrs in enumerate(graph.adjacency):
        p = graph.nodes[node]
        order.append(sorted((math.atan2(*(graph.nodes[o] - p)[::-1]), e) for o, e in nbrs))
    offset = graph.frontage_offset
    length = graph.edge_lengths
    out = {}
    for e, (a, b) in enumerate(graph.edges):
        for side in (1, -1):
            res = []
            for node, at_start in ((a, True), (b, False)):
                ang = order[node]
                k = next(i for i, (_, f) in enumerate(ang) if f == e)
                # Left of travel is counter-clockwise around the start node, clockwise around the end.
                ccw = (side == 1) == at_start
                j = (k + 1) % len(ang) if ccw else (k - 1) % len(ang)
                f = ang[j][1]
                phi = math.degrees(((ang[j][0] - ang[k][0]) if ccw else (ang[k][0] - ang[j][0])) % (2 * math.pi))
                if f == e or phi >= 179.0:  # open side: the city's rim, a T-junction's far side
                    res.append(FrontageEnd(0.0 if at_start else float(length[e]), None, False))
                    continue
                r = math.radians(phi)
                t_star = (offset[f] + offset[e] * math.cos(r)) / math.sin(r)
                res.append(FrontageEnd(t_star if at_start else float(length[e]) - t_star,
                                (node, min(e, f), max(e, f)), phi < ACUTE_DEG, f, phi))
            out[(e, side)] = tuple(res)
    return out


def corridor_polygon(graph: StreetGraph, e: int) -> np.ndarray:
    """The flat-ended rectangle of street edge ``e``: road plus both sidewalks."""
    a, b = graph.nodes[graph.edges[e]]
    d = (b - a) / np.linalg.norm(b - a)
    n = np.array([-d[1], d[0]]) * graph.frontage_offset[e]
    return _ccw(np.array([a - n, b - n, b + n, a + n]))


def layout_lots(graph: StreetGraph, style: CityStyle, rng: np.random.Generator) -> list[Lot]:
    """All building lots of the city, deterministic for ``rng``'s state."""
    index = _PolygonIndex()
    for e in range(len(graph.edges)):
        index.add(corridor_polygon(graph, e))
    lots: list[Lot] = []
    min_w = max(4.0, 0.6 * style.lot_width[0])

    for lot in _flatiron_wedges(graph, style, rng):
        if not index.overlaps(lot.polygon):
            index.add(lot.polygon)
            lots.append(lot)

    geom = {}
    for e, (a, b) in enumerate(graph.edges):
        pa, pb = graph.nodes[a], graph.nodes[b]
        d = (pb - pa) / np.linalg.norm(pb - pa)
        for side in (1, -1):
            m = side * np.array([-d[1], d[0]])  # into the block
            geom[(e, side)] = (pa + m * graph.frontage_offset[e], d, m)

    def rect(key: tuple[int, int], t0: float, w: float, depth: float) -> np.ndarray:
        f0, d, m = geom[key]
        p0 = f0 + d * t0
        return _ccw(np.array([p0, p0 + d * w, p0 + d * w + m * depth, p0 + m * depth]))

    def fits(key: tuple[int, int], t0: float, w: float, depth: float) -> bool:
        return not index.overlaps(rect(key, t0, w, depth))

    def place(key: tuple[int, int], t0: float, w: float, depth: float) -> bool:
        """Add the lot if it fits, shrinking its depth if it pokes into something behind it."""
        if not fits(key, t0, w, depth):
            if not fits(key, t0, w, MIN_DEPTH):
                return False
            lo, hi = MIN_DEPTH, depth
            for _ in range(_BISECT_STEPS - 2):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if fits(key, t0, w, mid) else (lo, mid)
            depth = lo
        f0, d, m = geom[key]
        front = np.array([f0 + d * t0, f0 + d * (t0 + w)])
        exposed = tuple(_on_other_street(graph, key[0], p + m * depth / 2) for p in front)
        index.add(rect(key, t0, w, depth))
        lots.append(Lot(polygon=rect(key, t0, w, depth), edge=key[0], front=front, normal=-m, exposed=exposed))
        return True

    ends = frontage_ends(graph)
    corner_keys: dict[tuple, list[tuple[int, int]]] = {}
    for key in sorted(ends):
        for end in ends[key]:
            if end.corner is not None and not end.acute:
                corner_keys.setdefault(end.corner, []).append(key)
    owners = {c: ks[int(rng.integers(len(ks)))] for c, ks in corner_keys.items()}
    known: dict[tuple, float] = {}  # (frontage, at_start) → free end right after its own corner lot
    for key in sorted(ends):
        for end, at_start in zip(ends[key], (True, False), strict=True):
            if end.corner is not None and owners.get(end.corner) == key:
                w = float(rng.uniform(*style.lot_width))
                t0 = end.t if at_start else end.t - w
                if place(key, t0, w, float(rng.uniform(*style.lot_depth))):
                    known[(key, at_start)] = t0 + w if at_start else t0

    probe = style.lot_depth[0] * 0.5
    for key in sorted(ends):
        length = float(graph.edge_lengths[key[0]])
        start, stop = ends[key]
        t0 = known.get((key, True))
        if t0 is None:
            t0 = _search(lambda t, k=key: fits(k, t, min_w, probe), max(start.t, 0.0), +1.0, length)
        t1 = known.get((key, False))
        if t1 is None:
            t1 = _search(lambda t, k=key: fits(k, t - min_w, min_w, probe), min(stop.t, length), -1.0, length)
        if t0 is None or t1 is None or t1 - t0 < min_w:
            continue
        t, free = t0, t1 - t0
        while free > 1e-6:
            w = float(rng.uniform(*style.lot_width))
            if free - w < min_w:
                w = free if free <= style.lot_width[1] + min_w else free / 2
            place(key, t, w, float(rng.uniform(*style.lot_depth)))
            t, free = t + w, free - w
    return lots


def _on_other_street(graph: StreetGraph, edge: int, point: np.ndarray) -> bool:
    """Does ``point`` lie on the building line of a street other than ``edge``?"""
    dist = graph.distance_to_edges(point[None])[0]
    dist[graph.street_of_edge == graph.street_of_edge[edge]] = np.inf
    return bool(np.any(np.abs(dist - graph.frontage_offset) < 0.6))


def _search(valid, t: float, direction: float, length: float) -> float | None:
    """The first ``t`` (moving in ``direction``) where ``valid`` holds, to about 1 cm: steps of 1 m
    then 2 m (wider steps could jump over a short free stretch), then bisection between the last
    invalid and the first valid position."""
    if valid(t):
        return t
    prev, step = t, 1.0
    while True:
        cur = min(max(t + direction * step, 0.0), length)
        if valid(cur):
            lo, hi = prev, cur
            for _ in range(_BISECT_STEPS):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if valid(mid) else (mid, hi)
            return hi
        if cur in (0.0, length):
            return None
        prev, step = cur, step + min(step, 2.0)


def _flatiron_wedges(graph: StreetGraph, style: CityStyle, rng: np.random.Generator) -> list[Lot]:
    """Triangular lots filling acute corners: apex where the two building lines meet."""
    out = []
    for node, nbrs in enumerate(graph.adjacency):
        if len(nbrs) < 2:
            continue
        p = graph.nodes[node]
        dirs = []
        for other, e in nbrs:
            v = graph.nodes[other] - p
            dirs.append((math.atan2(v[1], v[0]), e, v / np.linalg.norm(v)))
        dirs.sort(key=lambda r: r[0])  # counter-clockwise seen from above
        for k in range(len(dirs)):
            a1, e1, u1 = dirs[k]
            a2, e2, u2 = dirs[(k + 1) % len(dirs)]
            gap = math.degrees((a2 - a1) % (2 * math.pi))
            if gap >= ACUTE_DEG or gap <= 1.0:
                continue
            # The wedge is left of u1 and right of u2; each building line faces into it.
            n1 = np.array([-u1[1], u1[0]])
            n2 = np.array([u2[1], -u2[0]])
            o1, o2 = graph.frontage_offset[e1], graph.frontage_offset[e2]
            # Solve p + n1*o1 + u1*s = p + n2*o2 + u2*r for the apex.
            s, _ = np.linalg.solve(np.stack([u1, -u2], axis=1), n2 * o2 - n1 * o1)
            apex = p + n1 * o1 + u1 * s
            side = float(rng.uniform(*style.lot_depth))
            p1, p2 = apex + u1 * side, apex + u2 * side
            # Front wall on e1's building line, listed in e1's direction of travel.
            front = np.array([apex, p1]) if graph.edges[e1][0] == node else np.array([p1, apex])
            out.append(Lot(polygon=_ccw(np.array([apex, p1, p2])), edge=e1, front=front, normal=-n1,
                           exposed=(True, True), wedge=True))
    return out
