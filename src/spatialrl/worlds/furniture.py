"""Floor-standing furniture built from low-poly primitives.

Every builder works in a local frame: origin at the centre of the footprint on the floor, width along
x, depth along z, the front facing +z (the placement code turns the front towards the room). It
draws the object with instance id ``iid``, may allocate further ids for parts that are objects in
their own right (a TV on its stand, chairs at a table, books on a shelf, pillows on a bed), and
returns the surfaces small items may be put on.
"""

from __future__ import annotations

from spatialrl.worlds import items
from spatialrl.worlds.palette import BRIGHT, CERAMIC, FABRIC, METAL, PAINT, WHITE, BuildContext, Surface

# ---------------------------------------------------------------------------- seating


def sofa(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b, fab = c.b, c.mat["fabric"]
    col = c.pick(FABRIC)
    seat_h, arm_w, back_d = 0.42, 0.16, 0.2
    for sx in (-1, 1):  # legs
        for sz in (-1, 1):
            b.box((sx * (w / 2 - 0.08), 0.04, sz * (d / 2 - 0.08)), (0.05, 0.08, 0.05), c.pick(METAL), instance_id=iid)
    b.box((0, 0.08 + (seat_h - 0.08) / 2 - 0.06, 0), (w, seat_h - 0.2, d), col, texture=fab, instance_id=iid)
    b.box((0, h / 2 + 0.04, -d / 2 + back_d / 2), (w, h - 0.08, back_d), col, texture=fab, instance_id=iid)
    for sx in (-1, 1):
        b.box((sx * (w / 2 - arm_w / 2), 0.33, 0.02), (arm_w, 0.5, d - 0.04), col, texture=fab, instance_id=iid)
    n = 2 if w < 1.8 else 3
    inner = w - 2 * arm_w
    cush = tuple(min(1.0, v * 1.06) for v in col)
    for i in range(n):
        x = -inner / 2 + inner * (i + 0.5) / n
        b.box((x, seat_h - 0.08, back_d / 2), (inner / n - 0.02, 0.14, d - back_d - 0.02), cush, texture=fab,
              instance_id=iid)
    for i in range(int(c.rng.integers(1, 3))):  # throw pillows are objects of their own
        pid = c.new_id("pillow")
        x = (-1 if i == 0 else 1) * (inner / 2 - 0.22)
        b.ellipsoid((x, seat_h + 0.14, -d / 2 + back_d + 0.1), (0.18, 0.16, 0.07), c.pick(FABRIC),
                    texture=c.mat["dots"] if c.rng.random() < 0.5 else fab, instance_id=pid)
    return []


def armchair(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b, fab = c.b, c.mat["fabric"]
    col = c.pick(FABRIC)
    wood = c.wood()
    for sx in (-1, 1):
        for sz in (-1, 1):
            b.cylinder((sx * (w / 2 - 0.07), 0, sz * (d / 2 - 0.07)), 0.025, 0.12, WHITE, texture=wood, segments=6,
                       instance_id=iid)
    b.box((0, 0.26, 0.03), (w - 0.2, 0.28, d - 0.06), col, texture=fab, instance_id=iid)
    b.box((0, h / 2 + 0.06, -d / 2 + 0.09), (w, h - 0.12, 0.18), col, texture=fab, instance_id=iid)
    for sx in (-1, 1):
        b.box((sx * (w / 2 - 0.08), 0.4, 0.0), (0.16, 0.56, d), col, texture=fab, instance_id=iid)
    return []


def chair(c: BuildContext, iid: int, w: float, d: float, h: float, color=None, tex: int | None = None) -> list[Surface]:
    """Dining/desk chair: four legs, seat, backrest at the back (−z)."""
    b = c.b
    tex = c.wood() if tex is None else tex
    col = WHITE if color is None else color
    seat = 0.45
    for sx in (-1, 1):
        for sz in (-1, 1):
            b.box((sx * (w / 2 - 0.03), seat / 2, sz * (d / 2 - 0.03)), (0.04, seat, 0.04), col, texture=tex,
                  instance_id=iid)
    b.box((0, seat + 0.02, 0), (w, 0.04, d), col, texture=tex, instance_id=iid)
    for sx in (-1, 1):
        b.box((sx * (w / 2 - 0.03), seat + (h - seat) / 2, -d / 2 + 0.03), (0.04, h - seat, 0.04), col, texture=tex,
              instance_id=iid)
    b.box((0, h - 0.1, -d / 2 + 0.03), (w - 0.02, 0.16, 0.03), col, texture=tex, instance_id=iid)
    if c.rng.random() < 0.5:  # seat cushion
        b.box((0, seat + 0.06, 0.01), (w - 0.06, 0.04, d - 0.08), c.pick(FABRIC), texture=c.mat["fabric"],
              instance_id=iid)
    return []


def stool(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    col = c.pick(METAL)
    for k in range(4):
        sx, sz = (-1, 1)[k % 2], (-1, 1)[k // 2]
        b.cylinder((sx * w * 0.3, 0, sz * d * 0.3), 0.015, h - 0.04, col, segments=5, caps=False, instance_id=iid)
    b.cylinder((0, h - 0.05, 0), w / 2, 0.05, WHITE, texture=c.wood(), instance_id=iid)
    return []


def ottoman(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    c.b.cylinder((0, 0, 0), w / 2, h, c.pick(FABRIC), texture=c.mat["fabric"], segments=14, instance_id=iid)
    return []


# ---------------------------------------------------------------------------- tables


def table(c: BuildContext, iid: int, w: float, d: float, h: float, round_top: bool | None = None) -> list[Surface]:
    b = c.b
    wood = c.wood()
    if round_top is None:
        round_top = c.rng.random() < 0.3
    if round_top:
        r = min(w, d) / 2
        b.cylinder((0, h - 0.04, 0), r, 0.04, WHITE, texture=wood, segments=16, instance_id=iid)
        b.cylinder((0, 0, 0), 0.05, h - 0.04, WHITE, texture=wood, segments=8, caps=False, instance_id=iid)
        b.cylinder((0, 0, 0), r * 0.45, 0.03, WHITE, texture=wood, segments=10, instance_id=iid)
        s = r * 0.68
        return [Surface(-s, -s, s, s, h)]
    b.box((0, h - 0.02, 0), (w, 0.04, d), WHITE, texture=wood, instance_id=iid)
    leg = c.pick(METAL) if c.rng.random() < 0.3 else WHITE
    leg_tex = -1 if leg != WHITE else wood
    for sx in (-1, 1):
        for sz in (-1, 1):
            b.box((sx * (w / 2 - 0.05), (h - 0.04) / 2, sz * (d / 2 - 0.05)), (0.05, h - 0.04, 0.05), leg,
                  texture=leg_tex, instance_id=iid)
    return [Surface(-w / 2 + 0.06, -d / 2 + 0.06, w / 2 - 0.06, d / 2 - 0.06, h)]


def dining_set(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    """Table (instance ``iid``) with 2-4 chairs around it (own instances); w, d include chair room."""
    tw, td = w - 0.3, d - 0.9
    surfaces = table(c, iid, tw, td, 0.75, round_top=False)
    wood, cw = c.wood(), 0.42
    spots = [(-tw / 4, 1), (tw / 4, 1), (-tw / 4, -1), (tw / 4, -1)] if tw > 1.3 else [(0, 1), (0, -1)]
    n = int(c.rng.integers(2, len(spots) + 1))
    for x, side in spots[:n]:
        cid = c.new_id("chair")
        with c.b.placed((x, 0, side * (td / 2 + 0.18)), 180.0 if side > 0 else 0.0):
            chair(c, cid, cw, cw, 0.9, tex=wood)
    return surfaces


def coffee_table(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    surfaces = table(c, iid, w, d, h, round_top=False)
    c.b.box((0, 0.1, 0), (w - 0.12, 0.025, d - 0.12), WHITE, texture=c.wood(), instance_id=iid)  # lower shelf
    return surfaces


def desk_set(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    """Desk against the wall (back part of the footprint) and a chair in front of it."""
    dd = d - 0.5
    with c.b.placed((0, 0, -d / 2 + dd / 2)):
        surfaces = table(c, iid, w, dd, 0.75, round_top=False)
        if c.rng.random() < 0.6:  # drawer block under one side
            c.b.box((w / 2 - 0.25, 0.36, 0), (0.4, 0.66, dd - 0.1), c.pick(PAINT), texture=c.mat["plain"],
                    instance_id=iid)
    cid = c.new_id("chair")
    with c.b.placed((0, 0, d / 2 - 0.25), 180.0):
        chair(c, cid, 0.44, 0.44, 0.92, color=c.pick(FABRIC), tex=c.mat["fabric"])
    return [Surface(s.x0, s.z0 - d / 2 + dd / 2, s.x1, s.z1 - d / 2 + dd / 2, s.y) for s in surfaces]


def side_table(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    return table(c, iid, w, d, h)


# ---------------------------------------------------------------------------- storage


def _cabinet(c: BuildContext, iid: int, w: float, d: float, h: float, body, tex: int, doors: int, drawers: int = 0,
             base: float = 0.06) -> None:
    """Box with a recessed plinth, door/drawer panels and handles on the front face."""
    b = c.b
    if base > 0:
        b.box((0, base / 2, 0.02), (w - 0.04, base, d - 0.04), (0.15, 0.15, 0.15), instance_id=iid, faces="xXzZY")
    b.box((0, base + (h - base) / 2, 0), (w, h - base, d), body, texture=tex, instance_id=iid, faces="xXzZYy")
    handle = c.pick(METAL)
    front_h = h - base
    rows = max(drawers, 0)
    for r in range(rows):
        y = base + front_h * (r + 0.5) / rows
        b.box((0, y, d / 2 + 0.005), (w - 0.05, front_h / rows - 0.025, 0.01), body, texture=tex, instance_id=iid)
        b.box((0, y + 0.02, d / 2 + 0.02), (min(0.18, w * 0.3), 0.02, 0.02), handle, instance_id=iid)
    if not rows:
        for k in range(doors):
            x = -w / 2 + w * (k + 0.5) / doors
            b.box((x, base + front_h / 2, d / 2 + 0.005), (w / doors - 0.025, front_h - 0.03, 0.01), body, texture=tex,
                  instance_id=iid)
            hx = x + (w / doors / 2 - 0.06) * (1 if k % 2 == 0 else -1)
            b.box((hx, base + front_h * 0.6, d / 2 + 0.02), (0.02, min(0.25, front_h * 0.3), 0.02), handle,
                  instance_id=iid)


def wardrobe(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    wooden = c.rng.random() < 0.6
    _cabinet(c, iid, w, d, h, WHITE if wooden else c.pick(PAINT), c.wood() if wooden else c.mat["plain"],
             doors=2 if w < 1.3 else 3)
    return [Surface(-w / 2 + 0.05, -d / 2 + 0.05, w / 2 - 0.05, d / 2 - 0.05, h, clear=0.35)]


def dresser(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    wooden = c.rng.random() < 0.6
    _cabinet(c, iid, w, d, h, WHITE if wooden else c.pick(PAINT), c.wood() if wooden else c.mat["plain"],
             doors=0, drawers=3 if h < 0.9 else 4)
    return [Surface(-w / 2 + 0.05, -d / 2 + 0.05, w / 2 - 0.05, d / 2 - 0.05, h)]


def nightstand(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    wooden = c.rng.random() < 0.7
    _cabinet(c, iid, w, d, h, WHITE if wooden else c.pick(PAINT), c.wood() if wooden else c.mat["plain"],
             doors=0, drawers=2, base=0.08)
    return [Surface(-w / 2 + 0.04, -d / 2 + 0.04, w / 2 - 0.04, d / 2 - 0.04, h)]


def tv_stand(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    wooden = c.rng.random() < 0.6
    _cabinet(c, iid, w, d, h, WHITE if wooden else c.pick(PAINT), c.wood() if wooden else c.mat["plain"],
             doors=2 if w < 1.5 else 3)
    tid = c.new_id("television")
    tw = min(w - 0.2, c.uniform(0.9, 1.3))
    th = tw * 0.58
    b = c.b
    b.box((0, h + 0.015, -0.02), (0.3, 0.03, 0.2), (0.1, 0.1, 0.1), instance_id=tid)
    b.box((0, h + 0.08, -0.05), (0.06, 0.14, 0.04), (0.1, 0.1, 0.1), instance_id=tid)
    b.box((0, h + 0.12 + th / 2, -0.05), (tw, th, 0.05), (0.08, 0.08, 0.09), instance_id=tid)
    screen = (0.1, 0.14, 0.2) if c.rng.random() < 0.6 else c.pick(BRIGHT)
    b.box((0, h + 0.12 + th / 2, -0.02), (tw - 0.04, th - 0.04, 0.012), screen, texture=c.mat["checker"] if
          c.rng.random() < 0.2 else -1, instance_id=tid, tile=None)
    side = (w - 0.35) / 2
    return [Surface(-w / 2 + 0.04, -d / 2 + 0.05, -w / 2 + side, d / 2 - 0.04, h),
            Surface(w / 2 - side, -d / 2 + 0.05, w / 2 - 0.04, d / 2 - 0.04, h)]


def bookshelf(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    """Open shelf unit; fills its shelves with rows of books (each row one object) and a few items."""
    b = c.b
    wooden = c.rng.random() < 0.7
    body, tex = (WHITE, c.wood()) if wooden else (c.pick(PAINT), c.mat["plain"])
    t = 0.025
    for sx in (-1, 1):
        b.box((sx * (w / 2 - t / 2), h / 2, 0), (t, h, d), body, texture=tex, instance_id=iid)
    b.box((0, h / 2, -d / 2 + 0.005), (w - 2 * t, h, 0.01), body, texture=tex, instance_id=iid)
    n = max(3, int(round(h / 0.38)))
    gap = h / n
    for k in range(n + 1):
        y = min(k * gap, h - t / 2) if k else t / 2
        b.box((0, y, 0), (w - 2 * t, t, d - 0.01), body, texture=tex, instance_id=iid)
    inner = w - 2 * t - 0.02
    for k in range(n):
        y0 = k * gap + (t if k == 0 else t / 2)  # top face of shelf board k
        x = -inner / 2
        while x < inner / 2 - 0.12:
            r = c.rng.random()
            if r < 0.55:
                seg = min(inner / 2 - x, c.uniform(0.15, 0.45))
                items.book_row(c, c.new_id("book"), x, x + seg, y0, d - 0.06, gap - t - 0.03)
                x += seg + 0.03
            elif r < 0.75:
                item = c.rng.choice(["vase", "box", "plant_small", "bowl", "picture_frame"])
                size = min(0.2, inner / 2 - x)
                with b.placed((x + size / 2, y0, 0.0)):
                    items.build_small(c, str(item), size, min(0.2, d - 0.08), gap - t - 0.04)
                x += size + 0.04
            else:
                x += c.uniform(0.1, 0.25)
    return []


def wall_shelf(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    """A single plank on two brackets, mounted on the wall (local origin at its underside)."""
    b = c.b
    b.box((0, 0.0125, 0), (w, 0.025, d), WHITE, texture=c.wood(), instance_id=iid)
    for sx in (-1, 1):
        b.box((sx * (w / 2 - 0.08), -0.06, -d / 2 + 0.02), (0.02, 0.12, 0.04), c.pick(METAL), instance_id=iid)
    return [Surface(-w / 2 + 0.03, -d / 2 + 0.02, w / 2 - 0.03, d / 2 - 0.02, 0.025, clear=0.3)]


# ---------------------------------------------------------------------------- bedroom


def bed(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    wood = c.wood()
    frame_h = 0.32
    b.box((0, frame_h / 2, 0), (w, frame_h, d), WHITE, texture=wood, instance_id=iid)
    b.box((0, h / 2, -d / 2 + 0.04), (w + 0.04, h, 0.08), WHITE, texture=wood, instance_id=iid)
    b.box((0, frame_h + 0.1, 0.02), (w - 0.06, 0.2, d - 0.1), (0.95, 0.95, 0.93), texture=c.mat["plain"],
          instance_id=iid)
    blanket = c.pick(FABRIC)
    btex = c.mat["stripes"] if c.rng.random() < 0.4 else c.mat["fabric"]
    cover = d * c.uniform(0.55, 0.7)
    b.box((0, frame_h + 0.13, d / 2 - cover / 2), (w + 0.02, 0.16, cover + 0.02), blanket, texture=btex,
          instance_id=iid)
    n = 2 if w > 1.2 else 1
    for k in range(n):
        pid = c.new_id("pillow")
        x = 0.0 if n == 1 else (-1 if k == 0 else 1) * w / 4
        b.ellipsoid((x, frame_h + 0.28, -d / 2 + 0.28), (w / (2 * n) - 0.08, 0.08, 0.17), c.pick(FABRIC[5:8] + (WHITE,)),
                    texture=c.mat["fabric"], instance_id=pid)
    return []


# ---------------------------------------------------------------------------- kitchen


def counter(c: BuildContext, iid: int, w: float, d: float, h: float, body=None, tex: int | None = None,
            top: int | None = None) -> list[Surface]:
    body = c.pick(PAINT) if body is None else body
    tex = c.mat["plain"] if tex is None else tex
    _cabinet(c, iid, w, d - 0.03, h - 0.04, body, tex, doors=max(1, int(round(w / 0.5))))
    top = c.mat["marble"] if top is None else top
    c.b.box((0, h - 0.02, 0.015), (w, 0.04, d), WHITE, texture=top, instance_id=iid)
    return [Surface(-w / 2 + 0.04, -d / 2 + 0.05, w / 2 - 0.04, d / 2 - 0.04, h)]


def sink_counter(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    counter(c, iid, w, d, h)
    sid = c.new_id("sink")
    steel = c.pick(METAL[:2])
    b = c.b
    b.box((0, h + 0.01, 0.02), (0.55, 0.02, 0.42), steel, texture=c.mat["metal"], instance_id=sid)
    b.box((0, h + 0.012, 0.02), (0.48, 0.02, 0.36), (0.3, 0.3, 0.33), instance_id=sid)
    b.cylinder((0, h, -d / 2 + 0.08), 0.025, 0.3, steel, segments=8, instance_id=sid)
    b.box((0, h + 0.3, -d / 2 + 0.16), (0.03, 0.03, 0.2), steel, instance_id=sid)
    side = (w - 0.65) / 2
    if side < 0.2:
        return []
    return [Surface(-w / 2 + 0.04, -d / 2 + 0.05, -w / 2 + side, d / 2 - 0.04, h),
            Surface(w / 2 - side, -d / 2 + 0.05, w / 2 - 0.04, d / 2 - 0.04, h)]


def stove(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    body = c.pick(((0.92, 0.92, 0.92), (0.7, 0.7, 0.73), (0.15, 0.15, 0.16)))
    b.box((0, h / 2, 0), (w, h, d), body, texture=c.mat["metal"], instance_id=iid)
    b.box((0, h + 0.005, 0), (w - 0.02, 0.01, d - 0.02), (0.06, 0.06, 0.07), instance_id=iid)
    for sx in (-1, 1):
        for sz in (-1, 1):
            b.cylinder((sx * w / 4, h + 0.01, sz * d / 4), 0.08 if sz > 0 else 0.06, 0.012, (0.25, 0.25, 0.27),
                       segments=10, instance_id=iid)
    b.box((0, h * 0.45, d / 2 + 0.005), (w - 0.1, h * 0.5, 0.01), (0.1, 0.1, 0.12), instance_id=iid)
    b.box((0, h * 0.78, d / 2 + 0.015), (w - 0.12, 0.025, 0.02), c.pick(METAL), instance_id=iid)
    for k in range(4):
        b.cylinder((-w / 2 + 0.1 + k * (w - 0.2) / 3, h * 0.9, d / 2), 0.02, 0.02, (0.1, 0.1, 0.1), segments=6,
                   instance_id=iid)
    if c.rng.random() < 0.6:
        with b.placed((w / 4 * (1 if c.rng.random() < 0.5 else -1), h + 0.02, d / 4)):
            items.build_small(c, str(c.rng.choice(["pot", "pan", "kettle"])), 0.28, 0.28, 0.3)
    return []


def fridge(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    body = c.pick(((0.95, 0.95, 0.95), (0.75, 0.76, 0.78), (0.2, 0.2, 0.22), (0.75, 0.3, 0.28), (0.55, 0.75, 0.8)))
    b.box((0, h / 2, 0), (w, h, d), body, texture=c.mat["metal"], instance_id=iid)
    split = h * c.uniform(0.35, 0.62)
    b.box((0, split, d / 2 + 0.003), (w + 0.002, 0.012, 0.008), (0.2, 0.2, 0.2), instance_id=iid)
    handle = c.pick(METAL)
    for y0, y1 in ((0.1, split - 0.05), (split + 0.05, h - 0.08)):
        b.box((w / 2 - 0.07, (y0 + y1) / 2, d / 2 + 0.03), (0.025, min(0.5, (y1 - y0) * 0.6), 0.03), handle,
              instance_id=iid)
    for _ in range(int(c.rng.integers(0, 4))):  # magnets / notes
        b.box((c.uniform(-w / 3, w / 5), c.uniform(split + 0.1, h - 0.2), d / 2 + 0.004), (0.07, 0.09, 0.006),
              c.pick(BRIGHT), instance_id=iid)
    return []


def upper_cabinet(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    _cabinet(c, iid, w, d, h, c.pick(PAINT), c.mat["plain"], doors=max(1, int(round(w / 0.45))), base=0.0)
    return []


def kitchen_island(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    return counter(c, iid, w, d, h, top=c.mat["granite"] if c.rng.random() < 0.5 else c.wood())


# ---------------------------------------------------------------------------- bathroom


def toilet(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    white = (0.95, 0.95, 0.95)
    b.box((0, 0.2, -0.02), (w * 0.55, 0.4, d * 0.45), white, instance_id=iid)
    b.ellipsoid((0, 0.36, d * 0.12), (w / 2, 0.06, d * 0.32), white, segments=12, rings=4, instance_id=iid)
    b.ellipsoid((0, 0.41, d * 0.12), (w / 2 - 0.01, 0.025, d * 0.31), c.pick(((0.95, 0.95, 0.95), (0.3, 0.3, 0.32),
                (0.85, 0.75, 0.55))), segments=12, rings=4, instance_id=iid)
    b.box((0, (h + 0.38) / 2, -d / 2 + 0.1), (w, h - 0.38, 0.2), white, instance_id=iid)
    b.box((0, h + 0.015, -d / 2 + 0.1), (w + 0.02, 0.03, 0.22), white, instance_id=iid)
    b.cylinder((w / 2 - 0.06, h + 0.03, -d / 2 + 0.1), 0.015, 0.015, (0.7, 0.7, 0.72), segments=6, instance_id=iid)
    return [Surface(-w / 2 + 0.03, -d / 2 + 0.02, w / 2 - 0.03, -d / 2 + 0.18, h + 0.03)]


def vanity(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    wooden = c.rng.random() < 0.5
    _cabinet(c, iid, w, d - 0.02, h - 0.03, WHITE if wooden else c.pick(PAINT), c.wood() if wooden else c.mat["plain"],
             doors=2 if w > 0.7 else 1)
    b = c.b
    b.box((0, h - 0.015, 0.01), (w, 0.03, d), WHITE, texture=c.mat["marble"], instance_id=iid)
    sid = c.new_id("sink")
    b.ellipsoid((0, h + 0.03, 0.03), (0.22, 0.05, 0.17), (0.96, 0.96, 0.96), segments=12, rings=4, instance_id=sid)
    b.cylinder((0, h, -d / 2 + 0.07), 0.02, 0.22, (0.75, 0.75, 0.78), segments=8, instance_id=sid)
    b.box((0, h + 0.22, -d / 2 + 0.13), (0.025, 0.025, 0.14), (0.75, 0.75, 0.78), instance_id=sid)
    side = (w - 0.5) / 2
    if side < 0.15:
        return []
    return [Surface(-w / 2 + 0.03, -d / 2 + 0.04, -w / 2 + side, d / 2 - 0.04, h),
            Surface(w / 2 - side, -d / 2 + 0.04, w / 2 - 0.03, d / 2 - 0.04, h)]


def bathtub(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    body = c.pick(((0.96, 0.96, 0.96), (0.9, 0.9, 0.86), (0.7, 0.82, 0.88)))
    t = 0.07
    b.box((0, 0.04, 0), (w, 0.08, d), body, instance_id=iid)
    for sx in (-1, 1):
        b.box((sx * (w / 2 - t / 2), h / 2, 0), (t, h, d), body, instance_id=iid)
    for sz in (-1, 1):
        b.box((0, h / 2, sz * (d / 2 - t / 2)), (w - 2 * t, h, t), body, instance_id=iid)
    b.box((0, 0.09, 0), (w - 2 * t, 0.02, d - 2 * t), (0.78, 0.86, 0.92), instance_id=iid)
    b.cylinder((-w / 2 + 0.15, h, -d / 2 + 0.03), 0.02, 0.18, (0.75, 0.75, 0.78), segments=8, instance_id=iid)
    return [Surface(-w / 2 + 0.01, -d / 2 + 0.01, w / 2 - 0.01, -d / 2 + t - 0.005, h)]


def shower(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    b.box((0, 0.04, 0), (w, 0.08, d), (0.95, 0.95, 0.95), instance_id=iid)
    glass = (0.72, 0.84, 0.9)
    for sx in (-1, 1):
        b.box((sx * (w / 2 - 0.01), h / 2 + 0.04, 0), (0.015, h - 0.08, d), glass, instance_id=iid)
    b.box((-w / 4, h / 2 + 0.04, d / 2 - 0.01), (w / 2, h - 0.08, 0.015), glass, instance_id=iid)
    steel = (0.75, 0.75, 0.78)
    b.cylinder((0, 0.08, -d / 2 + 0.04), 0.015, h - 0.3, steel, segments=6, instance_id=iid)
    b.cylinder((0, h - 0.28, -d / 2 + 0.14), 0.08, 0.03, steel, segments=10, instance_id=iid)
    return []


def washing_machine(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    b.box((0, h / 2, 0), (w, h, d), (0.95, 0.95, 0.95), instance_id=iid)
    b.ellipsoid((0, h * 0.45, d / 2), (0.19, 0.19, 0.03), (0.25, 0.28, 0.32), segments=14, rings=4, instance_id=iid)
    b.box((0, h - 0.08, d / 2 + 0.005), (w - 0.04, 0.1, 0.01), (0.8, 0.8, 0.82), instance_id=iid)
    b.cylinder((w / 2 - 0.12, h - 0.08, d / 2), 0.03, 0.02, (0.3, 0.3, 0.3), segments=8, instance_id=iid)
    return [Surface(-w / 2 + 0.03, -d / 2 + 0.03, w / 2 - 0.03, d / 2 - 0.03, h)]


def radiator(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    col = c.pick(((0.95, 0.95, 0.95), (0.85, 0.85, 0.87), (0.3, 0.3, 0.32)))
    n = max(4, int(w / 0.09))
    for k in range(n):
        b.box((-w / 2 + w * (k + 0.5) / n, 0.12 + h / 2, 0), (w / n * 0.7, h, d), col, instance_id=iid)
    b.box((0, 0.12 + h - 0.03, 0), (w, 0.04, d * 0.6), col, instance_id=iid)
    return []


# ---------------------------------------------------------------------------- floor items


def plant(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    pot_h = min(0.45, h * 0.32)
    b.cylinder((0, 0, 0), w * 0.32, pot_h, c.pick(CERAMIC), top_radius=w * 0.4, texture=c.mat["plain"], segments=10,
               instance_id=iid)
    leaf = c.mat["leaves"]
    if c.rng.random() < 0.4:  # cone-shaped conifer
        b.cylinder((0, pot_h, 0), 0.025, 0.15, (0.35, 0.22, 0.12), segments=5, caps=False, instance_id=iid)
        b.cylinder((0, pot_h + 0.1, 0), w / 2, h - pot_h - 0.1, c.pick(((0.15, 0.4, 0.2), (0.2, 0.45, 0.25))),
                   top_radius=0.0, texture=leaf, segments=10, instance_id=iid)
    else:
        b.cylinder((0, pot_h, 0), 0.02, (h - pot_h) * 0.6, (0.35, 0.25, 0.12), segments=5, caps=False, instance_id=iid)
        for _ in range(int(c.rng.integers(3, 6))):
            r = c.uniform(0.12, w / 2)
            y = c.uniform(pot_h + (h - pot_h) * 0.35, h - r * 0.8)
            b.ellipsoid((c.uniform(-w / 5, w / 5), y, c.uniform(-d / 5, d / 5)), (r, r * 0.8, r),
                        c.pick(((0.2, 0.5, 0.2), (0.28, 0.6, 0.25), (0.15, 0.4, 0.22))), texture=leaf, segments=8,
                        rings=5, instance_id=iid)
    return []


def floor_lamp(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    b = c.b
    metal = c.pick(METAL)
    b.cylinder((0, 0, 0), w * 0.4, 0.03, metal, segments=10, instance_id=iid)
    b.cylinder((0, 0.03, 0), 0.015, h - 0.3, metal, segments=6, caps=False, instance_id=iid)
    b.cylinder((0, h - 0.32, 0), w / 2, 0.32, c.pick(((0.97, 0.93, 0.8), (0.95, 0.95, 0.95), (0.85, 0.75, 0.55))),
               top_radius=w * 0.32, texture=c.mat["fabric"], segments=12, instance_id=iid)
    return []


def trash_bin(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    c.b.cylinder((0, 0, 0), w * 0.42, h, c.pick(METAL + BRIGHT[:4]), top_radius=w / 2, texture=c.mat["metal"],
                 segments=10, instance_id=iid)
    c.b.cylinder((0, h, 0), w / 2 + 0.005, 0.02, (0.2, 0.2, 0.2), segments=10, instance_id=iid)
    return []


def laundry_basket(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    c.b.cylinder((0, 0, 0), w * 0.45, h, c.pick(((0.8, 0.68, 0.45), (0.9, 0.9, 0.88), (0.5, 0.6, 0.7))),
                 top_radius=w / 2, texture=c.mat["checker"], segments=10, instance_id=iid)
    c.b.ellipsoid((0, h, 0), (w * 0.42, 0.06, d * 0.42), c.pick(FABRIC), texture=c.mat["fabric"], segments=8, rings=3,
                  instance_id=iid)
    return []


def storage_box(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    c.b.box((0, h / 2, 0), (w, h, d), c.pick(((0.72, 0.56, 0.38),) + BRIGHT[:6]), texture=c.mat["plain"],
            instance_id=iid)
    return [Surface(-w / 2 + 0.02, -d / 2 + 0.02, w / 2 - 0.02, d / 2 - 0.02, h)]


def rug(c: BuildContext, iid: int, w: float, d: float, h: float) -> list[Surface]:
    tex = c.mat.rugs[int(c.rng.integers(len(c.mat.rugs)))]
    c.b.box((0, 0.006, 0), (w, 0.012, d), WHITE, texture=tex, tile=None, instance_id=iid, faces="xXzZY")
    return []
