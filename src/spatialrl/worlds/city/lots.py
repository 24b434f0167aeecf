"""Building lots along the streets: convex footprints that never touch a street and never overlap.

Every street segment has two frontages (its left and right building lines, half a road plus a
sidewalk from the centreline). Lots are laid along each frontage one after another, each a
rectangle of style-specific width and depth whose front wall stands on the building line. A lot is
kept only if it stays clear of every street corridor and of every lot already placed; the first
valid start after a blocked stretch is found by bisection, so corner buildings meet with gaps of a
couple of centimetres at most. Acute corners (where a diagonal meets the lattice) first get a
triangular "flatiron" lot that fills the wedge between the two building lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from spatialrl.worlds.city.graph import StreetGraph
from spatialrl.worlds.city.styles import CityStyle

_EPS = 0.02  # metres of tolerated overlap / corridor intrusion (touching walls are fine)
_BISECT_STEPS = 7
_HASH = 40.0  # spatial hash cell, metres
ACUTE_DEG = 70.0  # corners sharper than this get a flatiron wedge


@dataclass
class Lot:
    """One building footprint. ``polygon`` is convex, counter-clockwise seen from above (x east, z north)."""

    polygon: np.ndarray  # (K, 2), K = 3 (wedge) or 4
    edge: int  # street edge whose building line the front wall stands on
    front: np.ndarray  # (2, 2) front wall endpoints, in the edge's direction of travel order
    normal: np.ndarray  # (2,) unit normal of the front wall, pointing to the street
    exposed: tuple[bool, bool]  # is the side wall at front[0] / front[1] on another street?
    wedge: bool = False

    @property
    def width(self) -> float:
        return float(np.linalg.norm(self.front[1] - self.front[0]))


def _ccw(poly: np.ndarray) -> np.ndarray:
    x, z = poly[:, 0], poly[:, 1]
    area = 0.5 * float(np.sum(x * np.roll(z, -1) - np.roll(x, -1) * z))
    return poly if area > 0 else poly[::-1].copy()


def _boundary_samples(poly: np.ndarray, step: float = 1.0) -> np.ndarray:
    pts = []
    for a, b in zip(poly, np.roll(poly, -1, axis=0), strict=True):
        n = max(1, math.ceil(float(np.linalg.norm(b - a)) / step))
        pts.append(a + (b - a) * (np.arange(n)[:, None] / n))
    pts.append(poly.mean(0, keepdims=True))
    return np.concatenate(pts)


class _LotIndex:
    """Placed footprints in a spatial hash, with a vectorised separating-axis overlap test."""

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
        edges_p = np.broadcast_to(np.roll(p, -1, 0) - p, q.shape)
        axes = np.concatenate([edges_p, np.roll(q, -1, 1) - q], axis=1)  # (K, 8, 2)
        axes = np.stack([-axes[..., 1], axes[..., 0]], -1)
        norm = np.linalg.norm(axes, axis=-1, keepdims=True)
        axes = np.where(norm > 1e-9, axes / np.maximum(norm, 1e-9), 0.0)
        proj_p = np.einsum("kad,vd->kav", axes, p)
        proj_q = np.einsum("kad,kvd->kav", axes, q)
        gap = np.minimum(proj_p.max(-1), proj_q.max(-1)) - np.maximum(proj_p.min(-1), proj_q.min(-1))
        gap = np.where(norm[..., 0] > 1e-9, gap, np.inf)  # degenerate axes separate nothing
        return bool(np.any(gap.min(axis=1) > _EPS))


class _Clearance:
    """Is a footprint clear of every street corridor (centreline distance >= half road + sidewalk)?

    Exact for convex polygons: the distance between a polygon and a segment is the smallest of the
    polygon-vertex-to-segment and segment-end-to-polygon-edge distances, or 0 when they cross."""

    def __init__(self, graph: StreetGraph, reach: float):
        self.graph = graph
        self.offset = graph.frontage_offset
        mid = graph.nodes[graph.edges].mean(1)
        half = graph.edge_lengths / 2
        d = np.linalg.norm(mid[:, None] - mid[None], axis=-1)
        self.near = [np.flatnonzero(d[e] <= half[e] + half + reach) for e in range(len(mid))]

    def clear(self, poly: np.ndarray, edge: int) -> bool:
        cand = self.near[edge]
        g = self.graph
        a = g.nodes[g.edges[cand, 0]]  # (K, 2)
        b = g.nodes[g.edges[cand, 1]]
        dist = np.minimum(_point_segment(poly[:, None], a[None], b[None]).min(0),  # vertices → streets
                          np.minimum(_point_segment(a[:, None], poly[None], np.roll(poly, -1, 0)[None]).min(1),
                                     _point_segment(b[:, None], poly[None], np.roll(poly, -1, 0)[None]).min(1)))
        inside = _inside_convex(a, poly) | _inside_convex(b, poly) | _crosses(a, b, poly)
        return bool(np.all((dist >= self.offset[cand] - _EPS) & ~inside))

    def on_street(self, point: np.ndarray, edge: int) -> bool:
        """Does ``point`` lie on the building line of a street other than ``edge``?"""
        cand = self.near[edge][self.near[edge] != edge]
        dist = self.graph.distance_to_edges(point[None])[0, cand]
        return bool(np.any(np.abs(dist - self.offset[cand]) < 0.6))


def _point_segment(p: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Broadcast distance from points ``p`` to segments ``a``-``b`` (last axis = xz)."""
    v = b - a
    t = np.clip(((p - a) * v).sum(-1) / np.maximum((v * v).sum(-1), 1e-12), 0.0, 1.0)
    return np.linalg.norm(p - (a + t[..., None] * v), axis=-1)


def _inside_convex(pts: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """(K,) are ``pts`` strictly inside the counter-clockwise convex ``poly``?"""
    e = np.roll(poly, -1, 0) - poly
    rel = pts[:, None] - poly[None]
    return np.all(e[None, :, 0] * rel[..., 1] - e[None, :, 1] * rel[..., 0] > 1e-9, axis=1)


def _crosses(a: np.ndarray, b: np.ndarray, poly: np.ndarray) -> np.ndarray:
    """(K,) does segment a-b properly cross any edge of ``poly``?"""
    p, q = poly[None], np.roll(poly, -1, 0)[None]
    a, b = a[:, None], b[:, None]

    def orient(u, v, w):
        return (v[..., 0] - u[..., 0]) * (w[..., 1] - u[..., 1]) - (v[..., 1] - u[..., 1]) * (w[..., 0] - u[..., 0])

    d1, d2 = orient(a, b, p), orient(a, b, q)
    d3, d4 = orient(p, q, a), orient(p, q, b)
    return np.any((d1 * d2 < 0) & (d3 * d4 < 0), axis=1)


@dataclass
class _End:
    """Where a frontage meets the next street around one of its nodes."""

    t: float  # distance along the edge (from its first node) where the two building lines meet
    corner: tuple | None  # key shared by the two frontages of this corner; None = no corner
    acute: bool


def _frontage_ends(graph: StreetGraph) -> dict[tuple[int, int], tuple[_End, _End]]:
    """For each frontage (edge, side) its start and end constraints from the neighbouring streets."""
    order = []
    for node, nbrs in enumerate(graph.adjacency):
        p = graph.nodes[node]
        ang = sorted((math.atan2(*(graph.nodes[o] - p)[::-1]), e) for o, e in nbrs)
        order.append(ang)
    offset = graph.frontage_offset
    length = graph.edge_lengths
    out = {}
    for e, (a, b) in enumerate(graph.edges):
        ends = {}
        for side in (1, -1):
            res = []
            for node, at_start in ((a, True), (b, False)):
                ang = order[node]
                k = next(i for i, (_, f) in enumerate(ang) if f == e)
                # Left of travel at the start node is counter-clockwise; at the end node it is clockwise.
                ccw = (side == 1) == at_start
                j = (k + 1) % len(ang) if ccw else (k - 1) % len(ang)
                f = ang[j][1]
                phi = (ang[j][0] - ang[k][0]) if ccw else (ang[k][0] - ang[j][0])
                phi = math.degrees(phi % (2 * math.pi))
                if f == e or phi >= 179.0:  # open side (city edge or a straight continuation)
                    res.append(_End(0.0 if at_start else float(length[e]), None, False))
                    continue
                r = math.radians(phi)
                t_star = (offset[f] + offset[e] * math.cos(r)) / math.sin(r)
                t = t_star if at_start else float(length[e]) - t_star
                res.append(_End(t, (node, min(e, f), max(e, f)), phi < ACUTE_DEG))
            ends[side] = tuple(res)
        out[(e, 1)], out[(e, -1)] = ends[1], ends[-1]
    return out


def layout_lots(graph: StreetGraph, style: CityStyle, rng: np.random.Generator) -> list[Lot]:
    """All building lots of the city, deterministic for ``rng``'s state.

    Order: flatiron wedges in acute corners; then at every other corner one of its two frontages
    (drawn at random) gets the corner building; then each frontage is filled between its two ends
    with lots of random width whose widths add up to the free length.
    """
    reach = style.lot_depth[1] + style.lot_width[1] + 5.0
    clearance = _Clearance(graph, reach)
    index = _LotIndex()
    lots: list[Lot] = []
    min_w = max(4.0, 0.6 * style.lot_width[0])

    def accept(poly: np.ndarray, edge: int) -> bool:
        return clearance.clear(poly, edge) and not index.overlaps(poly)

    for lot in _flatiron_wedges(graph, style, rng):
        if accept(lot.polygon, lot.edge):
            index.add(lot.polygon)
            lots.append(lot)

    geom = {}
    for e, (a, b) in enumerate(graph.edges):
        pa, pb = graph.nodes[a], graph.nodes[b]
        d = (pb - pa) / np.linalg.norm(pb - pa)
        for side in (1, -1):
            m = side * np.array([-d[1], d[0]])
            geom[(e, side)] = (pa + m * graph.frontage_offset[e], d, m)

    def rect(key: tuple[int, int], t0: float, w: float, depth: float) -> np.ndarray:
        f0, d, m = geom[key]
        p0 = f0 + d * t0
        return _ccw(np.array([p0, p0 + d * w, p0 + d * w + m * depth, p0 + m * depth]))

    def place(key: tuple[int, int], t0: float, w: float, depth: float) -> bool:
        """Add the lot if it fits, shrinking its depth if it pokes into another street."""
        e = key[0]
        if not accept(rect(key, t0, w, depth), e):
            lo = 4.0
            if not accept(rect(key, t0, w, lo), e):
                return False
            hi = depth
            for _ in range(_BISECT_STEPS):
                mid = (lo + hi) / 2
                lo, hi = (mid, hi) if accept(rect(key, t0, w, mid), e) else (lo, mid)
            depth = lo
        poly = rect(key, t0, w, depth)
        f0, d, m = geom[key]
        front = np.array([f0 + d * t0, f0 + d * (t0 + w)])
        exposed = (clearance.on_street(front[0] + m * depth / 2, e), clearance.on_street(front[1] + m * depth / 2, e))
        index.add(poly)
        lots.append(Lot(polygon=poly, edge=e, front=front, normal=-m, exposed=exposed))
        return True

    ends = _frontage_ends(graph)
    corner_keys: dict[tuple, list[tuple[int, int]]] = {}
    for key in sorted(ends):
        for end in ends[key]:
            if end.corner is not None and not end.acute:
                corner_keys.setdefault(end.corner, []).append(key)
    owners = {c: ks[int(rng.integers(len(ks)))] for c, ks in corner_keys.items()}
    for key in sorted(ends):
        start, stop = ends[key]
        for end, at_start in ((start, True), (stop, False)):
            if end.corner is not None and owners.get(end.corner) == key:
                w = float(rng.uniform(*style.lot_width))
                place(key, end.t if at_start else end.t - w, w, float(rng.uniform(*style.lot_depth)))

    def valid_start(key: tuple[int, int], t: float) -> bool:
        return accept(rect(key, t, min_w, style.lot_depth[0] * 0.5), key[0])

    def valid_stop(key: tuple[int, int], t: float) -> bool:
        return accept(rect(key, t - min_w, min_w, style.lot_depth[0] * 0.5), key[0])

    for key in sorted(ends):
        length = float(graph.edge_lengths[key[0]])
        start, stop = ends[key]
        t0 = _search(lambda t, k=key: valid_start(k, t), max(start.t, 0.0), +1.0, length)
        t1 = _search(lambda t, k=key: valid_stop(k, t), min(stop.t, length), -1.0, length)
        if t0 is None or t1 is None or t1 - t0 < min_w:
            continue
        widths = []
        free = t1 - t0
        while free > 0:
            w = float(rng.uniform(*style.lot_width))
            if free - w < min_w:
                w = free if free <= style.lot_width[1] + min_w else free / 2
            widths.append(w)
            free -= w
        t = t0
        for w in widths:
            place(key, t, w, float(rng.uniform(*style.lot_depth)))
            t += w
    return lots


def _search(valid, t: float, direction: float, length: float, step: float = 2.0) -> float | None:
    """The first ``t`` (moving in ``direction``) where ``valid`` holds, to about 1 cm."""
    if valid(t):
        return t
    prev = t
    while 0.0 <= t <= length:
        t += direction * step
        if valid(t):
            lo, hi = prev, t  # lo invalid, hi valid
            for _ in range(_BISECT_STEPS + 1):
                mid = (lo + hi) / 2
                lo, hi = (lo, mid) if valid(mid) else (mid, hi)
            return hi
        prev = t
    return None


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
            # Building lines: u1's left side and u2's right side face into the wedge.
            n1 = np.array([-u1[1], u1[0]])
            n2 = np.array([u2[1], -u2[0]])
            o1, o2 = graph.frontage_offset[e1], graph.frontage_offset[e2]
            # Solve p + n1*o1 + u1*s = p + n2*o2 + u2*r for the apex.
            mat = np.stack([u1, -u2], axis=1)
            s, r = np.linalg.solve(mat, n2 * o2 - n1 * o1)
            apex = p + n1 * o1 + u1 * s
            side = float(rng.uniform(*style.lot_depth)) + 6.0
            p1 = apex + u1 * side
            p2 = apex + u2 * side
            # Front wall on e1's building line, listed in e1's direction of travel.
            forward = graph.edges[e1][0] == node
            front = np.array([apex, p1]) if forward else np.array([p1, apex])
            out.append(Lot(polygon=_ccw(np.array([apex, p1, p2])), edge=e1, front=front, normal=-n1,
                           exposed=(True, True), wedge=True))
    return out
