"""Routes like V-IRL's: a destination place, a start place 40-600 m away, the shortest street path
between them, and one milestone per turn plus one at the destination.

The written fields follow V-IRL's route collector (``reference/virl_reference_notes.md`` §1.2):
``milestone_info`` is one string of template blocks, ``to_next_intersection_heading`` is
``"<int heading> (<compass word>)"`` of the straight line from the previous milestone (the start
for the first one), ``landmarks`` names the nearest place within 18 m of the milestone with its
bearing relative to that arriving heading, ``human_heading`` is the previous heading (0 first), and
``init_heading`` is 0 (the V-IRL env then draws a random start heading).

Shortest paths are exact in street length; ties between equally short paths are broken per route
by one of three rules (fewest turns, most turns, random), and routes are accepted against
milestone-count quotas (``MILESTONE_SHARES``), so every style gets the same milestones-per-route
histogram.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from spatialrl.worlds.city.graph import LocalFrame, PanoPoints, StreetGraph, heading_of
from spatialrl.worlds.city.places import Place

COMPASS = ("north", "northeast", "east", "southeast", "south", "southwest", "west", "northwest")
SPATIAL = ("front", "right front", "right", "right behind", "behind", "left behind", "left", "left front")
LANDMARK_RADIUS = 18.0  # metres (V-IRL MAX_DISTANCE_TO_LANDMARK)
START_DISTANCE = (40.0, 600.0)  # metres between start and destination place
MILESTONES = (1, 8)
TURN_DEG = 20.0  # a change of direction above this at a node is a turn (a milestone)
# Target share of routes with 1..8 milestones (V-IRL-like: mostly 2-5, a tail up to 8).
MILESTONE_SHARES = {1: 0.08, 2: 0.17, 3: 0.20, 4: 0.18, 5: 0.14, 6: 0.10, 7: 0.08, 8: 0.05}
WALK_SPEED = 1.4  # m/s, for the route's time fields
MAX_ROUTES_PER_START = 3
MAX_ROUTES_PER_DEST = 4
NO_LANDMARK = "No landmark nearby"

MILESTONE_TEMPLATE = (
    "{{\n"
    '"intersection_idx": "{idx}",\n'
    '"landmarks": "{landmarks}",\n'
    '"distance": "{distance} meters",\n'
    '"human_heading": "{human_heading}",\n'
    '"to_next_intersection_heading": "{heading} ({direction})",\n'
    "}}"
)


def compass_word(heading: float) -> str:
    """Nearest of the 8 compass words (north = 0, clockwise)."""
    return COMPASS[int(((heading % 360.0) + 22.5) // 45.0) % 8]


def spatial_word(relative: float) -> str:
    """Nearest of V-IRL's 8 relative positions (front = 0, right = 90, clockwise)."""
    return SPATIAL[int(((relative % 360.0) + 22.5) // 45.0) % 8]


@dataclass
class Milestone:
    pano: int
    heading: float  # compass heading of the straight line from the previous milestone (or start)
    distance: float  # metres from the previous milestone (or start)
    landmark: Place | None  # for the final milestone: the destination


@dataclass
class Route:
    start: Place
    dest: Place
    start_pano: int
    dest_pano: int
    path: list[int]  # every pano from start to destination
    milestones: list[Milestone]
    streets: list[str]  # street name of each leg (start → m0, m0 → m1, ...)

    @property
    def length(self) -> float:
        return float(sum(m.distance for m in self.milestones))


# ------------------------------------------------------------------------------------------ routing
class Router:
    """Shortest street paths between panos, turn-aware for tie-breaking.

    Dijkstra runs over states (node, previous node), so a turn can be priced. Costs are integers:
    length in centimetres times 1000 plus a per-route tie-break term below 1000, which never makes a
    longer path win."""

    def __init__(self, graph: StreetGraph, panos: PanoPoints):
        self.graph, self.panos = graph, panos
        self.length_cm = np.round(graph.edge_lengths * 100).astype(np.int64)

    def _turned(self, prev: int, u: int, target: np.ndarray) -> bool:
        """Is going on from node ``u`` to point ``target`` a turn? ``prev`` >= 0 is the previous node,
        -1 means the path started at ``u``, and -2 - k means it started at mid-street pano k."""
        if prev == -1:
            return False
        origin = self.graph.nodes[prev] if prev >= 0 else self.panos.xz[-2 - prev]
        a = self.graph.nodes[u] - origin
        b = target - self.graph.nodes[u]
        cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
        return cos < math.cos(math.radians(TURN_DEG))

    def _leg_cm(self, pano: int, node: int) -> int:
        return int(round(float(np.linalg.norm(self.panos.xz[pano] - self.graph.nodes[node])) * 100))

    def paths_from(self, start: int, mode: str, rng: np.random.Generator) -> Callable[[int], list[int] | None]:
        """Single-source search from pano ``start``; returns a function dest pano → pano path."""
        g, panos = self.graph, self.panos
        if mode not in ("fewest", "most", "random"):
            raise ValueError(f"unknown tie-break mode {mode!r}")
        noise = rng.integers(0, 999, size=len(g.edges)) if mode == "random" else np.zeros(len(g.edges), np.int64)
        turn_cost = {"fewest": 1, "most": -1, "random": 0}[mode]
        start_edge = int(panos.edge[start])
        dist: dict[tuple[int, int], int] = {}
        back: dict[tuple[int, int], tuple[int, int] | None] = {}
        if panos.node[start] >= 0:
            seeds = [((int(panos.node[start]), -1), 0)]
        else:
            seeds = [((int(n), -2 - start), self._leg_cm(start, int(n)) * 1000) for n in g.edges[start_edge]]
        heap = []
        for state, cost in seeds:
            dist[state], back[state] = cost, None
            heap.append((cost, state))
        heapq.heapify(heap)
        while heap:
            d, (u, p) = heapq.heappop(heap)
            if d > dist[(u, p)]:
                continue
            for v, e in g.adjacency[u]:
                if v == p or (p < -1 and e == start_edge):  # no U-turns, never back past the start
                    continue
                nd = d + int(self.length_cm[e]) * 1000 + int(noise[e])
                if self._turned(p, u, g.nodes[v]):
                    nd += turn_cost
                if nd < dist.get((v, u), 1 << 62):
                    dist[(v, u)], back[(v, u)] = nd, (u, p)
                    heapq.heappush(heap, (nd, (v, u)))
        by_node: dict[int, list[tuple[tuple[int, int], int]]] = {}
        for state, d in dist.items():
            by_node.setdefault(state[0], []).append((state, d))

        def path_to(dest: int) -> list[int] | None:
            if dest == start:
                return None
            best: tuple[int, tuple[int, int] | None] = (1 << 62, None)
            if panos.node[dest] >= 0:
                for state, d in by_node.get(int(panos.node[dest]), []):
                    if d < best[0]:
                        best = (d, state)
            else:
                for node in g.edges[int(panos.edge[dest])]:
                    leg = self._leg_cm(dest, int(node)) * 1000
                    for state, d in by_node.get(int(node), []):
                        cost = d + leg + (turn_cost if self._turned(state[1], int(node), panos.xz[dest]) else 0)
                        if cost < best[0]:
                            best = (cost, state)
            same = self._same_edge_cost(start, dest)
            if same is not None and same <= best[0]:
                return self._chain_between(start, dest)
            if best[1] is None:
                return None
            nodes = []
            state: tuple[int, int] | None = best[1]
            while state is not None:
                nodes.append(state[0])
                state = back[state]
            return self._expand(start, nodes[::-1], dest)

        return path_to

    def _same_edge_cost(self, a: int, b: int) -> int | None:
        ea, eb = self.panos.edge[a], self.panos.edge[b]
        if ea < 0 or ea != eb:
            return None
        return int(round(float(np.linalg.norm(self.panos.xz[a] - self.panos.xz[b])) * 100)) * 1000

    def _chain_between(self, a: int, b: int) -> list[int]:
        edge = int(self.panos.edge[a]) if self.panos.edge[a] >= 0 else int(self.panos.edge[b])
        chain = list(self.panos.edge_chain[edge])
        i, j = chain.index(a), chain.index(b)
        return chain[i:j + 1] if i <= j else chain[j:i + 1][::-1]

    def _edge_between(self, u: int, v: int) -> int:
        for w, e in self.graph.adjacency[u]:
            if w == v:
                return e
        raise KeyError((u, v))

    def _chain_nodes(self, u: int, v: int) -> list[int]:
        e = self._edge_between(u, v)
        chain = list(self.panos.edge_chain[e])
        return chain if self.graph.edges[e][0] == u else chain[::-1]

    def _expand(self, start: int, nodes: list[int], dest: int) -> list[int]:
        """Pano path: start → nodes[0] → ... → nodes[-1] → dest."""
        path = [start]
        if self.panos.node[start] < 0:
            path = self._chain_between(start, nodes[0])
        for u, v in zip(nodes, nodes[1:], strict=False):
            path += self._chain_nodes(u, v)[1:]
        if self.panos.node[dest] < 0:
            path += self._chain_between(nodes[-1], dest)[1:]
        return path


# ------------------------------------------------------------------------------------- milestones
def milestones_of(path: list[int], panos: PanoPoints) -> list[tuple[int, float, float]]:
    """(pano, heading, distance) of each turn point along ``path`` and of its last pano."""
    xz = panos.xz[path]
    seg = np.diff(xz, axis=0)
    heads = heading_of(seg)
    out, last = [], 0
    for k in range(1, len(path) - 1):
        turn = abs((heads[k] - heads[k - 1] + 180.0) % 360.0 - 180.0)
        if turn > TURN_DEG:
            out.append(k)
    out.append(len(path) - 1)
    result = []
    for k in out:
        v = xz[k] - xz[last]
        result.append((int(path[k]), float(heading_of(v)), float(np.linalg.norm(v))))
        last = k
    return result


def landmark_string(place: Place, at: np.ndarray, heading: float, destination: bool) -> str:
    rel = float(heading_of(place.position - at)) - heading
    text = f"{place.name} is on your {spatial_word(rel)}"
    return f"The destination {text}" if destination else text


def milestone_block(idx: int, landmarks: str, distance: float, human_heading: int, heading: float) -> str:
    return MILESTONE_TEMPLATE.format(idx=idx, landmarks=landmarks, distance=int(round(distance)),
                                     human_heading=human_heading, heading=int(heading),
                                     direction=compass_word(heading))


# ------------------------------------------------------------------------------------------ sampling
def milestone_quotas(n_routes: int) -> dict[int, int]:
    """Largest-remainder rounding of ``MILESTONE_SHARES`` to ``n_routes`` routes."""
    raw = {m: s * n_routes for m, s in MILESTONE_SHARES.items()}
    quota = {m: int(math.floor(v)) for m, v in raw.items()}
    for m in sorted(raw, key=lambda k: (-(raw[k] - quota[k]), k))[: n_routes - sum(quota.values())]:
        quota[m] += 1
    return quota


@dataclass
class RouteSampler:
    graph: StreetGraph
    panos: PanoPoints
    places: list[Place]
    place_pano: np.ndarray  # (n_places,) nearest pano of each place (its relocated geocode)
    visible: Callable[[Place, int, float], bool]  # is the place's sign visible at pano, arriving heading

    def landmark_at(self, pano: int, heading: float, exclude: int) -> Place | None:
        """Nearest place within ``LANDMARK_RADIUS`` of ``pano`` whose sign is visible there."""
        d = np.linalg.norm(self._positions - self.panos.xz[pano], axis=1)
        for k in np.argsort(d, kind="stable"):
            if d[k] > LANDMARK_RADIUS:
                break
            if int(k) != exclude and self.visible(self.places[int(k)], pano, heading):
                return self.places[int(k)]
        return None

    @property
    def _positions(self) -> np.ndarray:
        if not hasattr(self, "_pos_cache"):
            self._pos_cache = np.stack([p.position for p in self.places])
        return self._pos_cache

    def build(self, start: Place, dest: Place, path: list[int],
              ms: list[tuple[int, float, float]] | None = None) -> Route | None:
        """The route along ``path``, or None if it breaks a rule (milestone count, a leg of 5 m or
        less, a destination sign not visible from the destination pano)."""
        ms = milestones_of(path, self.panos) if ms is None else ms
        if not MILESTONES[0] <= len(ms) <= MILESTONES[1] or any(d <= 5.0 for _, _, d in ms):
            return None
        # Visibility is judged at the heading the env will use: the integer part written to the file.
        if not self.visible(dest, ms[-1][0], float(int(ms[-1][1]))):
            return None
        milestones = [Milestone(pano, heading, distance, self.landmark_at(pano, float(int(heading)), dest.index))
                      for pano, heading, distance in ms[:-1]]
        milestones.append(Milestone(ms[-1][0], ms[-1][1], ms[-1][2], dest))
        streets = []
        for k, m in enumerate(milestones):
            prev = path.index(milestones[k - 1].pano) if k else 0
            here = path.index(m.pano)
            streets.append(self._street_between(path[prev], path[here]))
        return Route(start, dest, path[0], path[-1], path, milestones, streets)

    def _street_between(self, a: int, b: int) -> str:
        """Name of the street carrying the straight leg a → b (the first edge the leg uses)."""
        mid = (self.panos.xz[a] + self.panos.xz[b]) / 2
        e = int(np.argmin(self.graph.distance_to_edges(mid[None])[0]))
        return self.graph.street_names[int(self.graph.street_of_edge[e])]

    def sample(self, n_routes: int, rng: np.random.Generator, progress: Callable[[int], None] | None = None
               ) -> tuple[list[Route], dict]:
        """``n_routes`` routes filling the milestone quotas. A city too small for some quota (a tiny
        city has no 8-turn routes) gets any valid routes instead once ``candidate_budget`` pairs
        were tried. Also returns sampling statistics for the manifest."""
        router = Router(self.graph, self.panos)
        quota = milestone_quotas(n_routes)
        pos = self._positions
        dist = np.linalg.norm(pos[:, None] - pos[None], axis=-1)
        routes: list[Route] = []
        per_dest: dict[int, int] = {}
        spare: list[tuple[int, int, list[int], list]] = []
        budget = 40 * n_routes + 500
        tried = 0

        def accept(route: Route, j: int) -> None:
            routes.append(route)
            per_dest[j] = per_dest.get(j, 0) + 1
            if progress:
                progress(len(routes))

        for si in rng.permutation(len(self.places)):
            if len(routes) >= n_routes or tried >= budget:
                break
            si = int(si)
            dests = [int(j) for j in rng.permutation(len(self.places))
                     if START_DISTANCE[0] <= dist[si, j] <= START_DISTANCE[1]
                     and self.place_pano[j] != self.place_pano[si]]
            finders: dict[str, Callable] = {}
            taken = 0
            for j in dests:
                if taken >= MAX_ROUTES_PER_START or len(routes) >= n_routes or tried >= budget:
                    break
                if per_dest.get(j, 0) >= MAX_ROUTES_PER_DEST:
                    continue
                mode = ("fewest", "random", "most")[int(rng.integers(3))]
                if mode not in finders:
                    finders[mode] = router.paths_from(int(self.place_pano[si]), mode, rng)
                tried += 1
                path = finders[mode](int(self.place_pano[j]))
                if path is None:
                    continue
                ms = milestones_of(path, self.panos)
                if quota.get(len(ms), 0) > 0:
                    route = self.build(self.places[si], self.places[j], path, ms)
                    if route is not None:
                        quota[len(ms)] -= 1
                        accept(route, j)
                        taken += 1
                elif MILESTONES[0] <= len(ms) <= MILESTONES[1] and len(spare) < 2 * n_routes:
                    spare.append((si, j, path, ms))
        unfilled = {m: q for m, q in quota.items() if q > 0}
        pairs = {(r.start.index, r.dest.index) for r in routes}
        for si, j, path, ms in spare:  # the city could not fill some quota: take any valid route
            if len(routes) >= n_routes:
                break
            if (si, j) in pairs or per_dest.get(j, 0) >= MAX_ROUTES_PER_DEST:
                continue
            route = self.build(self.places[si], self.places[j], path, ms)
            if route is not None:
                pairs.add((si, j))
                accept(route, j)
        stats = {"candidates_tried": tried, "unfilled_quota": {str(m): q for m, q in unfilled.items()},
                 "target_shares": {str(m): s for m, s in MILESTONE_SHARES.items()}}
        return routes, stats


# ------------------------------------------------------------------------------------ route record
def place_record(place: Place, frame: LocalFrame, relocated: np.ndarray, street: str, place_id: str) -> dict:
    """A V-IRL-style place dict (name, geocode, types, ...) plus ``relocated_geocode``."""
    rec = place.to_json(frame.to_latlng(place.position)[0].tolist(), street)
    rec["place_id"] = place_id
    rec["relocated_geocode"] = frame.to_latlng(relocated)[0].tolist()
    return rec


def route_record(route: Route, route_id: int, graph: StreetGraph, panos: PanoPoints, frame: LocalFrame,
                 street_of_place: Callable[[Place], str], place_id: Callable[[Place], str]) -> dict:
    """The V-IRL route dict: every field the V-IRL env reads, plus the collector's other fields."""
    geo = frame.to_latlng(panos.xz)
    blocks, landmark_list, instructions = [], [], []
    human = 0
    for k, m in enumerate(route.milestones):
        last = k == len(route.milestones) - 1
        at = panos.xz[m.pano]
        if m.landmark is None:
            text = NO_LANDMARK
        else:
            text = landmark_string(m.landmark, at, m.heading, destination=last)
        blocks.append(milestone_block(k, text, m.distance, human, m.heading))
        human = int(m.heading)
        if not last:
            landmark_list.append(None if m.landmark is None else
                                 place_record(m.landmark, frame, panos.xz[_nearest(panos, m.landmark.position)],
                                              street_of_place(m.landmark), place_id(m.landmark)))
        verb = "Head" if k == 0 else f"Turn <b>{_turn_word(route.milestones[k - 1].heading, m.heading)}</b> onto"
        instructions.append(f"{verb} <b>{compass_word(m.heading) if k == 0 else route.streets[k]}</b>"
                            + (f" on <b>{route.streets[k]}</b>" if k == 0 else ""))
    distances = [int(round(m.distance)) for m in route.milestones]
    path_geo = geo[route.path]
    return {
        "route_id": route_id,
        "start_place": place_record(route.start, frame, panos.xz[route.start_pano], street_of_place(route.start),
                                    place_id(route.start)),
        "dest_place": place_record(route.dest, frame, panos.xz[route.dest_pano], street_of_place(route.dest),
                                   place_id(route.dest)),
        "route_results": {
            "geocode_list": [geo[m.pano].tolist() for m in route.milestones],
            "polyline": encode_polyline(path_geo),
            "instructions": instructions,
            "distance_list": distances,
            "time_list": [int(round(d / WALK_SPEED)) for d in distances],
            "distance": int(sum(distances)),
            "time": int(round(sum(distances) / WALK_SPEED)),
            "n_landmarks": sum(x is not None for x in landmark_list),
            "landmark_list": landmark_list,
        },
        "init_heading": 0,
        "instruction": natural_instruction(route, panos),
        "milestone_info": "\n".join(blocks),
    }


def _nearest(panos: PanoPoints, xz: np.ndarray) -> int:
    return int(np.argmin(np.linalg.norm(panos.xz - xz, axis=1)))


def _turn_word(prev: float, new: float) -> str:
    rel = (new - prev + 180.0) % 360.0 - 180.0
    if abs(rel) < 67.5:
        return "slight right" if rel > 0 else "slight left"
    if abs(rel) > 157.5:
        return "around"
    return "right" if rel > 0 else "left"


def natural_instruction(route: Route, panos: PanoPoints) -> str:
    """A plain-English description of the route (V-IRL's GPT-4 ``instruction`` field; the env does
    not read it)."""
    parts = []
    for k, m in enumerate(route.milestones):
        if k == 0:
            head = f"head {compass_word(m.heading)} on {route.streets[k]}"
        else:
            head = f"turn {_turn_word(route.milestones[k - 1].heading, m.heading)} onto {route.streets[k]}"
        walk = f"walk about {int(round(m.distance))} meters"
        if k == len(route.milestones) - 1:
            where = landmark_string(route.dest, panos.xz[m.pano], m.heading, False).rsplit(" on your ", 1)[1]
            parts.append(f"{head} and {walk} to {route.dest.name}, which will be on your {where}")
        elif m.landmark is not None:
            parts.append(f"{head} and {walk} until you see {m.landmark.name}")
        else:
            parts.append(f"{head} and {walk} to the next intersection")
    text = "; then ".join(parts)
    return text[0].upper() + text[1:] + "."


def encode_polyline(latlng: np.ndarray) -> str:
    """Google's encoded polyline format (precision 1e-5), as in Google routing results."""
    out, prev = [], (0, 0)
    for lat, lng in latlng:
        cur = (int(round(lat * 1e5)), int(round(lng * 1e5)))
        for v in (cur[0] - prev[0], cur[1] - prev[1]):
            v = ~(v << 1) if v < 0 else v << 1
            while v >= 0x20:
                out.append(chr((0x20 | (v & 0x1F)) + 63))
                v >>= 5
            out.append(chr(v + 63))
        prev = cur
    return "".join(out)
