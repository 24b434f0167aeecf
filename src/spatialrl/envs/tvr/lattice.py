"""The TVR pose lattice and its move rules: the single source of truth for how an action changes a pose.

TVRBench (``tvrbench/env/thor_env.py``) keeps the agent on a 0.25 m grid of reachable cells, with yaw in
45° steps and pitch ("horizon", AI2-THOR sign: negative looks up) in {−30, 0, +30}. A move teleports to
the neighbouring cell in the agent's frame — at a diagonal heading the *diagonal* neighbour (0.354 m) —
and fails (pose unchanged, step still spent) when that cell is not reachable. Only the destination is
checked, never the corner it cuts, exactly like the reference. A look beyond ±30° fails the same way.
Rotations always succeed.

The env steps with :meth:`Lattice.step`; the oracle builds its transition table by calling the same
method for every (state, action), so the planner can never disagree with the env.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import NamedTuple

import numpy as np

GRID = 0.25  # metres between neighbouring cells
YAW_STEP = 45  # degrees per RotateLeft/RotateRight
PITCH_STEP = 30  # degrees per LookUp/LookDown
PITCH_MIN, PITCH_MAX = -30, 30  # AI2-THOR horizon limits (negative = looking up)
YAWS: tuple[int, ...] = tuple(range(0, 360, YAW_STEP))
PITCHES: tuple[int, ...] = (-30, 0, 30)

# The nine actions in TVRBench's canonical order (``ACTION_NAMES``); every list we show keeps this order.
ACTIONS: tuple[str, ...] = (
    "MoveAhead",
    "MoveBack",
    "MoveLeft",
    "MoveRight",
    "RotateRight",
    "RotateLeft",
    "LookUp",
    "LookDown",
    "Stop",
)
MOVES: tuple[str, ...] = ACTIONS[:4]
ROTATIONS: tuple[str, ...] = ("RotateRight", "RotateLeft")
LOOKS: tuple[str, ...] = ("LookUp", "LookDown")
STOP = "Stop"
ACTION_INDEX = {name: i for i, name in enumerate(ACTIONS)}
_PITCH_INDEX = {p: i for i, p in enumerate(PITCHES)}

# Grid delta (dx, dz) of MoveAhead per heading; AI2-THOR yaw 0 = +z, 90 = +x (clockwise from above).
MOVE_DELTAS: dict[int, tuple[int, int]] = {
    0: (0, 1),
    45: (1, 1),
    90: (1, 0),
    135: (1, -1),
    180: (0, -1),
    225: (-1, -1),
    270: (-1, 0),
    315: (-1, 1),
}

# Which actions each task mode allows (TVRBench's rotation-only / translation-only diagnostics). An action
# outside the mode fails like a blocked move and is left out of the valid-action list.
MODE_ACTIONS: dict[str, frozenset[str]] = {
    "navigation": frozenset(ACTIONS),
    "rotate_only": frozenset(ROTATIONS + LOOKS + (STOP,)),
    "move_only": frozenset(MOVES + (STOP,)),
}


def action_kind(action: str | None) -> str:
    """The paper's action families: translation, rotation, look, stop (``invalid`` for ``None``)."""
    if action is None:
        return "invalid"
    if action in MOVES:
        return "translation"
    if action in ROTATIONS:
        return "rotation"
    if action in LOOKS:
        return "look"
    if action == STOP:
        return "stop"
    raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")


class Pose(NamedTuple):
    """A lattice pose: cell indices (world x = ix·0.25, z = iz·0.25), yaw (deg), pitch (deg, + = down)."""

    ix: int
    iz: int
    yaw: int
    pitch: int

    @property
    def cell(self) -> tuple[int, int]:
        return (self.ix, self.iz)

    def to_dict(self, y: float) -> dict:
        """TVRBench's viewpoint record: ``{"position": {x, y, z}, "rotation_y", "horizon"}``."""
        return {
            "position": {"x": round(self.ix * GRID, 2), "y": float(y), "z": round(self.iz * GRID, 2)},
            "rotation_y": float(self.yaw),
            "horizon": float(self.pitch),
        }


def move_delta(yaw: int, action: str) -> tuple[int, int]:
    """Cell delta of a move action at heading ``yaw``: MoveBack negates MoveAhead; MoveLeft/MoveRight
    rotate it 90° counter-clockwise / clockwise seen from above ((dx, dz) → (−dz, dx) / (dz, −dx))."""
    dx, dz = MOVE_DELTAS[yaw]
    if action == "MoveAhead":
        return dx, dz
    if action == "MoveBack":
        return -dx, -dz
    if action == "MoveLeft":
        return -dz, dx
    if action == "MoveRight":
        return dz, -dx
    raise ValueError(f"{action!r} is not a move action")


class Lattice:
    """The reachable cells of one scene plus the move rules over them (optionally restricted to a mode).

    States are also numbered densely — ``(cell_index * 8 + yaw_index) * 3 + pitch_index`` — so the
    oracle can run vectorised BFS over a transition table built from :meth:`step`.
    """

    def __init__(self, reachable: Iterable[tuple[int, int]], mode: str = "navigation"):
        cells = sorted({(int(x), int(z)) for x, z in reachable})
        if not cells:
            raise ValueError("a lattice needs at least one reachable cell")
        if mode not in MODE_ACTIONS:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODE_ACTIONS)}")
        self.mode = mode
        self.allowed = MODE_ACTIONS[mode]
        self.cells: list[tuple[int, int]] = cells
        self.cell_set: frozenset[tuple[int, int]] = frozenset(cells)
        self.cell_index: dict[tuple[int, int], int] = {c: i for i, c in enumerate(cells)}
        self._table: np.ndarray | None = None
        self._valid: dict[Pose, tuple[str, ...]] = {}
        self.derived: dict[str, object] = {}  # memo of data the oracle derives from the table

    # -- the move rule --------------------------------------------------------------------------
    def step(self, pose: Pose, action: str) -> tuple[Pose, bool]:
        """Apply ``action`` to ``pose``. Returns ``(new_pose, succeeded)``; a failed action leaves the
        pose unchanged. ``Stop`` succeeds and changes nothing (ending the episode is the env's job)."""
        if action not in ACTION_INDEX:
            raise ValueError(f"unknown action {action!r}; expected one of {', '.join(ACTIONS)}")
        if action not in self.allowed:
            return pose, False
        if action == STOP:
            return pose, True
        if action == "RotateRight":
            return Pose(pose.ix, pose.iz, (pose.yaw + YAW_STEP) % 360, pose.pitch), True
        if action == "RotateLeft":
            return Pose(pose.ix, pose.iz, (pose.yaw - YAW_STEP) % 360, pose.pitch), True
        if action == "LookUp":
            if pose.pitch - PITCH_STEP < PITCH_MIN:
                return pose, False
            return Pose(pose.ix, pose.iz, pose.yaw, pose.pitch - PITCH_STEP), True
        if action == "LookDown":
            if pose.pitch + PITCH_STEP > PITCH_MAX:
                return pose, False
            return Pose(pose.ix, pose.iz, pose.yaw, pose.pitch + PITCH_STEP), True
        dx, dz = move_delta(pose.yaw, action)
        cell = (pose.ix + dx, pose.iz + dz)
        if cell not in self.cell_set:
            return pose, False
        return Pose(cell[0], cell[1], pose.yaw, pose.pitch), True

    def valid_actions(self, pose: Pose) -> list[str]:
        """The actions that would succeed at ``pose``, in canonical order (Stop always included), as
        TVRBench's ``get_valid_actions(include_stop=True)`` lists them to the model."""
        valid = self._valid.get(pose)
        if valid is None:
            valid = self._valid[pose] = tuple(a for a in ACTIONS if self.step(pose, a)[1])
        return list(valid)

    # -- dense state numbering for the oracle ------------------------------------------------------
    @property
    def n_states(self) -> int:
        return len(self.cells) * len(YAWS) * len(PITCHES)

    def state_id(self, pose: Pose) -> int:
        c = self.cell_index[(pose.ix, pose.iz)]
        return (c * 8 + pose.yaw // YAW_STEP) * 3 + _PITCH_INDEX[pose.pitch]

    def pose_of(self, state: int) -> Pose:
        rest, p = divmod(int(state), len(PITCHES))
        c, k = divmod(rest, len(YAWS))
        ix, iz = self.cells[c]
        return Pose(ix, iz, k * YAW_STEP, PITCHES[p])

    def transition_table(self) -> np.ndarray:
        """``(n_states, 8)`` int32: the state each non-Stop action leads to, from :meth:`step` (cached)."""
        if self._table is None:
            step, state_id, actions = self.step, self.state_id, ACTIONS[:-1]
            rows = []
            for ix, iz in self.cells:  # same order as the dense numbering
                for yaw in YAWS:
                    for pitch in PITCHES:
                        pose = Pose(ix, iz, yaw, pitch)
                        rows.append([state_id(step(pose, a)[0]) for a in actions])
            self._table = np.asarray(rows, dtype=np.int32).reshape(self.n_states, len(actions))
        return self._table

    def centroid(self, cells: Iterable[tuple[int, int]] | None = None) -> tuple[float, float]:
        """Mean world (x, z) of ``cells`` (default: all reachable cells)."""
        pts = np.asarray(list(cells) if cells is not None else self.cells, dtype=np.float64)
        return float(pts[:, 0].mean() * GRID), float(pts[:, 1].mean() * GRID)


def heading_towards(from_xz: tuple[float, float], to_xz: tuple[float, float]) -> float:
    """AI2-THOR yaw (deg, 0 = +z, 90 = +x) that looks from ``from_xz`` towards ``to_xz``."""
    return math.degrees(math.atan2(to_xz[0] - from_xz[0], to_xz[1] - from_xz[1])) % 360.0


def snap_yaw(angle: float) -> int:
    """Nearest lattice yaw (multiple of 45°) of ``angle`` degrees."""
    return int(round(angle / YAW_STEP) * YAW_STEP) % 360
