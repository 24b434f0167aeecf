"""Put furniture and objects into the rooms of a plan without breaking the walkable grid.

Every blocking piece is accepted only if the walkable cells stay one connected region (at most a
couple of cells may be cut off) and each room keeps a good share of walkable floor; doorways get a
keep-out zone on both sides. Non-blocking things (rugs, wall pictures, windows, lamps, small items on
surfaces) never affect the grid. Each room type has a recipe (``RECIPES``); all randomness comes from
the house RNG, so a seed gives the same rooms every time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from spatialrl.render.primitives import MeshBuilder, yaw_matrix
from spatialrl.worlds import furniture as fu
from spatialrl.worlds import items
from spatialrl.worlds.layout import GRID, HALF_WALL, Door, Plan, Rect, WalkGrid
from spatialrl.worlds.palette import BuildContext, Materials

DOOR_CLEAR = 1.0  # metres kept free of blocking furniture in front of a doorway
MIN_OBJECTS = 14  # per room; recipes aim for 15-25

# category -> ((w range), (d range), (h range)), metres
SIZES: dict[str, tuple[tuple[float, float], ...]] = {
    "sofa": ((1.6, 2.2), (0.8, 0.95), (0.75, 0.9)),
    "armchair": ((0.75, 0.9), (0.75, 0.9), (0.8, 0.95)),
    "coffee_table": ((0.9, 1.2), (0.5, 0.65), (0.38, 0.46)),
    "tv_stand": ((1.2, 1.7), (0.4, 0.5), (0.45, 0.58)),
    "bookshelf": ((0.8, 1.3), (0.3, 0.38), (1.6, 2.0)),
    "side_table": ((0.4, 0.55), (0.4, 0.55), (0.5, 0.65)),
    "floor_lamp": ((0.35, 0.45), (0.35, 0.45), (1.45, 1.75)),
    "plant": ((0.4, 0.6), (0.4, 0.6), (0.8, 1.6)),
    "rug": ((1.4, 2.4), (1.0, 1.7), (0.012, 0.012)),
    "bath_mat": ((0.7, 0.9), (0.45, 0.6), (0.012, 0.012)),
    "dining_set": ((1.5, 2.0), (1.7, 1.85), (0.75, 0.75)),
    "counter": ((0.6, 1.4), (0.6, 0.62), (0.9, 0.92)),
    "sink_counter": ((0.9, 1.3), (0.6, 0.62), (0.9, 0.92)),
    "stove": ((0.6, 0.76), (0.6, 0.62), (0.9, 0.92)),
    "fridge": ((0.65, 0.85), (0.65, 0.72), (1.7, 1.95)),
    "upper_cabinet": ((0.6, 1.4), (0.33, 0.35), (0.65, 0.72)),
    "kitchen_island": ((1.1, 1.5), (0.7, 0.85), (0.9, 0.92)),
    "stool": ((0.34, 0.4), (0.34, 0.4), (0.62, 0.72)),
    "bed": ((1.4, 1.8), (1.95, 2.1), (0.9, 1.2)),
    "nightstand": ((0.4, 0.55), (0.35, 0.45), (0.5, 0.6)),
    "wardrobe": ((0.9, 1.5), (0.55, 0.62), (1.9, 2.2)),
    "dresser": ((0.9, 1.4), (0.45, 0.55), (0.75, 1.0)),
    "desk_set": ((1.0, 1.4), (1.1, 1.2), (0.75, 0.75)),
    "toilet": ((0.38, 0.42), (0.65, 0.72), (0.75, 0.8)),
    "vanity": ((0.7, 1.2), (0.45, 0.55), (0.85, 0.88)),
    "bathtub": ((1.5, 1.7), (0.7, 0.8), (0.55, 0.6)),
    "shower": ((0.85, 1.0), (0.85, 1.0), (2.0, 2.1)),
    "washing_machine": ((0.6, 0.6), (0.6, 0.6), (0.85, 0.85)),
    "radiator": ((0.6, 1.2), (0.1, 0.1), (0.5, 0.6)),
    "trash_bin": ((0.25, 0.35), (0.25, 0.35), (0.3, 0.5)),
    "laundry_basket": ((0.4, 0.5), (0.4, 0.5), (0.45, 0.55)),
    "storage_box": ((0.35, 0.6), (0.3, 0.45), (0.25, 0.4)),
    "ottoman": ((0.45, 0.6), (0.45, 0.6), (0.4, 0.45)),
    "wall_shelf": ((0.6, 1.0), (0.2, 0.25), (0.03, 0.03)),
    "picture": ((0.35, 1.0), (0.04, 0.04), (0.3, 0.8)),
    "mirror": ((0.45, 0.8), (0.04, 0.04), (0.6, 1.0)),
    "clock": ((0.25, 0.4), (0.04, 0.04), (0.25, 0.4)),
    "window": ((0.8, 1.5), (0.06, 0.06), (1.0, 1.3)),
    "towel_rack": ((0.5, 0.7), (0.1, 0.1), (0.1, 0.1)),
    "ceiling_lamp": ((0.3, 0.5), (0.3, 0.5), (0.15, 0.9)),
}

FLOOR_BUILDERS: dict[str, Callable] = {
    "sofa": fu.sofa, "armchair": fu.armchair, "coffee_table": fu.coffee_table, "tv_stand": fu.tv_stand,
    "bookshelf": fu.bookshelf, "side_table": fu.side_table, "floor_lamp": fu.floor_lamp, "plant": fu.plant,
    "rug": fu.rug, "bath_mat": fu.rug, "dining_set": fu.dining_set, "counter": fu.counter,
    "sink_counter": fu.sink_counter, "stove": fu.stove, "fridge": fu.fridge, "upper_cabinet": fu.upper_cabinet,
    "kitchen_island": fu.kitchen_island, "stool": fu.stool, "bed": fu.bed, "nightstand": fu.nightstand,
    "wardrobe": fu.wardrobe, "dresser": fu.dresser, "desk_set": fu.desk_set, "toilet": fu.toilet, "vanity": fu.vanity,
    "bathtub": fu.bathtub, "shower": fu.shower, "washing_machine": fu.washing_machine, "radiator": fu.radiator,
    "trash_bin": fu.trash_bin, "laundry_basket": fu.laundry_basket, "storage_box": fu.storage_box,
    "ottoman": fu.ottoman, "wall_shelf": fu.wall_shelf, "ceiling_lamp": items.ceiling_lamp,
    **items.HANGING_BUILDERS,
}
# Categories whose instance name differs from the builder key (e.g. the table of a dining set).
CATEGORY_NAME = {"dining_set": "dining_table", "desk_set": "desk", "bath_mat": "rug", "sink_counter": "counter"}

SIDE_YAW = {"S": 0.0, "W": 90.0, "N": 180.0, "E": 270.0}  # yaw that turns a local front (+z) into the room

SMALL_POOLS = {
    "kitchen": ["kettle", "toaster", "microwave", "coffee_maker", "pot", "pan", "cutting_board", "bowl", "plate",
                "fruit_bowl", "bottle", "jar", "cup", "mug", "glass", "spray_bottle", "plant_small", "apple", "orange"],
    "living_room": ["vase", "cup", "mug", "books", "candle", "bowl", "remote", "plant_small", "picture_frame",
                    "tissue_box", "fruit_bowl", "headphones", "box", "table_lamp", "glass", "laptop"],
    "bedroom": ["table_lamp", "alarm_clock", "books", "cup", "plant_small", "picture_frame", "vase", "box",
                "headphones", "laptop", "candle", "glass", "tissue_box", "mug"],
    "bathroom": ["soap", "toothbrush_cup", "bottle", "spray_bottle", "towel", "toilet_paper", "plant_small", "candle",
                 "jar", "tissue_box", "cup", "box"],
}


@dataclass
class WorldSurface:
    rect: Rect
    y: float
    clear: float
    yaw: float
    used: list[Rect] = field(default_factory=list)


@dataclass
class RoomState:
    index: int
    name: str
    room_type: str
    rect: Rect
    usable: Rect  # inside the wall faces
    min_cells: int
    sides: dict[str, list[tuple[float, float, bool]]]
    wall_use: dict[str, list[tuple[float, float, float, float]]] = field(default_factory=dict)  # t0, t1, y0, y1
    surfaces: list[WorldSurface] = field(default_factory=list)
    placed: dict[str, list[tuple[str, float, float, Rect]]] = field(default_factory=dict)  # cat -> (side, t, w, rect)


class Furnisher:
    """Places objects room by room, tracking footprints, wall use, surfaces and the walk grid."""

    def __init__(self, plan: Plan, grid: WalkGrid, b: MeshBuilder, rng: np.random.Generator, mat: Materials):
        self.plan, self.grid, self.b, self.rng, self.mat = plan, grid, b, rng, mat
        self.objects: list[tuple[int, str, str]] = []  # (iid, category, room name)
        self.blocking: list[Rect] = []
        self.keepout: list[Rect] = []
        self._current_room = ""
        self.ctx = BuildContext(b, rng, mat, self.new_id)
        self.rooms: list[RoomState] = []
        for i, (name, rtype, rect) in enumerate(plan.rooms):
            cells = int(((grid.px >= rect.x0) & (grid.px <= rect.x1) & (grid.pz >= rect.z0) & (grid.pz <= rect.z1)
                         & grid.free).sum())
            st = RoomState(i, name, rtype, rect, rect.shrunk(HALF_WALL), max(10, int(0.35 * cells)),
                           plan.side_segments(i))
            st.wall_use = {s: [] for s in "SNWE"}
            self.rooms.append(st)
        for d in plan.doors:
            self._reserve_door(d)
        labels, best = grid.components()
        self.largest = int((labels == best).sum()) if best else 0

    # ------------------------------------------------------------------ bookkeeping
    def new_id(self, category: str) -> int:
        iid = len(self.objects) + 1
        self.objects.append((iid, category, self._current_room))
        return iid

    def count(self, room: RoomState) -> int:
        return sum(1 for _, _, r in self.objects if r == room.name)

    def _reserve_door(self, d: Door) -> None:
        for k in (d.a, d.b):
            room = self.rooms[k]
            r = room.rect
            if d.along_z:
                side = "E" if abs(r.x1 - d.line) < 1e-9 else "W"
                x0, x1 = (d.line - DOOR_CLEAR, d.line) if side == "E" else (d.line, d.line + DOOR_CLEAR)
                self.keepout.append(Rect(x0, d.lo - 0.15, x1, d.hi + 0.15))
            else:
                side = "N" if abs(r.z1 - d.line) < 1e-9 else "S"
                z0, z1 = (d.line - DOOR_CLEAR, d.line) if side == "N" else (d.line, d.line + DOOR_CLEAR)
                self.keepout.append(Rect(d.lo - 0.15, z0, d.hi + 0.15, z1))
            room.wall_use[side].append((d.lo - 0.12, d.hi + 0.12, 0.0, 99.0))

    def _accept_block(self, rect: Rect) -> bool:
        """Block ``rect`` on the walk grid if the walkable region stays connected and roomy."""
        new_free = self.grid.free & ~self.grid.blocked_by(rect)
        newly = int((self.grid.free & ~new_free).sum())
        labels, best = self.grid.components(new_free)
        comp = labels == best if best else np.zeros_like(new_free)
        size = int(comp.sum())
        if size < self.largest - newly - 2:
            return False
        for room in self.rooms:
            r = room.rect
            inside = (self.grid.px >= r.x0) & (self.grid.px <= r.x1) & (self.grid.pz >= r.z0) & (self.grid.pz <= r.z1)
            if int((comp & inside).sum()) < room.min_cells:
                return False
        self.grid.free = new_free
        self.largest = size
        return True

    def size(self, category: str, scale: float = 1.0) -> tuple[float, float, float]:
        (w0, w1), (d0, d1), (h0, h1) = SIZES[category]
        w, d, h = (round(float(self.rng.uniform(a, b)) * 20) / 20 for a, b in ((w0, w1), (d0, d1), (h0, h1)))
        return w * scale, d, h

    # ------------------------------------------------------------------ geometry helpers
    def _side_frame(self, room: RoomState, side: str) -> tuple[float, float, float]:
        """(wall face coordinate, along-wall lo, along-wall hi) of a side, inside the wall faces."""
        u = room.usable
        return {"S": (u.z0, u.x0, u.x1), "N": (u.z1, u.x0, u.x1), "W": (u.x0, u.z0, u.z1), "E": (u.x1, u.z0, u.z1)}[side]

    def _against(self, room: RoomState, side: str, t: float, w: float, d: float) -> tuple[Rect, tuple[float, float]]:
        """Footprint and centre of a w x d item with its back on ``side`` at along-wall position t."""
        face = self._side_frame(room, side)[0]
        if side in ("S", "N"):
            z0, z1 = (face, face + d) if side == "S" else (face - d, face)
            return Rect(t - w / 2, z0, t + w / 2, z1), (t, (z0 + z1) / 2)
        x0, x1 = (face, face + d) if side == "W" else (face - d, face)
        return Rect(x0, t - w / 2, x1, t + w / 2), ((x0 + x1) / 2, t)

    def _wall_free(self, room: RoomState, side: str, t0: float, t1: float, y0: float, y1: float,
                   margin: float = 0.05) -> bool:
        return all(not (t0 < b + margin and a < t1 + margin and y0 < yb and ya < y1)
                   for a, b, ya, yb in room.wall_use[side])

    def _floor_ok(self, room: RoomState, rect: Rect, blocks: bool) -> bool:
        if not room.usable.contains(rect):
            return False
        if blocks and any(rect.overlaps(o, 0.03) for o in self.blocking):
            return False
        return not (blocks and any(rect.overlaps(k) for k in self.keepout))

    def _build(self, category: str, builder_key: str, origin: tuple[float, float, float], yaw: float,
               size: tuple[float, float, float], room: RoomState) -> int:
        iid = self.new_id(CATEGORY_NAME.get(builder_key, category))
        with self.b.placed(origin, yaw):
            surfaces = FLOOR_BUILDERS[builder_key](self.ctx, iid, *size) or []
        rot = yaw_matrix(yaw)
        for s in surfaces:
            corners = np.array([[s.x0, 0, s.z0], [s.x1, 0, s.z1]]) @ rot.T + np.asarray(origin)
            (x0, _, z0), (x1, _, z1) = corners.min(0), corners.max(0)
            if x1 - x0 > 0.05 and z1 - z0 > 0.05:
                room.surfaces.append(WorldSurface(Rect(x0, z0, x1, z1), origin[1] + s.y, s.clear, yaw))
        return iid

    # ------------------------------------------------------------------ placement strategies
    def wall(self, room: RoomState, key: str, sides: str = "SNWE", t: float | None = None, tries: int = 30,
             size: tuple[float, float, float] | None = None, corner: bool = False, blocks: bool = True) -> bool:
        """Stand an item with its back to a wall; records its along-wall span in ``wall_use``."""
        w, d, h = size or self.size(key)
        for _ in range(tries if t is None else 1):
            side = sides[int(self.rng.integers(len(sides)))] if len(sides) > 1 else sides
            _, lo, hi = self._side_frame(room, side)
            if hi - lo < w:
                continue
            if t is not None:
                tt = t
            elif corner:
                tt = lo + w / 2 if self.rng.random() < 0.5 else hi - w / 2
            else:
                tt = round(float(_uniform(self.rng, lo + w / 2, hi - w / 2)) * 20) / 20
            rect, (cx, cz) = self._against(room, side, tt, w, d)
            if not self._floor_ok(room, rect, blocks):
                continue
            if not self._wall_free(room, side, tt - w / 2, tt + w / 2, 0.0, h):
                continue
            if blocks and not self._accept_block(rect):
                continue
            self._build(key, key, (cx, 0.0, cz), SIDE_YAW[side], (w, d, h), room)
            if blocks:
                self.blocking.append(rect)
            room.wall_use[side].append((tt - w / 2, tt + w / 2, 0.0, h))
            room.placed.setdefault(key, []).append((side, tt, w, rect))
            return True
        return False

    def center(self, room: RoomState, key: str, blocks: bool = True, tries: int = 30, margin: float = 0.55,
               near: tuple[float, float] | None = None, size: tuple[float, float, float] | None = None) -> bool:
        """Free-standing item away from the walls (or near a given point); yaw along the room axes."""
        w, d, h = size or self.size(key)
        area = room.usable.shrunk(margin)
        for k in range(tries):
            yaw = float(self.rng.choice([0.0, 90.0, 180.0, 270.0]))
            fw, fd = (w, d) if yaw in (0.0, 180.0) else (d, w)
            if near is not None and k < tries // 2:
                cx, cz = near[0] + self.rng.uniform(-0.3, 0.3), near[1] + self.rng.uniform(-0.3, 0.3)
            else:
                if area.width < fw or area.depth < fd:
                    continue
                cx = _uniform(self.rng, area.x0 + fw / 2, area.x1 - fw / 2)
                cz = _uniform(self.rng, area.z0 + fd / 2, area.z1 - fd / 2)
            cx, cz = round(float(cx) * 20) / 20, round(float(cz) * 20) / 20
            rect = Rect(cx - fw / 2, cz - fd / 2, cx + fw / 2, cz + fd / 2)
            if not self._floor_ok(room, rect, blocks):
                continue
            if blocks and not self._accept_block(rect):
                continue
            self._build(key, key, (cx, 0.0, cz), yaw, (w, d, h), room)
            if blocks:
                self.blocking.append(rect)
            room.placed.setdefault(key, []).append(("", 0.0, w, rect))
            return True
        return False

    def hang(self, room: RoomState, key: str, y0: tuple[float, float], sides: str = "SNWE", t: float | None = None,
             tries: int = 25, exterior: bool = False, size: tuple[float, float, float] | None = None) -> bool:
        """Mount an item on a wall face between heights; deep ones (shelves, cabinets) block the grid."""
        w, d, h = size or self.size(key)
        if key == "clock":
            h = w
        for _ in range(tries if t is None else 1):
            side = sides[int(self.rng.integers(len(sides)))] if len(sides) > 1 else sides
            _, lo, hi = self._side_frame(room, side)
            spans = [(a, b) for a, b, ext in room.sides[side] if ext] if exterior else [(lo, hi)]
            spans = [(max(a, lo), min(b, hi)) for a, b in spans if min(b, hi) - max(a, lo) >= w + 0.4]
            if not spans:
                continue
            a, b = spans[int(self.rng.integers(len(spans)))]
            tt = t if t is not None else round(float(_uniform(self.rng, a + w / 2 + 0.2, b - w / 2 - 0.2)) * 20) / 20
            yb = round(float(self.rng.uniform(*y0)) * 20) / 20
            if yb + h > self.plan.height - 0.05:
                continue
            if not self._wall_free(room, side, tt - w / 2, tt + w / 2, yb, yb + h):
                continue
            rect, (cx, cz) = self._against(room, side, tt, w, d)
            blocks = d > 0.1 and yb < 2.0
            if blocks and not self._accept_block(rect):
                continue
            self._build(key, key, (cx, yb, cz), SIDE_YAW[side], (w, d, h), room)
            room.wall_use[side].append((tt - w / 2, tt + w / 2, yb, yb + h))
            room.placed.setdefault(key, []).append((side, tt, w, rect))
            return True
        return False

    def ceiling(self, room: RoomState) -> None:
        w, _, h = self.size("ceiling_lamp")
        cx, cz = room.rect.center
        cx, cz = _snap(cx + self.rng.uniform(-0.3, 0.3)), _snap(cz + self.rng.uniform(-0.3, 0.3))
        self._build("ceiling_lamp", "ceiling_lamp", (cx, self.plan.height - h, cz), 0.0, (w, w, h), room)

    def run(self, room: RoomState, side: str, keys: list[str]) -> list[tuple[str, float, float]]:
        """Kitchen-style run: items side by side along one wall starting at a corner."""
        _, lo, hi = self._side_frame(room, side)
        forward = self.rng.random() < 0.5
        t = lo if forward else hi
        done = []
        for key in keys:
            w, d, h = self.size(key)
            for _ in range(12):
                tt = t + w / 2 if forward else t - w / 2
                if (forward and tt + w / 2 > hi) or (not forward and tt - w / 2 < lo):
                    break
                if self.wall(room, key, sides=side, t=tt, size=(w, d, h)):
                    done.append((key, tt, w))
                    t = tt + w / 2 if forward else tt - w / 2
                    break
                t += GRID if forward else -GRID
        return done

    def small(self, room: RoomState, n: int, pool: list[str], tries_per_item: int = 8) -> int:
        """Put up to n small items from ``pool`` on the room's surfaces (no overlaps on a surface)."""
        placed = 0
        for _ in range(n):
            if not room.surfaces:
                return placed
            areas = np.array([s.rect.width * s.rect.depth for s in room.surfaces])
            for _ in range(tries_per_item):
                s = room.surfaces[int(self.rng.choice(len(areas), p=areas / areas.sum()))]
                cat = str(pool[int(self.rng.integers(len(pool)))])
                turned = s.yaw in (90.0, 270.0)
                max_w, max_d = (s.rect.depth, s.rect.width) if turned else (s.rect.width, s.rect.depth)
                size = items.fit_size(self.ctx, cat, max_w, max_d, s.clear)
                if size is None:
                    continue
                w, d, h = size
                fw, fd = (d, w) if turned else (w, d)
                cx = _uniform(self.rng, s.rect.x0 + fw / 2, s.rect.x1 - fw / 2)
                cz = _uniform(self.rng, s.rect.z0 + fd / 2, s.rect.z1 - fd / 2)
                rect = Rect(cx - fw / 2, cz - fd / 2, cx + fw / 2, cz + fd / 2)
                if any(rect.overlaps(u, 0.02) for u in s.used):
                    continue
                iid = self.new_id(cat)
                with self.b.placed((float(cx), s.y, float(cz)), s.yaw):
                    items.SMALL_BUILDERS[cat](self.ctx, iid, w, d, h)
                s.used.append(rect)
                placed += 1
                break
        return placed

    # ------------------------------------------------------------------ rooms
    def furnish(self) -> None:
        for room in self.rooms:
            with self.b.zone(room.index):
                self._furnish_room(room)

    def _furnish_room(self, room: RoomState) -> None:
        self._current_room = room.name
        self._windows(room)
        RECIPES[room.room_type](self, room)
        self.ceiling(room)
        pool = SMALL_POOLS[room.room_type]
        self.small(room, int(self.rng.integers(5, 10)), pool)
        extra = 0
        while self.count(room) < MIN_OBJECTS and extra < 30:  # top up sparse rooms
            extra += 1
            r = self.rng.random()
            if r < 0.5:
                self.small(room, 1, pool)
            elif r < 0.75:
                self.hang(room, "picture", (1.2, 1.6))
            else:
                self.wall(room, str(self.rng.choice(["plant", "storage_box", "trash_bin", "laundry_basket"])),
                          corner=True)

    def _windows(self, room: RoomState) -> None:
        n = int(self.rng.integers(1, 3))
        for _ in range(n):
            self.hang(room, "window", (0.85, 1.0), exterior=True, tries=10)

    def opposite_side(self, side: str) -> str:
        return {"S": "N", "N": "S", "W": "E", "E": "W"}[side]


def _uniform(rng: np.random.Generator, lo: float, hi: float) -> float:
    """Uniform in [lo, hi]; tolerates hi < lo by float rounding (an item exactly as wide as its slot)."""
    return float(rng.uniform(lo, max(lo, hi)))


def _snap(v: float) -> float:
    return round(v * 20) / 20


def _beside(f: Furnisher, room: RoomState, key: str, anchor: str, gap: float = 0.05) -> int:
    """Place ``key`` items left and right of the first ``anchor`` item on the same wall."""
    if anchor not in room.placed:
        return 0
    side, t, w, _ = room.placed[anchor][0]
    n = 0
    for sign in (-1, 1):
        size = f.size(key)
        if f.wall(room, key, sides=side, t=t + sign * (w / 2 + gap + size[0] / 2), size=size):
            n += 1
    return n


def _in_front(room: RoomState, anchor: str, dist: float) -> tuple[float, float] | None:
    if anchor not in room.placed:
        return None
    side, _, _, rect = room.placed[anchor][0]
    cx, cz = rect.center
    off = {"S": (0, 1), "N": (0, -1), "W": (1, 0), "E": (-1, 0)}[side]
    half = (rect.depth if side in "SN" else rect.width) / 2
    return cx + off[0] * (half + dist), cz + off[1] * (half + dist)


def living_room(f: Furnisher, room: RoomState) -> None:
    f.wall(room, "sofa")
    if "sofa" in room.placed:
        f.wall(room, "tv_stand", sides=f.opposite_side(room.placed["sofa"][0][0]))
        f.hang(room, "picture", (1.25, 1.5), sides=room.placed["sofa"][0][0], t=room.placed["sofa"][0][1])
    else:
        f.wall(room, "tv_stand")
    f.center(room, "rug", blocks=False, margin=0.4, near=_in_front(room, "sofa", 0.6))
    f.center(room, "coffee_table", near=_in_front(room, "sofa", 0.5), margin=0.6)
    f.wall(room, "bookshelf")
    for _ in range(int(f.rng.integers(0, 3))):
        f.wall(room, "armchair", corner=bool(f.rng.random() < 0.5))
    _beside(f, room, "side_table", "sofa")
    if f.rng.random() < 0.7:
        f.wall(room, "floor_lamp", corner=True)
    for _ in range(int(f.rng.integers(1, 3))):
        f.wall(room, "plant", corner=True)
    if f.rng.random() < 0.5:
        f.wall(room, str(f.rng.choice(["storage_box", "ottoman", "radiator"])))
    for _ in range(int(f.rng.integers(1, 3))):
        f.hang(room, "picture", (1.2, 1.6))
    if f.rng.random() < 0.5:
        f.hang(room, "clock", (1.6, 1.9))
    if f.rng.random() < 0.5:
        f.hang(room, "wall_shelf", (1.4, 1.7))
    _lamp_on(f, room, ("side_table",))


def kitchen(f: Furnisher, room: RoomState) -> None:
    sides = sorted("SNWE", key=lambda s: -_free_length(f, room, s))
    keys = ["fridge", "counter", "stove", "sink_counter", "counter"]
    if f.rng.random() < 0.5:
        keys = keys[::-1]
    done = f.run(room, sides[0], keys)
    if f.rng.random() < 0.6:
        done += f.run(room, sides[1], ["counter", "counter"] if f.rng.random() < 0.5 else ["counter", "washing_machine"])
    for key, side_items in list(room.placed.items()):
        if key not in ("counter", "sink_counter"):
            continue
        for side, t, w, _ in side_items:
            if f.rng.random() < 0.7:
                size = f.size("upper_cabinet")
                f.hang(room, "upper_cabinet", (1.45, 1.5), sides=side, t=t, size=(w, size[1], size[2]))
    if not f.center(room, "dining_set", margin=0.35):
        if f.center(room, "kitchen_island", margin=0.8):
            anchor = room.placed["kitchen_island"][0][3]
            for k in range(int(f.rng.integers(1, 3))):
                f.center(room, "stool", tries=15, margin=0.3,
                         near=(anchor.center[0] + (k - 0.5) * 0.5, anchor.z1 + 0.3))
    f.wall(room, "trash_bin", corner=True)
    if f.rng.random() < 0.6:
        f.wall(room, "plant", corner=True)
    if f.rng.random() < 0.4:
        f.wall(room, "radiator")
    if f.rng.random() < 0.7:
        f.hang(room, "clock", (1.6, 1.9))
    for _ in range(int(f.rng.integers(0, 3))):
        f.hang(room, "picture", (1.2, 1.6))
    if f.rng.random() < 0.5:
        f.hang(room, "wall_shelf", (1.4, 1.7))


def bedroom(f: Furnisher, room: RoomState) -> None:
    single = f.rng.random() < 0.3
    size = f.size("bed")
    if single:
        size = (round(float(f.rng.uniform(0.9, 1.05)) * 20) / 20, size[1], size[2])
    f.wall(room, "bed", size=size)
    _beside(f, room, "nightstand", "bed")
    if "bed" in room.placed:
        side, t, _, _ = room.placed["bed"][0]
        f.hang(room, "picture", (1.3, 1.55), sides=side, t=t)
    f.center(room, "rug", blocks=False, margin=0.3, near=_in_front(room, "bed", -0.6))
    f.wall(room, "wardrobe")
    if f.rng.random() < 0.7:
        f.wall(room, "dresser")
    if f.rng.random() < 0.6:
        f.wall(room, "desk_set")
    for key, p in (("plant", 0.7), ("laundry_basket", 0.5), ("floor_lamp", 0.4), ("armchair", 0.3),
                   ("storage_box", 0.4)):
        if f.rng.random() < p:
            f.wall(room, key, corner=True)
    if f.rng.random() < 0.6:
        f.hang(room, "mirror", (1.1, 1.3))
    for _ in range(int(f.rng.integers(0, 2))):
        f.hang(room, "picture", (1.2, 1.6))
    if f.rng.random() < 0.4:
        f.hang(room, "clock", (1.6, 1.9))
    if f.rng.random() < 0.5:
        f.hang(room, "wall_shelf", (1.4, 1.7))
    _lamp_on(f, room, ("nightstand",))


def bathroom(f: Furnisher, room: RoomState) -> None:
    if f.rng.random() < 0.6:
        f.wall(room, "bathtub", corner=True)
    else:
        f.wall(room, "shower", corner=True)
    f.wall(room, "vanity")
    if "vanity" in room.placed:
        side, t, w, _ = room.placed["vanity"][0]
        msize = f.size("mirror")
        f.hang(room, "mirror", (1.15, 1.25), sides=side, t=t, size=(min(msize[0], w), msize[1], msize[2]))
    f.wall(room, "toilet")
    if f.rng.random() < 0.5:
        f.wall(room, "washing_machine")
    for _ in range(int(f.rng.integers(1, 3))):
        f.hang(room, "towel_rack", (0.95, 1.2))
    f.wall(room, "trash_bin", corner=True)
    for key, p in (("laundry_basket", 0.5), ("plant", 0.5), ("storage_box", 0.3), ("radiator", 0.5)):
        if f.rng.random() < p:
            f.wall(room, key, corner=key != "radiator")
    f.center(room, "bath_mat", blocks=False, margin=0.25)
    if f.rng.random() < 0.7:
        f.hang(room, "wall_shelf", (1.3, 1.6))
    for _ in range(int(f.rng.integers(0, 2))):
        f.hang(room, "picture", (1.3, 1.6))
    if f.rng.random() < 0.3:
        f.hang(room, "clock", (1.7, 1.9))


def _lamp_on(f: Furnisher, room: RoomState, hosts: tuple[str, ...]) -> None:
    """A table lamp on each host's surface (nightstands, side tables)."""
    for s in room.surfaces:
        for host in hosts:
            for _, _, _, rect in room.placed.get(host, []):
                if rect.contains(s.rect) and not s.used:
                    size = items.fit_size(f.ctx, "table_lamp", s.rect.width, s.rect.depth, 1.0)
                    if size:
                        iid = f.new_id("table_lamp")
                        cx, cz = s.rect.center
                        with f.b.placed((cx, s.y, cz), s.yaw):
                            items.SMALL_BUILDERS["table_lamp"](f.ctx, iid, *size)
                        s.used.append(Rect(cx - size[0] / 2, cz - size[1] / 2, cx + size[0] / 2, cz + size[1] / 2))


def _free_length(f: Furnisher, room: RoomState, side: str) -> float:
    _, lo, hi = f._side_frame(room, side)
    used = sum(b - a for a, b, y0, _ in room.wall_use[side] if y0 < 1.0)
    return hi - lo - used


RECIPES: dict[str, Callable[[Furnisher, RoomState], None]] = {
    "living_room": living_room, "kitchen": kitchen, "bedroom": bedroom, "bathroom": bathroom,
}

