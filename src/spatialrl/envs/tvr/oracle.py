"""The optimal planner: breadth-first search over the full (cell, yaw, pitch) graph.

TVRBench's ``bfs_distance`` counts grid cells only (4-connected, no turns, no diagonals), so it is not
the number of actions an agent needs; the paper's SPL file was never released. Here the graph's edges
are exactly :meth:`Lattice.step` (via its transition table), so the plan is optimal under the env's
own rules, including diagonal moves, failed moves and look limits.

Step counting (the convention SPL relies on): ``optimal_steps`` = BFS actions to the target pose **plus
one for the Stop** that success requires. The env counts every issued action, Stop included, so an
expert episode takes exactly ``optimal_steps`` steps and scores SPL = 1.0.
"""

from __future__ import annotations

import heapq
import math
from collections import deque

import numpy as np

from spatialrl.envs.tvr.lattice import (
    ACTION_INDEX,
    ACTIONS,
    GRID,
    LOOKS,
    MOVES,
    ROTATIONS,
    STOP,
    Lattice,
    Pose,
)

UNREACHABLE = -1

# Tie-breaks among equally optimal actions (every one keeps SPL = 1.0):
# * ``look_first`` (default): rotations, then tilts, then moves. 78% of expert states have several optimal
#   actions, and where the canonical order moves, a rotation or tilt is usually equally optimal; turning
#   first brings the target into view before translating, so the label follows what the agent can see
#   (a policy cannot learn "walk towards a target that is behind you" from pixels).
# * ``canonical``: TVRBench's action order (moves first) — the tie-break of earlier releases.
TIE_BREAKS: dict[str, tuple[int, ...]] = {
    "look_first": tuple(ACTION_INDEX[a] for a in (*ROTATIONS, *LOOKS, *MOVES)),
    "canonical": tuple(ACTION_INDEX[a] for a in (*MOVES, *ROTATIONS, *LOOKS)),
}
DEFAULT_TIE_BREAK = "look_first"


def distances_to(lattice: Lattice, target: Pose) -> np.ndarray:
    """Fewest actions from every state to ``target`` (``UNREACHABLE`` = −1 where no path exists).

    Backward BFS: a level's frontier is every unvisited state with *some* action leading into the
    previous level, found with one vectorised look-up per level over the transition table.
    """
    table = lattice.transition_table()
    dist = np.full(lattice.n_states, UNREACHABLE, dtype=np.int32)
    goal = lattice.state_id(target)
    dist[goal] = 0
    frontier = np.zeros(lattice.n_states, dtype=bool)
    frontier[goal] = True
    level = 0
    while True:
        level += 1
        hits = frontier[table].any(axis=1) & (dist == UNREACHABLE)
        if not hits.any():
            return dist
        dist[hits] = level
        frontier = hits


def optimal_steps(lattice: Lattice, start: Pose, target: Pose, dist: np.ndarray | None = None) -> int:
    """Actions an optimal agent issues from ``start``, the final Stop included (see module docstring)."""
    dist = distances_to(lattice, target) if dist is None else dist
    d = int(dist[lattice.state_id(start)])
    if d == UNREACHABLE:
        raise ValueError(f"target {tuple(target)} cannot be reached from {tuple(start)}")
    return d + 1


def optimal_actions(lattice: Lattice, pose: Pose, dist: np.ndarray) -> list[str]:
    """Every action that is optimal at ``pose`` (canonical order): ``[Stop]`` at the target, else the
    actions that lower the distance by one (``[Stop]`` where nothing reaches the target)."""
    here = int(dist[lattice.state_id(pose)])
    if here in (0, UNREACHABLE):
        return [STOP]  # unreachable cannot happen on generated tasks; stopping ends the episode
    row = lattice.transition_table()[lattice.state_id(pose)]
    found = [ACTIONS[a] for a, nxt in enumerate(row) if dist[nxt] == here - 1]
    if not found:
        raise AssertionError("BFS distances are inconsistent with the transition table")
    return found


def ranked_optimal_actions(lattice: Lattice, pose: Pose, dist: np.ndarray,
                           tie_break: str = DEFAULT_TIE_BREAK) -> list[str]:
    """Every optimal action at ``pose`` in ``tie_break`` order (see ``TIE_BREAKS``): the first is the
    expert's action, the whole list is the label set of ``spatialrl data sft --labels all_optimal``."""
    if tie_break not in TIE_BREAKS:
        raise ValueError(f"unknown expert tie-break {tie_break!r}; known: {', '.join(TIE_BREAKS)}")
    options = optimal_actions(lattice, pose, dist)
    if options == [STOP]:
        return options
    return sorted(options, key=lambda a: TIE_BREAKS[tie_break].index(ACTION_INDEX[a]))


def next_action(lattice: Lattice, pose: Pose, dist: np.ndarray, tie_break: str = DEFAULT_TIE_BREAK) -> str:
    """The expert's action at ``pose``: Stop at the target, else the optimal action that ``tie_break``
    (see ``TIE_BREAKS``) ranks first. Works from any pose, so it stays right after the agent deviates."""
    return ranked_optimal_actions(lattice, pose, dist, tie_break)[0]


def expert_actions(lattice: Lattice, start: Pose, target: Pose, tie_break: str = DEFAULT_TIE_BREAK) -> list[str]:
    """A shortest action sequence from ``start`` to ``target``, ending with Stop."""
    dist = distances_to(lattice, target)
    if dist[lattice.state_id(start)] == UNREACHABLE:
        raise ValueError(f"target {tuple(target)} cannot be reached from {tuple(start)}")
    actions, pose = [], start
    while True:
        action = next_action(lattice, pose, dist, tie_break)
        actions.append(action)
        if action == STOP:
            return actions
        pose, ok = lattice.step(pose, action)
        assert ok


def grid_bfs_distance(cells: frozenset[tuple[int, int]] | set[tuple[int, int]],
                      source: tuple[int, int]) -> dict[tuple[int, int], int]:
    """TVRBench's ``bfs_distance``: 4-connected grid steps between reachable cells, positions only."""
    dist = {source: 0}
    queue = deque([source])
    while queue:
        x, z = queue.popleft()
        d = dist[(x, z)] + 1
        for nb in ((x + 1, z), (x - 1, z), (x, z + 1), (x, z - 1)):
            if nb in cells and nb not in dist:
                dist[nb] = d
                queue.append(nb)
    return dist


def geodesic_metres(lattice: Lattice, source: tuple[int, int]) -> dict[tuple[int, int], float]:
    """Shortest walking distance (m) from ``source`` to every cell the agent can reach, over the moves
    the env allows (axis 0.25 m, diagonal 0.354 m; neighbours come from the transition table).

    Used for the geodesic variant of the GRPO pose distance: unlike straight-line metres it does not
    reward walking into a wall towards a target in the next room.
    """
    neighbours = cell_neighbours(lattice)
    dist = {source: 0.0}
    heap = [(0.0, source)]
    while heap:
        d, cell = heapq.heappop(heap)
        if d > dist[cell]:
            continue
        for nb in neighbours[cell]:
            nd = d + GRID * math.hypot(nb[0] - cell[0], nb[1] - cell[1])
            if nd < dist.get(nb, math.inf) - 1e-12:
                dist[nb] = nd
                heapq.heappush(heap, (nd, nb))
    return dist


def cell_neighbours(lattice: Lattice) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """Cells one successful move away from each cell, read off the env's transition table."""
    if "cell_neighbours" in lattice.derived:
        return lattice.derived["cell_neighbours"]
    table = lattice.transition_table()
    per_cell = len(table) // len(lattice.cells)
    src = np.repeat(np.arange(len(table)) // per_cell, len(MOVES))
    dst = table[:, : len(MOVES)].reshape(-1) // per_cell
    pairs = np.unique(np.stack([src[src != dst], dst[src != dst]], axis=1), axis=0)
    out: dict[tuple[int, int], list[tuple[int, int]]] = {c: [] for c in lattice.cells}
    for a, b in pairs:
        out[lattice.cells[a]].append(lattice.cells[b])
    lattice.derived["cell_neighbours"] = out
    return out
