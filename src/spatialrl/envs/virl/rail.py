"""The ground-truth "rail" of an episode: its points, headings, turn labels and instruction text.

Everything here reproduces the reference bit for bit in the default ``faithful`` mode, quirks included
(notes §1.5). The order of Python-``random`` calls is part of the contract: a reset draws the route
(the env does that), then ``randint(0, 359)`` for the start heading when ``init_heading`` is 0, then
exactly ``n`` (= ``straight_line_length``, 5) draws of ``random()`` per segment longer than 5 m,
whether or not the interpolated point later survives.

Rail shape: ``[start: turn] [forward points] [intersection: turn] ... [destination: stop]``. A correct
``turn_direction`` both turns and advances one point; the heading of a point is the direction of the
segment arriving at it (the start faces the random start heading).

:class:`Fixes` names the three known reference bugs; ``fixed`` mode turns all three corrections on.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import cached_property

from spatialrl.envs.virl.data import MAPPING_RADIUS_M, Milestone, PanoIndex, Problem, Route, VirlDataset
from spatialrl.envs.virl.geo import LatLng, geodesic_m, interpolate
from spatialrl.errors import DataError

NO_LANDMARKS_START = "No landmarks nearby"  # the rail's own wording at start/forward points (plural)
INTERSECTION_OBS = "You observe an intersection"
FORWARD = "forward()"
STOP = "stop()"
RELATIVE_WORDS = ("left", "right", "slightly left", "slightly right")
MIN_SEGMENT_M = 5.0  # segments at most this long get no interpolated points
MIN_END_GAP_M = 8.0  # interpolated points this close to either end are dropped


@dataclass(frozen=True)
class Fixes:
    """Corrections of the reference's known bugs (all off = ``faithful``).

    - ``heading_wrap``: relative turn labels from the wrapped difference in (-180, 180] instead of the
      raw ``next - prev`` (the reference labels 350°→10° a "left" turn).
    - ``grid_order``: lay the 2×2 grid out as the prompt says, ``[front, right / back, left]``, instead
      of the reference's ``[left-behind, left-front / right-front, right-behind]``.
    - ``intersection_reward``: give the −1.5 observation penalty by comparing the answer's
      "intersection" claim with whether the agent is at an intersection (the reference compares with the
      landmark text, which almost never mentions one, so it fires at real intersections instead).
    """

    heading_wrap: bool = False
    grid_order: bool = False
    intersection_reward: bool = False

    @property
    def name(self) -> str:
        on = [k for k in FIX_NAMES if getattr(self, k)]
        if not on:
            return "faithful"
        return "fixed" if len(on) == len(FIX_NAMES) else ",".join(on)


FIX_NAMES = ("heading_wrap", "grid_order", "intersection_reward")


def parse_rail_mode(mode: str | Fixes | None) -> Fixes:
    """``faithful`` | ``fixed`` | a comma list of fix names (``heading_wrap,grid_order``), optionally
    written ``fixed:heading_wrap,...``."""
    if isinstance(mode, Fixes):
        return mode
    text = (mode or "faithful").strip()
    if text == "faithful":
        return Fixes()
    if text == "fixed":
        return Fixes(True, True, True)
    if text.startswith("fixed:"):
        text = text[len("fixed:"):]
    names = [t.strip() for t in text.split(",") if t.strip()]
    unknown = [n for n in names if n not in FIX_NAMES]
    if unknown or not names:
        raise ValueError(
            f"rail_mode {mode!r}: expected 'faithful', 'fixed' or a comma list of {list(FIX_NAMES)}"
        )
    return Fixes(**{n: True for n in names})


def relative_label(prev_heading: float, next_heading: float, wrap: bool = False) -> str:
    """The relative turn word for going from ``prev_heading`` to ``next_heading``.

    Thresholds in the reference's order: ``< -45`` left, ``> 45`` right, ``[-45, 0]`` slightly left
    (so exactly 0 is "slightly left"), else slightly right. Faithful mode uses the unwrapped difference.
    """
    diff = next_heading - prev_heading
    if wrap:
        diff = -((-diff + 180.0) % 360.0 - 180.0)  # into (-180, 180]
    if diff < -45:
        return "left"
    if diff > 45:
        return "right"
    if -45 <= diff <= 0:
        return "slightly left"
    return "slightly right"


@dataclass(frozen=True)
class InstructionPlan:
    """The instruction text and per-milestone actions of one route for one start heading."""

    sentences: tuple[str, ...]  # 2 per milestone
    absolute_actions: tuple[str, ...]  # per rail "idx" (start, milestones 1..M-1), then "stop()"
    relative_actions: tuple[str, ...]
    landmarks: tuple[str, ...]  # observation per idx: plural start text, then milestone landmarks
    headings: tuple[float, ...]  # [start heading] + milestone headings

    @cached_property
    def text(self) -> str:
        """The global instruction: ``"{i}. {sentence}\\n"`` numbered from 1."""
        return "".join(f"{i + 1}. {s}\n" for i, s in enumerate(self.sentences))


def plan_instructions(milestones: tuple[Milestone, ...] | list[Milestone], start_heading: float,
                      wrap: bool = False) -> InstructionPlan:
    """Instruction sentences, turn actions and headings exactly as the reference writes them."""
    sentences: list[str] = []
    absolute: list[str] = []
    relative: list[str] = []
    prev = start_heading
    last = len(milestones) - 1
    for idx, m in enumerate(milestones):
        rel = relative_label(prev, m.heading_deg, wrap)
        prev = m.heading_deg
        absolute.append(f"turn_direction({m.direction})")
        relative.append(f"turn_direction({rel})")
        if idx == last:  # checked first: a 1-milestone route never says "First,"
            sentences.append(f"Turn {rel} to face {m.direction}.")
            sentences.append(f"Move forward until you reach destination where {m.landmark}.")
        else:
            first = "First, turn" if idx == 0 else "Turn"
            sentences.append(f"{first} {rel} to face {m.direction}.")
            if m.landmark == "No landmark nearby":
                sentences.append("Move forward until you reach next intersection.")
            else:
                sentences.append(f"Move forward until you reach next intersection where {m.landmark}.")
    absolute.append(STOP)
    relative.append(STOP)
    return InstructionPlan(
        sentences=tuple(sentences),
        absolute_actions=tuple(absolute),
        relative_actions=tuple(relative),
        landmarks=(NO_LANDMARKS_START,) + tuple(m.landmark for m in milestones),
        headings=(start_heading,) + tuple(float(m.heading_deg) for m in milestones),
    )


# --------------------------------------------------------------------------------------------- geometry


@dataclass(frozen=True)
class Segment:
    """The way from the previous (relocated) rail intersection to the next milestone."""

    distance_m: float  # geodesic from the previous relocated point to the *raw* milestone geocode
    end: LatLng  # the milestone geocode relocated to its pano key
    candidates: tuple[LatLng | None, ...]  # per fraction i/n: the relocated point if it would be kept


@dataclass(frozen=True)
class RouteGeometry:
    """Everything about a route's rail that does not depend on random draws."""

    start: LatLng
    segments: tuple[Segment, ...]

    def pano_points(self) -> list[LatLng]:
        """Every geocode a rail of this route can visit, whatever the draws."""
        pts = [self.start]
        for s in self.segments:
            pts += [c for c in s.candidates if c is not None]
            pts.append(s.end)
        return pts


def _unresolved(panos: PanoIndex, route: Route, point: int, geocode: LatLng, what: str) -> Problem:
    key, dist = panos.nearest(geocode)
    return Problem(
        f"route {route.index}, point {point} ({what} [{geocode[0]}, {geocode[1]}])",
        f"no panorama within {MAPPING_RADIUS_M:g} m (nearest is {panos.pano_id(key)!r} at {dist:.1f} m)",
        route=route.index,
        point=point,
    )


def compute_geometry(panos: PanoIndex, route: Route, n: int = 5) -> tuple[RouteGeometry | None, list[Problem]]:
    """Relocate a route's start and milestones and its ``n`` interpolated candidates per segment.

    Interpolation runs from the previous *relocated* point to the *raw* next geocode (spec); a candidate
    that relocates to nothing, or lands within 8 m of either relocated end, is dropped (so the i = n
    point, the intersection itself, always is). Unresolvable start or milestone points are problems
    (the reference would call Google's online API there and crash offline).
    """
    problems: list[Problem] = []
    start = panos.relocate(route.start)
    if start is None:
        problems.append(_unresolved(panos, route, 0, route.start, "start_place.relocated_geocode"))
    ends = []
    for j, g in enumerate(route.geocodes):
        r = panos.relocate(g)
        if r is None:
            problems.append(_unresolved(panos, route, j + 1, g, f"route_results.geocode_list[{j}]"))
        ends.append(r)
    if problems:
        return None, problems
    segments = []
    prev = start
    for raw, end in zip(route.geocodes, ends, strict=True):
        distance = geodesic_m(prev, raw)
        cands: list[LatLng | None] = []
        for i in range(n):
            p = panos.relocate(interpolate(prev, raw, i + 1, n))
            keep = p is not None and geodesic_m(prev, p) > MIN_END_GAP_M and geodesic_m(end, p) > MIN_END_GAP_M
            cands.append(p if keep else None)
        segments.append(Segment(distance_m=distance, end=end, candidates=tuple(cands)))
        prev = end
    return RouteGeometry(start=start, segments=tuple(segments)), []


def route_geometry(dataset: VirlDataset, route_index: int, n: int = 5) -> RouteGeometry:
    """Cached :func:`compute_geometry`; raises :class:`DataError` naming the route and point."""
    key = (route_index, n)
    if key not in dataset.geometry:
        geometry, problems = compute_geometry(dataset.panos, dataset.routes[route_index], n)
        if geometry is None:
            raise DataError(f"{dataset.root}: " + "; ".join(str(p) for p in problems))
        dataset.geometry[key] = geometry
    return dataset.geometry[key]


# ------------------------------------------------------------------------------------------------ rail


@dataclass(frozen=True)
class RailPoint:
    """One position of the rail (the reference's ``gt_rail_info`` entry)."""

    geocode: LatLng
    heading: float
    gt_action: str  # in the episode's action space
    absolute_action: str
    relative_action: str
    observation: str  # landmark text only (what the reference's verifier compares against)
    intersection_observation: str
    instruction: str
    instruction_idx: int  # 1-based
    kind: str  # start | forward | intersection | destination

    @property
    def at_intersection(self) -> bool:
        """Whether the oracle observation says "You observe an intersection" here."""
        return bool(self.intersection_observation) and self.gt_action != STOP

    @property
    def oracle_observation(self) -> str:
        """``landmark + '; ' + intersection text``, the latter blanked at the stop point."""
        inter = "" if self.gt_action == STOP else self.intersection_observation
        return f"{self.observation}; {inter}"


@dataclass(frozen=True)
class Rail:
    route_index: int
    start_heading: float
    absolute_action: bool
    plan: InstructionPlan
    points: tuple[RailPoint, ...]

    @property
    def global_instruction(self) -> str:
        return self.plan.text

    def __len__(self) -> int:
        return len(self.points)


def start_heading_for(route: Route, rng: random.Random) -> float:
    """``init_heading``, or ``randint(0, 359)`` when it is 0/missing (every V-IRL-collected route)."""
    return route.init_heading if route.init_heading else rng.randint(0, 359)


def build_rail(
    dataset: VirlDataset,
    route_index: int,
    rng: random.Random,
    *,
    absolute_action: bool = True,
    drop_rate: float = 0.5,
    straight_line_length: int = 5,
    fixes: Fixes = Fixes(),
    start_heading: float | None = None,
) -> Rail:
    """Build one episode's rail, drawing from ``rng`` in the reference's order (heading, then drops).

    ``start_heading`` overrides the route's heading without drawing (tests, ``show-route``).
    """
    route = dataset.routes[route_index]
    geometry = route_geometry(dataset, route_index, straight_line_length)
    heading = start_heading_for(route, rng) if start_heading is None else start_heading
    plan = plan_instructions(route.milestones, heading, wrap=fixes.heading_wrap)
    actions = plan.absolute_actions if absolute_action else plan.relative_actions
    last = len(route.milestones)

    def point(geocode: LatLng, idx: int, kind: str, instruction_idx: int, forward: bool) -> RailPoint:
        return RailPoint(
            geocode=geocode,
            heading=plan.headings[idx],
            gt_action=FORWARD if forward else actions[idx],
            absolute_action=FORWARD if forward else plan.absolute_actions[idx],
            relative_action=FORWARD if forward else plan.relative_actions[idx],
            observation=NO_LANDMARKS_START if forward else plan.landmarks[idx],
            intersection_observation=INTERSECTION_OBS if (idx != 0 and not forward) else "",
            instruction=plan.sentences[instruction_idx],
            instruction_idx=instruction_idx + 1,
            kind=kind,
        )

    points = [point(geometry.start, 0, "start", 0, forward=False)]
    instruction_idx = 1
    for idx, seg in enumerate(geometry.segments, start=1):
        if seg.distance_m > MIN_SEGMENT_M:
            for i in range(straight_line_length):
                if rng.random() < drop_rate:
                    continue
                cand = seg.candidates[i]
                if cand is not None:
                    points.append(point(cand, idx, "forward", instruction_idx, forward=True))
            instruction_idx += 1
        is_stop = idx == last
        if is_stop:
            instruction_idx -= 1
        points.append(point(seg.end, idx, "destination" if is_stop else "intersection", instruction_idx, forward=False))
        instruction_idx += 1
    return Rail(
        route_index=route_index,
        start_heading=heading,
        absolute_action=absolute_action,
        plan=plan,
        points=tuple(points),
    )
