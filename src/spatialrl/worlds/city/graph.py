"""The street graph of a generated city, in local metres and in latitude/longitude.

Local frame: x = east, z = north (metres from the city origin), so that the renderer's yaw equals
the compass heading (yaw 0 looks along +z = north, yaw 90 along +x = east). The street network is a
rotated lattice (streets along the i axis, avenues along the j axis) plus diagonal boulevards that
run through lattice nodes, so the streets run in 8 distinct directions (see ``styles.py``).

Panorama points ("panos") sit on street centrelines about every ``PANO_SPACING`` metres and at every
intersection, like the street-view capture points of the real V-IRL data.

``LocalFrame`` converts metres to WGS-84 latitude/longitude with the local radii of curvature, so
geopy's geodesic distance (used by the V-IRL rail) and the haversine distance (used by relocation)
agree with the local metres to well under a centimetre per 10 m.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from spatialrl.worlds.city.styles import CityStyle

PANO_SPACING = 10.0  # metres between panorama points along a street (V-IRL: "about every 10 m")
LATLNG_DECIMALS = 7  # ~1 cm; keys of gps_pano_mapping.pkl and every geocode in route_infos.json

_WGS84_A = 6378137.0
_WGS84_E2 = 6.69437999014e-3


@dataclass(frozen=True)
class LocalFrame:
    """Tangent-plane conversion between local metres (x east, z north) and (lat, lng) degrees."""

    lat0: float
    lng0: float

    def _radii(self) -> tuple[float, float]:
        s = math.sin(math.radians(self.lat0))
        w = 1.0 - _WGS84_E2 * s * s
        meridian = _WGS84_A * (1.0 - _WGS84_E2) / w**1.5  # metres per radian of latitude
        normal = _WGS84_A / math.sqrt(w)  # metres per radian of longitude / cos(lat)
        return meridian, normal * math.cos(math.radians(self.lat0))

    def to_latlng(self, xz: np.ndarray) -> np.ndarray:
        """(N, 2) metres → (N, 2) [lat, lng] degrees, rounded to ``LATLNG_DECIMALS``."""
        p = np.asarray(xz, dtype=np.float64).reshape(-1, 2)
        m_lat, m_lng = self._radii()
        lat = self.lat0 + np.degrees(p[:, 1] / m_lat)
        lng = self.lng0 + np.degrees(p[:, 0] / m_lng)
        return np.round(np.stack([lat, lng], axis=1), LATLNG_DECIMALS)

    def snap(self, xz: np.ndarray) -> np.ndarray:
        """Local points moved onto the lat/lng grid that gets written (about 1 cm), so every heading
        and distance computed from them equals one recomputed from the written geocodes."""
        return self.to_local(self.to_latlng(xz))

    def to_local(self, latlng: np.ndarray) -> np.ndarray:
        """(N, 2) [lat, lng] degrees → (N, 2) metres (x east, z north)."""
        q = np.asarray(latlng, dtype=np.float64).reshape(-1, 2)
        m_lat, m_lng = self._radii()
        return np.stack([np.radians(q[:, 1] - self.lng0) * m_lng, np.radians(q[:, 0] - self.lat0) * m_lat], axis=1)


def heading_of(vec: np.ndarray) -> np.ndarray:
    """Compass heading in [0, 360) of local (x east, z north) direction vectors."""
    v = np.asarray(vec, dtype=np.float64)
    return np.degrees(np.arctan2(v[..., 0], v[..., 1])) % 360.0


@dataclass
class StreetGraph:
    """Intersections (nodes) joined by straight street segments (edges)."""

    nodes: np.ndarray  # (N, 2) local metres
    lattice: np.ndarray  # (N, 2) int lattice coordinates (i, j) of each node
    edges: np.ndarray  # (E, 2) node indices, from → to
    road_width: np.ndarray  # (E,) curb-to-curb width
    street_of_edge: np.ndarray  # (E,) index into street_names
    street_names: list[str]
    sidewalk: float
    adjacency: list[list[tuple[int, int]]] = field(init=False)  # node → [(neighbour, edge)]

    def __post_init__(self) -> None:
        self.adjacency = [[] for _ in range(len(self.nodes))]
        for e, (a, b) in enumerate(self.edges):
            self.adjacency[a].append((int(b), e))
            self.adjacency[b].append((int(a), e))

    @property
    def edge_vectors(self) -> np.ndarray:
        return self.nodes[self.edges[:, 1]] - self.nodes[self.edges[:, 0]]

    @property
    def edge_lengths(self) -> np.ndarray:
        return np.linalg.norm(self.edge_vectors, axis=1)

    @property
    def frontage_offset(self) -> np.ndarray:
        """(E,) distance from an edge's centreline to the building line (half road + sidewalk)."""
        return self.road_width / 2.0 + self.sidewalk

    def distance_to_edges(self, points: np.ndarray) -> np.ndarray:
        """(K, E) distance from each point to each street segment's centreline."""
        p = np.asarray(points, dtype=np.float64).reshape(-1, 1, 2)
        a = self.nodes[self.edges[:, 0]][None]
        d = self.edge_vectors[None]
        t = np.clip(((p - a) * d).sum(-1) / (d * d).sum(-1), 0.0, 1.0)
        return np.linalg.norm(p - (a + t[..., None] * d), axis=-1)

    def to_json(self, frame: LocalFrame) -> dict:
        """Graph for the manifest: node lat/lng, edges, street names."""
        return {
            "nodes_latlng": frame.to_latlng(self.nodes).tolist(),
            "edges": self.edges.tolist(),
            "street_of_edge": self.street_of_edge.tolist(),
            "street_names": self.street_names,
            "road_width_m": [round(float(w), 2) for w in self.road_width],
        }


def build_street_graph(style: CityStyle, lattice_size: tuple[int, int]) -> StreetGraph:
    """The rotated lattice of ``lattice_size`` blocks plus two diagonal boulevards through its nodes
    (one towards +i+j, one towards -i+j), so streets run in 8 directions."""
    ni, nj = lattice_size
    bi, bj = style.block
    rot = math.radians(style.grid_rotation_deg)
    axis_j = np.array([math.sin(rot), math.cos(rot)])  # compass heading = rotation
    axis_i = np.array([math.cos(rot), -math.sin(rot)])  # heading rotation + 90
    ii, jj = np.meshgrid(np.arange(ni + 1), np.arange(nj + 1), indexing="ij")
    lattice = np.stack([ii.ravel(), jj.ravel()], axis=1)
    local = (lattice[:, :1] - ni / 2.0) * bi * axis_i + (lattice[:, 1:] - nj / 2.0) * bj * axis_j
    index = {(int(i), int(j)): k for k, (i, j) in enumerate(lattice)}

    names: list[str] = []
    edges: list[tuple[int, int]] = []
    widths: list[float] = []
    streets: list[int] = []

    def add_street(name: str, width: float, cells: list[tuple[int, int]]) -> None:
        sid = len(names)
        names.append(name)
        for p, q in zip(cells, cells[1:], strict=False):
            edges.append((index[p], index[q]))
            widths.append(width)
            streets.append(sid)

    def named(stems: tuple[str, ...], k: int, suffix: str) -> str:
        stem = stems[k % len(stems)] + ("" if k < len(stems) else f" {k // len(stems) + 1}")
        return f"{stem} {suffix}".strip()

    for j in range(nj + 1):  # streets along +i
        add_street(named(style.street_names, j, style.street_suffix), style.street_width,
                   [(i, j) for i in range(ni + 1)])
    for i in range(ni + 1):  # avenues along +j
        add_street(named(style.avenue_names, i, style.avenue_suffix), style.avenue_width,
                   [(i, j) for j in range(nj + 1)])
    # Two diagonal boulevards through the centre node (j - i = 0 and i + j = ni), corner to corner
    # on a square lattice; they meet other streets only at lattice nodes.
    diagonals = [[(i, i) for i in range(ni + 1) if i <= nj], [(i, ni - i) for i in range(ni, -1, -1) if ni - i <= nj]]
    for k, cells in enumerate(diagonals):
        add_street(style.diagonal_names[k % len(style.diagonal_names)], style.diagonal_width, cells)

    return StreetGraph(
        nodes=local,
        lattice=lattice,
        edges=np.asarray(edges, dtype=np.int64),
        road_width=np.asarray(widths, dtype=np.float64),
        street_of_edge=np.asarray(streets, dtype=np.int64),
        street_names=names,
        sidewalk=style.sidewalk,
    )


@dataclass
class PanoPoints:
    """Street-view capture points: one per intersection (index = node index) then the points along
    each edge. ``edge_chain[e]`` lists the panos of edge ``e`` from its first node to its second."""

    xz: np.ndarray  # (P, 2) local metres
    node: np.ndarray  # (P,) node index, or -1 for a mid-street point
    edge: np.ndarray  # (P,) edge index, or -1 for an intersection point
    edge_chain: list[np.ndarray]

    def __len__(self) -> int:
        return len(self.xz)


def place_panos(graph: StreetGraph, spacing: float = PANO_SPACING) -> PanoPoints:
    """Panos at every node and every ``~spacing`` metres along every edge (evenly spaced per edge)."""
    n_nodes = len(graph.nodes)
    xz = [graph.nodes]
    node = [np.arange(n_nodes)]
    edge = [np.full(n_nodes, -1)]
    chains = []
    count = n_nodes
    for e, (a, b) in enumerate(graph.edges):
        length = float(np.linalg.norm(graph.nodes[b] - graph.nodes[a]))
        n = max(1, round(length / spacing))
        t = np.arange(1, n)[:, None] / n
        pts = graph.nodes[a] + t * (graph.nodes[b] - graph.nodes[a])
        ids = np.arange(count, count + len(pts))
        count += len(pts)
        xz.append(pts)
        node.append(np.full(len(pts), -1))
        edge.append(np.full(len(pts), e))
        chains.append(np.concatenate([[a], ids, [b]]).astype(np.int64))
    return PanoPoints(
        xz=np.concatenate(xz),
        node=np.concatenate(node).astype(np.int64),
        edge=np.concatenate(edge).astype(np.int64),
        edge_chain=chains,
    )
