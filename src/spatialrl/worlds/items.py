"""Small objects (things on tables, shelves and counters) and things hung on walls or ceilings.

Same local frame as ``furniture``: origin at the centre of the footprint, y = 0 at the item's
bottom, front towards +z. Small items are sized to fit the space they are given, so one call
``build_small(c, category, max_w, max_d, max_h)`` places any of them on any surface.
"""

from __future__ import annotations

import math

from spatialrl.worlds.palette import BRIGHT, CERAMIC, FABRIC, METAL, PAINT, WHITE, BuildContext

# category -> (typical w, d, h) in metres; sizes shrink to fit the free space they get.
SMALL_SIZES: dict[str, tuple[float, float, float]] = {
    "cup": (0.08, 0.08, 0.1), "mug": (0.1, 0.08, 0.1), "bowl": (0.18, 0.18, 0.08), "plate": (0.24, 0.24, 0.02),
    "vase": (0.14, 0.14, 0.3), "bottle": (0.08, 0.08, 0.28), "books": (0.22, 0.28, 0.12),
    "apple": (0.08, 0.08, 0.08), "orange": (0.085, 0.085, 0.085), "kettle": (0.2, 0.16, 0.24),
    "toaster": (0.28, 0.16, 0.2), "microwave": (0.5, 0.36, 0.3), "pot": (0.26, 0.22, 0.16),
    "pan": (0.26, 0.4, 0.06), "cutting_board": (0.35, 0.24, 0.02), "table_lamp": (0.28, 0.28, 0.5),
    "candle": (0.07, 0.07, 0.14), "box": (0.2, 0.15, 0.12), "remote": (0.05, 0.17, 0.02),
    "laptop": (0.34, 0.24, 0.22), "alarm_clock": (0.12, 0.07, 0.1), "soap": (0.08, 0.06, 0.04),
    "toothbrush_cup": (0.07, 0.07, 0.18), "towel": (0.3, 0.2, 0.08), "plant_small": (0.16, 0.16, 0.28),
    "picture_frame": (0.16, 0.04, 0.2), "jar": (0.1, 0.1, 0.14), "coffee_maker": (0.22, 0.22, 0.32),
    "tissue_box": (0.22, 0.12, 0.1), "fruit_bowl": (0.26, 0.26, 0.12), "glass": (0.07, 0.07, 0.13),
    "spray_bottle": (0.07, 0.07, 0.24), "toilet_paper": (0.11, 0.11, 0.1), "headphones": (0.18, 0.08, 0.2),
}


def fit_size(c: BuildContext, category: str, max_w: float, max_d: float, max_h: float) -> tuple[float, float, float] | None:
    """A jittered size for ``category`` that fits (max_w, max_d, max_h), or None if it cannot."""
    w, d, h = (v * c.uniform(0.85, 1.2) for v in SMALL_SIZES[category])
    scale = min(1.0, max_w / w, max_d / d, max_h / h)
    if scale < 0.6:
        return None
    return w * scale, d * scale, h * scale


def build_small(c: BuildContext, category: str, max_w: float, max_d: float, max_h: float) -> tuple[float, float] | None:
    """Build one small item (its own instance id) if it fits; returns its (w, d) footprint."""
    size = fit_size(c, category, max_w, max_d, max_h)
    if size is None:
        return None
    iid = c.new_id(category)
    SMALL_BUILDERS[category](c, iid, *size)
    return size[0], size[1]


def _cup(c, iid, w, d, h):
    col = c.pick(CERAMIC + BRIGHT[:4])
    c.b.cylinder((0, 0, 0), w * 0.42, h, col, top_radius=w / 2, segments=10, instance_id=iid)
    c.b.cylinder((0, h * 0.02, 0), w * 0.36, h * 0.99, (0.3, 0.2, 0.12), segments=10, caps=True, instance_id=iid)


def _mug(c, iid, w, d, h):
    col = c.pick(CERAMIC + BRIGHT[:5])
    tex = c.mat["dots"] if c.rng.random() < 0.3 else -1
    c.b.cylinder((0, 0, 0), d / 2, h, col, segments=10, texture=tex, instance_id=iid)
    c.b.box((d / 2 + 0.012, h * 0.5, 0), (0.025, h * 0.6, 0.015), col, instance_id=iid)


def _glass(c, iid, w, d, h):
    c.b.cylinder((0, 0, 0), w * 0.4, h, (0.75, 0.88, 0.92), top_radius=w / 2, segments=10, instance_id=iid)


def _bowl(c, iid, w, d, h):
    c.b.cylinder((0, 0, 0), w * 0.28, h, c.pick(CERAMIC), top_radius=w / 2, segments=12, instance_id=iid)


def _plate(c, iid, w, d, h):
    c.b.cylinder((0, 0, 0), w / 2, h, c.pick(CERAMIC[:3]), segments=14, instance_id=iid)


def _fruit_bowl(c, iid, w, d, h):
    _bowl(c, iid, w, d, h * 0.6)
    for k in range(int(c.rng.integers(2, 4))):  # fruit are objects of their own
        a = 2 * math.pi * k / 3 + c.uniform(0, 0.5)
        cat = str(c.rng.choice(["apple", "orange"]))
        _fruit(c, c.new_id(cat), cat, (math.cos(a) * w * 0.18, h * 0.5, math.sin(a) * w * 0.18), 0.04)


def _fruit(c, iid, category, center, r):
    col = {"apple": c.pick(((0.75, 0.1, 0.1), (0.5, 0.75, 0.2), (0.85, 0.2, 0.15))),
           "orange": c.pick(((0.95, 0.55, 0.1),))}[category]
    c.b.ellipsoid(center, r, col, segments=8, rings=5, instance_id=iid)
    c.b.cylinder((center[0], center[1] + r * 0.9, center[2]), 0.004, r * 0.4, (0.3, 0.2, 0.1), segments=4,
                 instance_id=iid)


def _apple(c, iid, w, d, h):
    _fruit(c, iid, "apple", (0, h / 2, 0), h / 2)


def _orange(c, iid, w, d, h):
    _fruit(c, iid, "orange", (0, h / 2, 0), h / 2)


def _vase(c, iid, w, d, h):
    col = c.pick(CERAMIC)
    tex = c.mat["stripes"] if c.rng.random() < 0.3 else -1
    b = c.b
    b.cylinder((0, 0, 0), w * 0.3, h * 0.55, col, top_radius=w / 2, texture=tex, segments=10, instance_id=iid)
    b.cylinder((0, h * 0.55, 0), w / 2, h * 0.3, col, top_radius=w * 0.22, texture=tex, segments=10, instance_id=iid)
    b.cylinder((0, h * 0.85, 0), w * 0.2, h * 0.15, col, top_radius=w * 0.26, texture=tex, segments=10, instance_id=iid)
    if c.rng.random() < 0.5:  # flowers
        for _ in range(int(c.rng.integers(2, 5))):
            x, z = c.uniform(-w / 4, w / 4), c.uniform(-d / 4, d / 4)
            stem = c.uniform(0.12, 0.22)
            b.cylinder((x, h, z), 0.004, stem, (0.2, 0.45, 0.15), segments=4, caps=False, instance_id=iid)
            b.ellipsoid((x, h + stem, z), 0.03, c.pick(BRIGHT), segments=6, rings=4, instance_id=iid)


def _bottle(c, iid, w, d, h):
    col = c.pick(((0.15, 0.4, 0.2), (0.45, 0.25, 0.1), (0.7, 0.85, 0.9), (0.9, 0.9, 0.9)) + BRIGHT[:3])
    b = c.b
    b.cylinder((0, 0, 0), w / 2, h * 0.62, col, segments=10, instance_id=iid)
    b.cylinder((0, h * 0.62, 0), w / 2, h * 0.15, col, top_radius=w * 0.18, segments=10, instance_id=iid)
    b.cylinder((0, h * 0.77, 0), w * 0.16, h * 0.23, col, segments=6, instance_id=iid)
    b.cylinder((0, h * 0.15, 0), w / 2 + 0.002, h * 0.3, c.pick(BRIGHT), segments=10, caps=False, instance_id=iid)


def _spray_bottle(c, iid, w, d, h):
    col = c.pick(BRIGHT[:8])
    c.b.cylinder((0, 0, 0), w / 2, h * 0.7, col, segments=8, instance_id=iid)
    c.b.box((0, h * 0.82, 0.01), (w * 0.5, h * 0.24, w * 0.8), (0.95, 0.95, 0.95), instance_id=iid)


def _books(c, iid, w, d, h):
    """A small stack of books lying flat."""
    y = 0.0
    n = int(c.rng.integers(2, 5))
    for _ in range(n):
        t = h / n
        bw, bd = w * c.uniform(0.85, 1.0), d * c.uniform(0.85, 1.0)
        c.b.box((c.uniform(-0.01, 0.01), y + t / 2, c.uniform(-0.01, 0.01)), (bw, t * 0.95, bd), c.pick(FABRIC + BRIGHT[:6]),
                texture=c.mat["plain"], instance_id=iid)
        c.b.box((0, y + t / 2, 0.005), (bw - 0.01, t * 0.75, bd), (0.96, 0.94, 0.88), faces="Z", instance_id=iid)
        y += t


def book_row(c: BuildContext, iid: int, x0: float, x1: float, y0: float, depth: float, max_h: float) -> None:
    """Upright books standing side by side on a shelf from x0 to x1 (one object)."""
    x = x0
    while x < x1 - 0.02:
        t = min(c.uniform(0.02, 0.05), x1 - x)
        h = min(max_h, c.uniform(0.16, 0.3))
        bd = min(depth, c.uniform(0.14, 0.24))
        c.b.box((x + t / 2, y0 + h / 2, depth / 2 - bd / 2), (t * 0.96, h, bd), c.pick(FABRIC + BRIGHT[:6] + PAINT[3:4]),
                texture=c.mat["plain"], instance_id=iid)
        x += t


def _kettle(c, iid, w, d, h):
    col = c.pick(METAL[:2] + ((0.85, 0.2, 0.2), (0.95, 0.95, 0.95), (0.2, 0.4, 0.7)))
    b = c.b
    b.cylinder((0, 0, 0), w * 0.42, h * 0.75, col, top_radius=w * 0.3, texture=c.mat["metal"], segments=10, instance_id=iid)
    b.box((-w * 0.35, h * 0.6, 0), (0.03, h * 0.5, 0.03), (0.1, 0.1, 0.1), instance_id=iid)
    b.box((-w * 0.1, h * 0.87, 0), (w * 0.5, 0.03, 0.03), (0.1, 0.1, 0.1), instance_id=iid)
    b.cylinder((w * 0.4, h * 0.3, 0), 0.02, h * 0.35, col, top_radius=0.012, segments=6, instance_id=iid)


def _toaster(c, iid, w, d, h):
    col = c.pick(METAL[:2] + ((0.85, 0.2, 0.2), (0.95, 0.95, 0.95), (0.6, 0.8, 0.7)))
    c.b.box((0, h / 2, 0), (w, h, d), col, texture=c.mat["metal"], instance_id=iid)
    for sx in (-1, 1):
        c.b.box((sx * w / 5, h + 0.002, 0), (w * 0.28, 0.005, d * 0.3), (0.05, 0.05, 0.05), instance_id=iid)
    c.b.box((w / 2 - 0.03, h * 0.6, d / 2 + 0.01), (0.03, 0.02, 0.02), (0.1, 0.1, 0.1), instance_id=iid)


def _microwave(c, iid, w, d, h):
    col = c.pick(((0.95, 0.95, 0.95), (0.2, 0.2, 0.22), (0.7, 0.7, 0.72)))
    c.b.box((0, h / 2, 0), (w, h, d), col, texture=c.mat["metal"], instance_id=iid)
    c.b.box((-w * 0.12, h / 2, d / 2 + 0.004), (w * 0.62, h * 0.7, 0.008), (0.08, 0.08, 0.1), instance_id=iid)
    c.b.box((w * 0.36, h / 2, d / 2 + 0.004), (w * 0.18, h * 0.7, 0.008), (0.25, 0.25, 0.27), instance_id=iid)


def _coffee_maker(c, iid, w, d, h):
    col = c.pick(((0.12, 0.12, 0.13), (0.75, 0.75, 0.78), (0.7, 0.15, 0.15)))
    b = c.b
    b.box((0, 0.02, 0), (w, 0.04, d), col, instance_id=iid)
    b.box((0, h / 2, -d / 4), (w, h, d / 2), col, texture=c.mat["metal"], instance_id=iid)
    b.box((0, h - 0.04, 0.02), (w, 0.08, d - 0.04), col, instance_id=iid)
    b.cylinder((0, 0.04, d / 5), w * 0.3, h * 0.4, (0.7, 0.85, 0.9), segments=10, instance_id=iid)


def _pot(c, iid, w, d, h):
    col = c.pick(METAL[:2] + ((0.75, 0.2, 0.15), (0.15, 0.3, 0.55)))
    c.b.cylinder((0, 0, 0), d / 2, h, col, texture=c.mat["metal"], segments=12, instance_id=iid)
    for sx in (-1, 1):
        c.b.box((sx * (d / 2 + 0.02), h * 0.8, 0), (0.05, 0.02, 0.03), (0.1, 0.1, 0.1), instance_id=iid)


def _pan(c, iid, w, d, h):
    r = w / 2
    c.b.cylinder((0, 0, -d / 2 + r), r, h, (0.15, 0.15, 0.16), top_radius=r * 1.05, segments=12, instance_id=iid)
    c.b.box((0, h * 0.7, -d / 2 + 2 * r + (d - 2 * r) / 2), (0.03, 0.02, d - 2 * r), (0.1, 0.1, 0.1), instance_id=iid)


def _cutting_board(c, iid, w, d, h):
    c.b.box((0, h / 2, 0), (w, h, d), WHITE, texture=c.wood(), instance_id=iid)


def _table_lamp(c, iid, w, d, h):
    b = c.b
    base = c.pick(CERAMIC + METAL)
    b.ellipsoid((0, h * 0.18, 0), (w * 0.25, h * 0.18, w * 0.25), base, segments=10, rings=5, instance_id=iid)
    b.cylinder((0, h * 0.35, 0), 0.012, h * 0.3, (0.7, 0.7, 0.7), segments=5, caps=False, instance_id=iid)
    b.cylinder((0, h * 0.6, 0), w / 2, h * 0.4, c.pick(((0.97, 0.93, 0.8), (0.95, 0.95, 0.95)) + FABRIC[:4]),
               top_radius=w * 0.3, texture=c.mat["fabric"], segments=12, instance_id=iid)


def _candle(c, iid, w, d, h):
    c.b.cylinder((0, 0, 0), w / 2, h * 0.85, c.pick(((0.95, 0.92, 0.82), (0.8, 0.2, 0.2), (0.95, 0.95, 0.95))),
                 segments=8, instance_id=iid)
    c.b.ellipsoid((0, h * 0.93, 0), (0.01, h * 0.07, 0.01), (1.0, 0.8, 0.2), segments=5, rings=3, instance_id=iid)


def _box(c, iid, w, d, h):
    c.b.box((0, h / 2, 0), (w, h, d), c.pick(BRIGHT + ((0.72, 0.56, 0.38),)), texture=c.mat["plain"], instance_id=iid)
    c.b.box((0, h + 0.005, 0), (w + 0.01, 0.012, d + 0.01), c.pick(BRIGHT), instance_id=iid)


def _remote(c, iid, w, d, h):
    c.b.box((0, h / 2, 0), (w, h, d), (0.1, 0.1, 0.11), instance_id=iid)
    c.b.box((0, h + 0.001, d * 0.3), (w * 0.4, 0.003, w * 0.4), (0.8, 0.15, 0.1), instance_id=iid)


def _laptop(c, iid, w, d, h):
    col = c.pick(((0.75, 0.75, 0.78), (0.15, 0.15, 0.16), (0.9, 0.9, 0.92)))
    c.b.box((0, 0.01, 0.02), (w, 0.02, d - 0.04), col, instance_id=iid)
    c.b.box((0, 0.02 + (h - 0.02) / 2, -d / 2 + 0.01), (w, h - 0.02, 0.012), col, instance_id=iid)
    c.b.box((0, 0.02 + (h - 0.02) / 2, -d / 2 + 0.0175), (w - 0.03, h - 0.05, 0.002), c.pick(((0.15, 0.25, 0.5),) + BRIGHT[:3]),
            instance_id=iid)


def _alarm_clock(c, iid, w, d, h):
    col = c.pick(BRIGHT[:6] + CERAMIC[:2])
    c.b.box((0, h / 2, 0), (w, h, d), col, instance_id=iid)
    c.b.box((0, h / 2, d / 2 + 0.002), (w * 0.7, h * 0.5, 0.004), (0.1, 0.1, 0.1), instance_id=iid)


def _soap(c, iid, w, d, h):
    c.b.ellipsoid((0, h / 2, 0), (w / 2, h / 2, d / 2), c.pick(((0.95, 0.85, 0.9), (0.85, 0.95, 0.85), (0.98, 0.95, 0.8))),
                  segments=8, rings=4, instance_id=iid)


def _toothbrush_cup(c, iid, w, d, h):
    c.b.cylinder((0, 0, 0), w / 2, h * 0.55, c.pick(CERAMIC), segments=8, instance_id=iid)
    for k in range(int(c.rng.integers(1, 3))):
        c.b.box(((k - 0.5) * 0.015, h * 0.7, 0), (0.01, h * 0.6, 0.01), c.pick(BRIGHT), instance_id=iid)


def _towel(c, iid, w, d, h):
    col = c.pick(FABRIC + ((0.95, 0.95, 0.95),))
    tex = c.mat["stripes"] if c.rng.random() < 0.5 else c.mat["fabric"]
    c.b.box((0, h / 2, 0), (w, h, d), col, texture=tex, instance_id=iid)


def _plant_small(c, iid, w, d, h):
    b = c.b
    b.cylinder((0, 0, 0), w * 0.32, h * 0.4, c.pick(CERAMIC), top_radius=w * 0.4, segments=8, instance_id=iid)
    if c.rng.random() < 0.4:  # cactus
        b.cylinder((0, h * 0.4, 0), w * 0.2, h * 0.55, (0.25, 0.55, 0.3), top_radius=w * 0.12, texture=c.mat["leaves"],
                   segments=8, instance_id=iid)
    else:
        for _ in range(3):
            r = c.uniform(w * 0.25, w * 0.45)
            b.ellipsoid((c.uniform(-w / 8, w / 8), h * 0.4 + r * 0.8, c.uniform(-w / 8, w / 8)), r,
                        c.pick(((0.2, 0.5, 0.2), (0.3, 0.6, 0.25))), texture=c.mat["leaves"], segments=7, rings=4,
                        instance_id=iid)


def _picture_frame(c, iid, w, d, h):
    c.b.box((0, h / 2, 0), (w, h, d * 0.5), c.pick(METAL + ((0.95, 0.95, 0.95),)), instance_id=iid)
    tex = c.mat.paintings[int(c.rng.integers(len(c.mat.paintings)))]
    c.b.box((0, h / 2, d * 0.25 + 0.002), (w * 0.8, h * 0.8, 0.004), WHITE, texture=tex, tile=None, faces="Z",
            instance_id=iid)
    c.b.box((0, h * 0.35, -d * 0.4), (0.02, h * 0.65, 0.02), (0.2, 0.2, 0.2), instance_id=iid)


def _jar(c, iid, w, d, h):
    c.b.cylinder((0, 0, 0), w / 2, h * 0.85, (0.8, 0.88, 0.9), segments=10, instance_id=iid)
    c.b.cylinder((0, h * 0.85, 0), w / 2 + 0.003, h * 0.15, c.pick(BRIGHT + METAL[:1]), segments=10, instance_id=iid)


def _tissue_box(c, iid, w, d, h):
    c.b.box((0, h / 2, 0), (w, h, d), c.pick(BRIGHT + CERAMIC[:2]), texture=c.mat["dots"], instance_id=iid)
    c.b.ellipsoid((0, h, 0), (w * 0.15, 0.03, d * 0.2), (0.98, 0.98, 0.98), segments=6, rings=3, instance_id=iid)


def _toilet_paper(c, iid, w, d, h):
    c.b.cylinder((0, 0, 0), w / 2, h, (0.97, 0.97, 0.95), segments=10, instance_id=iid)


def _headphones(c, iid, w, d, h):
    col = c.pick(((0.1, 0.1, 0.1), (0.95, 0.95, 0.95), (0.8, 0.2, 0.2), (0.2, 0.3, 0.7)))
    for sx in (-1, 1):
        c.b.ellipsoid((sx * w * 0.38, h * 0.3, 0), (w * 0.12, h * 0.3, d * 0.45), col, segments=8, rings=4,
                      instance_id=iid)
    c.b.box((0, h * 0.95, 0), (w * 0.8, 0.02, 0.03), col, instance_id=iid)


SMALL_BUILDERS = {
    "cup": _cup, "mug": _mug, "glass": _glass, "bowl": _bowl, "plate": _plate, "fruit_bowl": _fruit_bowl,
    "apple": _apple, "orange": _orange, "vase": _vase, "bottle": _bottle, "spray_bottle": _spray_bottle,
    "books": _books, "kettle": _kettle, "toaster": _toaster, "microwave": _microwave, "coffee_maker": _coffee_maker,
    "pot": _pot, "pan": _pan, "cutting_board": _cutting_board, "table_lamp": _table_lamp, "candle": _candle,
    "box": _box, "remote": _remote, "laptop": _laptop, "alarm_clock": _alarm_clock, "soap": _soap,
    "toothbrush_cup": _toothbrush_cup, "towel": _towel, "plant_small": _plant_small,
    "picture_frame": _picture_frame, "jar": _jar, "tissue_box": _tissue_box, "toilet_paper": _toilet_paper,
    "headphones": _headphones,
}
assert set(SMALL_BUILDERS) == set(SMALL_SIZES)


# ---------------------------------------------------------------------------- wall and ceiling items
# Local frame: the wall is the plane z = -d/2 behind the item, y = 0 at the item's bottom edge.


def picture(c: BuildContext, iid: int, w: float, d: float, h: float) -> None:
    frame = c.pick(((0.1, 0.1, 0.1), (0.95, 0.95, 0.95), (0.78, 0.62, 0.3), (0.45, 0.28, 0.15)))
    t = min(0.06, w * 0.08)
    b = c.b
    for y, hh in ((t / 2, t), (h - t / 2, t)):
        b.box((0, y, 0), (w, hh, d), frame, instance_id=iid)
    for sx in (-1, 1):
        b.box((sx * (w / 2 - t / 2), h / 2, 0), (t, h - 2 * t, d), frame, instance_id=iid)
    tex = c.mat.paintings[int(c.rng.integers(len(c.mat.paintings)))]
    b.box((0, h / 2, -d / 4), (w - 2 * t, h - 2 * t, d / 2), WHITE, texture=tex, tile=None, faces="Z",
          instance_id=iid)


def mirror(c: BuildContext, iid: int, w: float, d: float, h: float) -> None:
    frame = c.pick(((0.1, 0.1, 0.1), (0.95, 0.95, 0.95), (0.78, 0.62, 0.3)))
    c.b.box((0, h / 2, -d / 4), (w, h, d / 2), frame, instance_id=iid)
    c.b.box((0, h / 2, d / 4), (w - 0.06, h - 0.06, d / 2), (0.78, 0.84, 0.86), texture=c.mat["metal"], instance_id=iid)


def clock(c: BuildContext, iid: int, w: float, d: float, h: float) -> None:
    r = w / 2
    b = c.b
    b.ellipsoid((0, r, 0), (r, r, d / 2), c.pick(((0.1, 0.1, 0.1), (0.78, 0.62, 0.3), (0.85, 0.2, 0.2), (0.2, 0.4, 0.7))),
                segments=16, rings=4, instance_id=iid)
    b.ellipsoid((0, r, 0.004), (r * 0.86, r * 0.86, d / 2), (0.97, 0.97, 0.95), segments=16, rings=4, instance_id=iid)
    a = c.uniform(0, 2 * math.pi)
    b.box((math.sin(a) * r * 0.3, r + math.cos(a) * r * 0.3, d / 2 + 0.006), (0.012, 0.012, 0.004), (0.1, 0.1, 0.1),
          instance_id=iid)
    b.box((0, r + r * 0.25, d / 2 + 0.006), (0.01, r * 0.5, 0.004), (0.1, 0.1, 0.1), instance_id=iid)


def window(c: BuildContext, iid: int, w: float, d: float, h: float) -> None:
    b = c.b
    frame = c.pick(((0.97, 0.97, 0.97), (0.35, 0.22, 0.12), (0.2, 0.2, 0.22)))
    t = 0.06
    sky = c.pick(((0.72, 0.86, 1.0), (0.8, 0.9, 1.0), (0.65, 0.8, 0.95)), jitter=0.03)
    b.box((0, h / 2, -d / 4), (w - 2 * t, h - 2 * t, d / 2), sky, instance_id=iid)
    for y in (t / 2, h - t / 2, h / 2):
        b.box((0, y, 0), (w, t if y != h / 2 else t * 0.6, d), frame, instance_id=iid)
    for x in (-w / 2 + t / 2, w / 2 - t / 2, 0.0):
        b.box((x, h / 2, 0), (t if x else t * 0.6, h, d), frame, instance_id=iid)
    b.box((0, -0.02, 0.04), (w + 0.1, 0.04, d + 0.08), frame, instance_id=iid)  # sill


def towel_rack(c: BuildContext, iid: int, w: float, d: float, h: float) -> None:
    steel = (0.78, 0.78, 0.8)
    b = c.b
    for sx in (-1, 1):
        b.box((sx * w / 2, h - 0.03, 0), (0.03, 0.06, d), steel, instance_id=iid)
    b.box((0, h - 0.03, d / 2 - 0.015), (w, 0.02, 0.02), steel, instance_id=iid)
    tid = c.new_id("towel")
    tw = w * c.uniform(0.5, 0.85)
    b.box((0, h - 0.03 - 0.25, d / 2 - 0.015), (tw, 0.52, 0.04), c.pick(FABRIC + ((0.95, 0.95, 0.95),)),
          texture=c.mat["stripes"] if c.rng.random() < 0.5 else c.mat["fabric"], instance_id=tid)


def ceiling_lamp(c: BuildContext, iid: int, w: float, d: float, h: float) -> None:
    """Hangs from y = h (the ceiling) down to y = 0."""
    b = c.b
    if c.rng.random() < 0.5:  # pendant
        b.cylinder((0, 0.3, 0), 0.008, h - 0.3, (0.15, 0.15, 0.15), segments=4, caps=False, instance_id=iid)
        b.cylinder((0, 0, 0), w / 2, 0.3, c.pick(METAL + CERAMIC[:3]), top_radius=w * 0.12, segments=14,
                   instance_id=iid)
        b.ellipsoid((0, 0.02, 0), w * 0.15, (1.0, 0.97, 0.85), segments=8, rings=4, instance_id=iid)
    else:  # flush dome: a flattened half-ball under a ceiling rose, entirely below the ceiling
        ry = min((h - 0.03) / 2, 0.12)
        b.cylinder((0, h - 0.03, 0), w * 0.3, 0.03, (0.9, 0.9, 0.9), segments=10, instance_id=iid)
        b.ellipsoid((0, h - 0.03 - ry, 0), (w / 2, ry, w / 2), (0.98, 0.96, 0.9), segments=14, rings=5,
                    instance_id=iid)


HANGING_BUILDERS = {"picture": picture, "mirror": mirror, "clock": clock, "window": window,
                    "towel_rack": towel_rack}
