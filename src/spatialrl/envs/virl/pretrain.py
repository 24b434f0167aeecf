"""V-IRL visual pretraining data from the simulator's free labels (the V-IRL twin of ``envs/tvr/pretrain.py``).

The built-in V-IRL agent gets ``forward()`` and turns right from the text but the ``stop()`` at the
destination only 21-53% of the time, and the image probe shows it ignores its grid: the destination is
the one decision only the grid can make (the shop's sign is in one of its views; at grid 224 its lettering
is a blur but its colour and icon are not). ``spatialrl virl pretrain-data`` writes single-turn questions
about a grid, labelled by the simulator, as an ordinary SFT dataset (``spatialrl-sft/1``, the folder
``spatialrl data sft`` writes), so ``spatialrl train sft`` and ``spatialrl data merge`` take it unchanged.

Sample kinds (one user turn: the grid, then the prompt's ``[Observation format]`` block and a question;
one short answer):

* ``destination_here`` — "Have you reached the destination <name>?" → ``yes`` / ``no``, labelled with
  the env's own stop rule: ``yes`` exactly at a rail point whose expert action is ``stop()``. Half the
  samples are ``yes`` (a route's destination pose); the ``no`` samples are split evenly over
  ``approach`` (a forward point of the last street before the destination: the same heading a few metres
  short, where the sign is often already in sight — the decision the probe found the model cannot make),
  ``route`` (any other point of the route: start, intersections, earlier streets) and
  ``other_destination`` (another route's destination pose: a different shop's sign in the same place in
  the grid, so only the sign's look tells the two apart). The question says "reached", not "visible",
  because the label is the stop rule: at an approach point the sign may be visible and the answer is no.
* ``which_view`` — "Which view of the grid shows <name>: front, right, back or left?" → the view, named
  as the env's prompt names the grid's tiles (``[front, right / back, left]``, top-left to bottom-right;
  in the reference layout, ``rail_mode=faithful``, those names are the prompt's, not the directions the
  tiles face). The label is the city generator's sign-visibility rule applied per view
  (:mod:`~spatialrl.envs.virl.signs`), for landmark places within 18 m whose sign is in exactly one view;
  the four answers are balanced (a view with fewer such signs than its share repeats some).

Poses are the rail points any episode can visit: each route's rail (``rail.build_rail``) with every
interpolated point kept, start headings drawn from the seed. Grids come from the env's renderer
(``pixels.GridRenderer`` with the env's grid size and layout: the pixels ``VirlEnv`` observes there).
Everything follows from ``seed`` (kinds, classes, routes, points, the which-view search order); samples
are stored in a seeded order.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from spatialrl.envs.pretrain_data import known_options
from spatialrl.envs.pretrain_data import parse_kinds as parse_any_kinds
from spatialrl.envs.virl.data import VirlDataset
from spatialrl.envs.virl.pixels import GridCache, GridRenderer
from spatialrl.envs.virl.prompts import PROMPT_VL
from spatialrl.envs.virl.rail import STOP, Rail, build_rail, parse_rail_mode
from spatialrl.errors import DataError

KINDS = ("destination_here", "which_view")
YES, NO = "yes", "no"
# destination_here classes: the destination itself, then the three kinds of "not here"
AT, APPROACH, ROUTE, ELSEWHERE = "destination", "approach", "route", "other_destination"

# The prompt's own description of the grid, and its tile names in grid order (TL, TR, BL, BR)
OBSERVATION_BLOCK = PROMPT_VL[PROMPT_VL.index("\n[Observation format]"):PROMPT_VL.index("You need to identify")]
VIEWS: tuple[str, ...] = tuple(  # "[front, right\n back, left]": rows split by a newline, not a comma
    w.strip() for w in re.split(r"[,\n]", OBSERVATION_BLOCK.split("headings:\n[", 1)[1].split("]", 1)[0]))
QUESTION = {
    "destination_here": "Have you reached the destination {name}? Answer yes or no.",
    "which_view": f"Which view of the grid shows {{name}}: {', '.join(VIEWS[:-1])} or {VIEWS[-1]}?",
}

# The V-IRL env options that change a grid or the set of poses. grid_size defaults to the built-in
# model's 224 (configs/sft/virl_small.yaml), not the env's 2405 (17 MB a grid). A destination pose
# repeats across samples, so grids are cached (cache_mb).
DEFAULT_OPTIONS: dict[str, Any] = {"grid_size": 224, "rail_mode": "faithful", "straight_line_length": 5,
                                   "cache_mb": 256.0}
_MINIMUM = {"grid_size": 21, "straight_line_length": 1, "cache_mb": 0}  # 21: pixels.grid_layout's smallest grid


@dataclass(frozen=True)
class Pose:
    """Where the agent stands and looks: point ``point`` of route ``route``'s full rail."""

    route: int
    point: int
    kind: str  # start | forward | intersection | destination (the rail's kind)
    pano_id: str
    heading: float


@dataclass(frozen=True)
class Item:
    """One planned sample."""

    index: int
    kind: str
    cls: str  # destination_here: destination | approach | route | other_destination; which_view: the view
    name: str  # the place the question names
    pose: Pose

    @property
    def answer(self) -> str:
        if self.kind == "destination_here":
            return YES if self.cls == AT else NO
        return self.cls

    @property
    def sample_id(self) -> str:
        return f"{self.kind}-{self.index:07d}"


# ------------------------------------------------------------------------------------------- options
def pretrain_options(sets: dict[str, Any] | None) -> dict[str, Any]:
    """The grid options (``--set``) over their defaults; unknown keys and bad values are errors."""
    opts = known_options("virl", sets, DEFAULT_OPTIONS, _MINIMUM, "the grid options of the V-IRL env")
    try:
        parse_rail_mode(opts["rail_mode"])
    except ValueError as e:
        raise DataError(f"virl pretrain-data option {e}") from None
    return opts


def parse_kinds(value: str | list[str] | tuple[str, ...] | None) -> tuple[str, ...]:
    """``"destination_here,which_view"`` → the kinds, in :data:`KINDS` order, each once."""
    return parse_any_kinds(value, KINDS)


# ------------------------------------------------------------------------------------------- poses
def full_rails(dataset: VirlDataset, seed: int, options: dict[str, Any]) -> list[Rail]:
    """Every route's rail with every interpolated point kept (drop rate 0: each position an episode can
    visit); each route's start heading from its own seeded draw."""
    fixes = parse_rail_mode(options["rail_mode"])
    return [build_rail(dataset, r, random.Random(f"virl-pretrain/{seed}/{r}"), drop_rate=0.0,
                       straight_line_length=int(options["straight_line_length"]), fixes=fixes)
            for r in range(len(dataset.routes))]


def pose_of(dataset: VirlDataset, rail: Rail, point: int) -> Pose:
    """The pose of a rail point, with the pano the env renders there (``VirlEnv._observe``'s lookup)."""
    p = rail.points[point]
    key = dataset.panos.relocate(p.geocode)
    assert key is not None  # rail points are pano keys
    return Pose(rail.route_index, point, p.kind, dataset.panos.pano_id(key), float(p.heading))


def _counts(total: int, parts: int) -> list[int]:
    """``total`` split into ``parts`` near-equal whole counts (the first ones get the remainder)."""
    return [total // parts + (1 if i < total % parts else 0) for i in range(parts)]


def _pick(rng: np.random.Generator, values: list[Any]) -> Any:
    return values[int(rng.integers(len(values)))]


def plan_destination(dataset: VirlDataset, rails: list[Rail], n: int, rng: np.random.Generator
                     ) -> list[tuple[str, str, Pose]]:
    """``(class, destination name, pose)`` of ``n`` destination_here samples: half at a destination, the
    rest split evenly over approach / route / other_destination (module docstring)."""
    routes = dataset.routes
    dest = [pose_of(dataset, rail, len(rail) - 1) for rail in rails]
    approach: dict[int, list[int]] = {}
    other: dict[int, list[int]] = {}
    for r, rail in enumerate(rails):
        assert rail.points[-1].gt_action == STOP and all(p.gt_action != STOP for p in rail.points[:-1])
        last_turn = max(i for i, p in enumerate(rail.points[:-1]) if p.kind != "forward")
        points = [i for i in range(len(rail) - 1) if pose_of(dataset, rail, i).pano_id != dest[r].pano_id]
        approach[r] = [i for i in points if i > last_turn]
        other[r] = [i for i in points if i <= last_turn]
    elsewhere = {r: [o for o in range(len(rails)) if dest[o].pano_id != dest[r].pano_id
                     and routes[o].dest_name != routes[r].dest_name] for r in range(len(rails))}
    pools = {APPROACH: approach, ROUTE: other, ELSEWHERE: elsewhere}
    usable = {cls: [r for r, choices in pool.items() if choices] for cls, pool in pools.items()}
    n_yes, n_no = _counts(n, 2)
    classes = [AT] * n_yes + [c for c, k in zip(pools, _counts(n_no, len(pools)), strict=True) for _ in range(k)]
    out = []
    for cls in classes:
        if cls == AT:
            r = int(rng.integers(len(rails)))
            out.append((cls, routes[r].dest_name, dest[r]))
            continue
        if not usable[cls]:
            raise DataError(f"{dataset.root}: no route offers a {cls!r} pose for destination_here "
                            f"({'a city of one destination' if cls == ELSEWHERE else 'every route too short'}); "
                            "use a larger city")
        r = _pick(rng, usable[cls])
        where = _pick(rng, pools[cls][r])
        pose = dest[where] if cls == ELSEWHERE else pose_of(dataset, rails[r], where)
        out.append((cls, routes[r].dest_name, pose))
    return out


def plan_views(dataset: VirlDataset, rails: list[Rail], n: int, rng: np.random.Generator, prompt_order: bool
               ) -> list[tuple[str, str, Pose]]:
    """``(view, place name, pose)`` of ``n`` which_view samples, the four views balanced. Poses are
    searched in a seeded order until every view has its share of (place, pose) candidates."""
    from spatialrl.envs.virl.signs import SignViews

    quotas = _counts(n, len(VIEWS))
    poses: dict[tuple[str, float], Pose] = {}
    for rail in rails:
        for i in range(len(rail)):
            pose = pose_of(dataset, rail, i)
            poses.setdefault((pose.pano_id, pose.heading), pose)
    distinct = list(poses.values())
    pools: list[list[tuple[str, Pose]]] = [[] for _ in VIEWS]
    with SignViews(dataset) as world:
        for j in rng.permutation(len(distinct)).tolist():
            if all(len(pool) >= q for pool, q in zip(pools, quotas, strict=True)):
                break
            pose = distinct[j]
            for name, view in world.shown(pose.pano_id, pose.heading, prompt_order):
                pools[view].append((name, pose))
    out = []
    for view, (pool, q) in enumerate(zip(pools, quotas, strict=True)):
        if q and not pool:
            raise DataError(f"{dataset.root}: no rail pose shows a landmark's sign in the {VIEWS[view]!r} view "
                            "alone; use a larger city or --kinds destination_here")
        # each candidate once before any repeats (a small city may hold fewer than the view's share)
        order = np.resize(rng.permutation(len(pool)), q) if q else []
        out += [(VIEWS[view], *pool[int(k)]) for k in order]
    return out


def plan_items(dataset: VirlDataset, pairs: int, seed: int, kinds: tuple[str, ...], options: dict[str, Any]
               ) -> list[Item]:
    """Every sample, in the order the dataset stores them. Each kind draws from its own stream, so
    changing one kind's share never moves the other's poses."""
    if isinstance(pairs, bool) or not isinstance(pairs, int) or pairs < 1:
        raise DataError(f"--pairs must be a positive integer, got {pairs!r}")
    rails = full_rails(dataset, seed, options)
    planned: list[tuple[str, str, str, Pose]] = []
    for kind, n in zip(kinds, _counts(pairs, len(kinds)), strict=True):
        rng = np.random.default_rng([seed, 29, KINDS.index(kind)])
        if kind == "destination_here":
            planned += [(kind, *p) for p in plan_destination(dataset, rails, n, rng)]
        elif n:
            grid_order = parse_rail_mode(options["rail_mode"]).grid_order
            planned += [(kind, *p) for p in plan_views(dataset, rails, n, rng, grid_order)]
    order = np.random.default_rng([seed, 29, len(KINDS)]).permutation(len(planned))
    return [Item(i, *planned[k]) for i, k in enumerate(order.tolist())]


# ------------------------------------------------------------------------------------------- samples
def conversation(kind: str, grid: np.ndarray, name: str, answer: str) -> list[dict[str, Any]]:
    """One sample's chat, in the V-IRL prompt's layout: one user turn (the grid first, then text), the answer."""
    return [
        {"role": "user", "content": [{"type": "image", "image": grid},
                                     {"type": "text", "text": OBSERVATION_BLOCK + "\n" + QUESTION[kind].format(name=name)}]},
        {"role": "assistant", "content": [{"type": "text", "text": answer}]},
    ]


def pretrain_samples(data: str | Path, pairs: int, seed: int, kinds: tuple[str, ...] = KINDS,
                     options: dict[str, Any] | None = None) -> Iterator[dict[str, Any]]:
    """The dataset's samples (``{"id", "episode_id", "category", "turns", "messages", "pose", "place"}``,
    grids as uint8 arrays). Planning (which_view's sign search included) happens on the first ``next``."""
    from spatialrl.envs.virl.validate import load_dataset

    opts = pretrain_options(options)
    dataset = load_dataset(data, images=True, straight_line_length=int(opts["straight_line_length"]))
    items = plan_items(dataset, pairs, seed, kinds, opts)
    cache = GridCache(int(float(opts["cache_mb"]) * (1 << 20))) if opts["cache_mb"] > 0 else None
    renderer = GridRenderer(dataset, int(opts["grid_size"]), parse_rail_mode(opts["rail_mode"]).grid_order, cache)
    for item in items:
        grid = renderer.render(item.pose.pano_id, item.pose.heading)
        pose = item.pose
        yield {"id": item.sample_id, "episode_id": item.sample_id, "category": f"{item.kind}-{item.cls}", "turns": [0],
               "messages": conversation(item.kind, grid, item.name, item.answer), "place": item.name,
               "pose": {"route": pose.route, "point": pose.point, "kind": pose.kind, "pano_id": pose.pano_id,
                        "heading": pose.heading}}


def pretrain_meta(data: str | Path, pairs: int, seed: int, kinds: tuple[str, ...], options: dict[str, Any],
                  command: str | None = None) -> dict[str, Any]:
    """What ``meta.json`` says besides the counts (``io.write_sft_samples`` adds those)."""
    return {
        "task": "virl",
        # the V-IRL env's option names, so a model trained on this records the grid size it saw
        "options": {"data": str(data), **pretrain_options(options)},
        "seed": seed,
        "samples_mode": "step",
        "cot": False,
        "pretrain": {"kinds": list(kinds), "pairs": pairs,
                     "destination_here": "half yes (at a destination: the env's stop rule); the no samples split "
                                         "evenly over approach, route and other_destination poses",
                     "which_view": f"the 4 views balanced, named as the prompt names the tiles {list(VIEWS)}; "
                                   "labelled by the city generator's sign-visibility rule per view"},
        "episodes": pairs,  # each sample is its own one-turn episode
        "episodes_dropped": [],
        "command": command,
    }
