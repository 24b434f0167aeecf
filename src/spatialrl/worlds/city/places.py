"""Named places (cafés, banks, pharmacies, ...) in storefronts, and the sign images that show them.

A place occupies a storefront "unit" of a building's ground floor: on corner buildings the unit at
the corner (so corner shops are within V-IRL's 18 m landmark radius of the intersection), elsewhere
a unit somewhere along the front. Its ``position`` (the V-IRL place geocode) is the middle of the
unit on the building line.

Every place has a unique name, a brand colour and a logo shape, and its signs print the name in
large letters, so "Bluebird Cafe is on your right" is a fact in the pixels. Names never contain the
characters that would break the V-IRL ``milestone_info`` string parser (braces, quotes, colons,
newlines) nor the word "intersection" (which the V-IRL reward code searches for).
"""

from __future__ import annotations

import colorsys
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from spatialrl.worlds.city.lots import Lot
from spatialrl.worlds.city.styles import CityStyle

# category → (name templates, V-IRL/Google place types, hue hints in degrees)
CATEGORIES: dict[str, tuple[tuple[str, ...], tuple[str, ...], tuple[float, ...]]] = {
    "cafe": (("{w} Cafe", "Cafe {w}", "{w} Coffee", "{w} Espresso Bar"), ("cafe", "food"), (25, 30, 140)),
    "bank": (("{w} Bank", "{w} Savings Bank", "First {w} Bank", "{w} Trust"), ("bank", "finance"), (210, 220, 120)),
    "pharmacy": (("{w} Pharmacy", "{w} Drugstore", "{w} Apothecary"), ("pharmacy", "health"), (130, 140, 0)),
    "bakery": (("{w} Bakery", "{w} Bread Co", "{w} Patisserie"), ("bakery", "food"), (35, 40, 330)),
    "bookstore": (("{w} Books", "{w} Bookshop", "{w} Reading Room"), ("book_store", "store"), (270, 0, 190)),
    "restaurant": (("{w} Bistro", "{w} Kitchen", "{w} Grill", "Trattoria {w}", "{w} Diner"),
                   ("restaurant", "food"), (0, 15, 350)),
    "pizza": (("{w} Pizza", "Pizzeria {w}"), ("meal_takeaway", "restaurant"), (5, 10)),
    "sushi": (("Sushi {w}", "{w} Ramen", "{w} Noodle House"), ("restaurant", "food"), (355, 200)),
    "hotel": (("Hotel {w}", "{w} Inn", "The {w} Hotel"), ("lodging",), (45, 220, 280)),
    "gym": (("{w} Fitness", "{w} Gym", "{w} Yoga"), ("gym", "health"), (15, 300, 180)),
    "florist": (("{w} Flowers", "{w} Florist"), ("florist", "store"), (320, 300, 95)),
    "grocery": (("{w} Market", "{w} Grocery", "{w} Deli"), ("grocery_or_supermarket", "store"), (100, 120, 50)),
    "barber": (("{w} Barbers", "{w} Hair Studio"), ("hair_care",), (200, 0, 230)),
    "bar": (("The {w} Tavern", "{w} Pub", "{w} Wine Bar"), ("bar",), (285, 350, 30)),
    "icecream": (("{w} Gelato", "{w} Ice Cream"), ("food",), (180, 320, 60)),
    "hardware": (("{w} Hardware", "{w} Tools"), ("hardware_store", "store"), (30, 55, 0)),
    "optician": (("{w} Optics", "{w} Eyewear"), ("store", "health"), (190, 240)),
    "toys": (("{w} Toys", "{w} Games"), ("store",), (55, 300, 170)),
    "cycles": (("{w} Cycles", "{w} Bike Shop"), ("bicycle_store", "store"), (150, 20)),
    "records": (("{w} Records", "{w} Music"), ("store",), (260, 330)),
    "laundry": (("{w} Laundry", "{w} Cleaners"), ("laundry",), (195, 175)),
    "tea": (("{w} Tea House", "{w} Tea Room"), ("cafe",), (90, 110)),
}

WORDS = (
    "Bluebird", "Maple", "Harbor", "Golden", "Juniper", "Copper", "Olive", "Cedar", "Falcon", "Lantern", "Meridian",
    "Orchid", "Saffron", "Willow", "Pioneer", "Riverside", "Summit", "Atlas", "Beacon", "Cobalt", "Crimson", "Ember",
    "Fig", "Garnet", "Hazel", "Indigo", "Jasper", "Kestrel", "Lotus", "Magnolia", "Nimbus", "Oak", "Pebble", "Quill",
    "Raven", "Sparrow", "Thistle", "Velvet", "Walnut", "Yarrow", "Zephyr", "Rossi", "Nakamura", "Okafor",
    "Lindqvist", "Moreau", "Patel", "Kowalski", "Alvarez", "Chen", "Murphy", "Haddad", "Nguyen", "Schmidt",
    "Costa", "Ivanova", "Mensah", "Dubois", "Tanaka", "Silva", "Amber", "Birch", "Clover", "Dune", "Elm", "Fern",
    "Granite", "Heron", "Iris", "Jade", "Koi", "Laurel", "Mint", "Nova", "Opal", "Pine", "Quartz", "Ruby",
    "Sage", "Tulip", "Umbra", "Violet", "Wren", "Aurora", "Bramble", "Comet", "Delta", "Echo", "Fjord", "Glacier",
    "Horizon", "Island", "Jubilee", "Kite", "Lighthouse", "Marigold", "Northstar", "Orbit", "Paloma", "Quay",
    "Rosewood", "Starling", "Tidewater", "Upland", "Vista", "Wildflower", "Yellowtail", "Zenith", "Acorn",
    "Blossom", "Canyon", "Dahlia", "Evergreen", "Firefly", "Goldfinch", "Hummingbird", "Ivy", "Juno", "Kingfisher",
)

LOGOS = ("circle", "square", "triangle", "diamond", "star", "ring", "hexagon", "cross", "leaf", "bars")
_FORBIDDEN = set('{}"\':\n\r\\')

SIGN_STRIP = (512, 64)  # fascia sign texture cell (w, h) px; 8 per 512x512 texture layer
BLADE_CELL = (128, 128)  # blade (hanging) sign texture cell; 16 per layer
PANEL_CELL = (256, 128)  # corner panel texture cell; 8 per layer


@dataclass
class Place:
    """A named storefront. Geometry in local metres; ``position`` is its V-IRL geocode point."""

    index: int
    name: str
    category: str
    types: tuple[str, ...]
    lot: int
    unit: tuple[float, float]  # start/end distance along the lot's front wall
    position: np.ndarray  # (2,) middle of the unit on the building line
    normal: np.ndarray  # (2,) front wall normal (towards the street)
    color: tuple[float, float, float]  # brand colour, RGB 0..1
    text_color: tuple[float, float, float]
    accent: tuple[float, float, float]
    logo: str
    corner_end: int  # -1: mid-block unit; 0/1: the unit sits at the lot's front[0]/front[1] end
    side_sign: bool  # a second fascia on the exposed side wall at the corner end

    def to_json(self, latlng: list[float], street: str) -> dict:
        return {
            "name": self.name,
            "category": self.category,
            "types": list(self.types),
            "geocode": latlng,
            "vicinity": street,
            "brand_color": "#" + "".join(f"{round(c * 255):02x}" for c in self.color),
            "logo": self.logo,
        }


def _brand_color(hue_deg: float, rng: np.random.Generator) -> tuple[float, float, float]:
    h = ((hue_deg + rng.uniform(-12, 12)) % 360) / 360.0
    s = rng.uniform(0.55, 0.95)
    v = rng.uniform(0.45, 0.9)
    return colorsys.hsv_to_rgb(h, s, v)


def _accent_color(bg: tuple[float, float, float], text: tuple[float, float, float],
                  rng: np.random.Generator) -> tuple[float, float, float]:
    """A logo/border colour that stands out from the sign background (else the text colour)."""
    h, _, _ = colorsys.rgb_to_hsv(*bg)
    accent = colorsys.hsv_to_rgb((h + rng.uniform(0.33, 0.67)) % 1.0, rng.uniform(0.6, 1.0), rng.uniform(0.8, 1.0))
    return accent if abs(_luma(accent) - _luma(bg)) >= 0.25 else text


def _luma(c: tuple[float, float, float]) -> float:
    return 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]


def make_name(category: str, rng: np.random.Generator, taken: set[str]) -> str:
    """A unique place name for ``category`` (suffixes a number only if every combination is taken)."""
    templates = CATEGORIES[category][0]
    for _ in range(200):
        name = templates[int(rng.integers(len(templates)))].format(w=WORDS[int(rng.integers(len(WORDS)))])
        if name not in taken:
            break
    else:
        base, k = name, 2
        while f"{base} {k}" in taken:
            k += 1
        name = f"{base} {k}"
    check_name(name)
    taken.add(name)
    return name


def check_name(name: str) -> None:
    """Names go verbatim into the V-IRL milestone string; reject what would break its parser."""
    bad = _FORBIDDEN & set(name)
    if bad or "intersection" in name.lower() or not name.strip():
        raise ValueError(f"place name {name!r} contains characters or words the V-IRL format cannot carry")


def assign_places(lots: list[Lot], style: CityStyle, rng: np.random.Generator) -> list[Place]:
    """Pick storefront units and give each a named place. Corner units first (they become the
    landmarks at intersections), mid-block units with the style's ``store_share``."""
    places: list[Place] = []
    taken: set[str] = set()
    cats = sorted(CATEGORIES)
    for li, lot in enumerate(lots):
        corner_ends = [k for k in (0, 1) if lot.exposed[k]] if not lot.wedge else [0 if _apex_first(lot) else 1]
        width = lot.width
        if width < 4.5:
            continue
        if corner_ends and rng.random() < style.corner_store_share:
            end = corner_ends[int(rng.integers(len(corner_ends)))]
            uw = min(width, float(rng.uniform(5.5, 7.5)))
            unit = (0.0, uw) if end == 0 else (width - uw, width)
        elif rng.random() < style.store_share:
            end = -1
            uw = min(width - 0.5, float(rng.uniform(5.5, 9.0)))
            u0 = float(rng.uniform(0.25, width - uw - 0.25)) if width - uw > 0.5 else (width - uw) / 2
            unit = (u0, u0 + uw)
        else:
            continue
        category = cats[int(rng.integers(len(cats)))]
        hues = CATEGORIES[category][2]
        color = _brand_color(hues[int(rng.integers(len(hues)))], rng)
        text = (1.0, 1.0, 1.0) if _luma(color) < 0.6 else (0.08, 0.08, 0.1)
        accent = _accent_color(color, text, rng)
        d = (lot.front[1] - lot.front[0]) / width
        pos = lot.front[0] + d * (unit[0] + unit[1]) / 2
        places.append(Place(
            index=len(places), name=make_name(category, rng, taken), category=category,
            types=CATEGORIES[category][1] + ("point_of_interest", "establishment"), lot=li, unit=unit,
            position=pos, normal=lot.normal.copy(), color=tuple(float(c) for c in color),
            text_color=text, accent=tuple(float(c) for c in accent), logo=LOGOS[int(rng.integers(len(LOGOS)))],
            corner_end=end, side_sign=end >= 0 and not lot.wedge,
        ))
    return places


def _apex_first(lot: Lot) -> bool:
    """For a flatiron wedge: is the apex (the sharp corner) at ``front[0]``?"""
    apex = lot.polygon[int(np.argmin([_angle_at(lot.polygon, i) for i in range(len(lot.polygon))]))]
    return bool(np.linalg.norm(lot.front[0] - apex) < np.linalg.norm(lot.front[1] - apex))


def _angle_at(poly: np.ndarray, i: int) -> float:
    a, b, c = poly[i - 1], poly[i], poly[(i + 1) % len(poly)]
    u, v = a - b, c - b
    return float(np.arccos(np.clip(u @ v / (np.linalg.norm(u) * np.linalg.norm(v)), -1, 1)))


# ---------------------------------------------------------------------------------------------- signs
@lru_cache(maxsize=64)
def _font(size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.load_default(size=size)


def _draw_logo(draw: ImageDraw.ImageDraw, shape: str, box: tuple[float, float, float, float],
               fill: tuple[int, int, int], bg: tuple[int, int, int]) -> None:
    x0, y0, x1, y1 = box
    cx, cy, r = (x0 + x1) / 2, (y0 + y1) / 2, (x1 - x0) / 2
    if shape == "circle":
        draw.ellipse(box, fill=fill)
    elif shape == "ring":
        draw.ellipse(box, fill=fill)
        draw.ellipse((cx - r * 0.55, cy - r * 0.55, cx + r * 0.55, cy + r * 0.55), fill=bg)
    elif shape == "square":
        draw.rectangle((x0 + r * 0.1, y0 + r * 0.1, x1 - r * 0.1, y1 - r * 0.1), fill=fill)
    elif shape == "triangle":
        draw.polygon([(cx, y0), (x1, y1), (x0, y1)], fill=fill)
    elif shape == "diamond":
        draw.polygon([(cx, y0), (x1, cy), (cx, y1), (x0, cy)], fill=fill)
    elif shape == "hexagon":
        pts = [(cx + r * np.cos(a), cy + r * np.sin(a)) for a in np.linspace(0, 2 * np.pi, 7)[:-1]]
        draw.polygon(pts, fill=fill)
    elif shape == "star":
        ang = np.linspace(-np.pi / 2, 1.5 * np.pi, 11)[:-1]
        rad = np.where(np.arange(10) % 2 == 0, r, r * 0.45)
        draw.polygon([(cx + q * np.cos(a), cy + q * np.sin(a)) for a, q in zip(ang, rad, strict=True)], fill=fill)
    elif shape == "cross":
        w = r * 0.38
        draw.rectangle((cx - w, y0, cx + w, y1), fill=fill)
        draw.rectangle((x0, cy - w, x1, cy + w), fill=fill)
    elif shape == "leaf":
        draw.ellipse((x0, y0 + r * 0.35, x1, y1 - r * 0.35), fill=fill)
        draw.line((x0 + r * 0.2, cy, x1 - r * 0.2, cy), fill=bg, width=max(1, int(r * 0.12)))
    elif shape == "bars":
        for k in range(3):
            h = r * (0.8 + 0.6 * k)
            bx = x0 + k * (x1 - x0) / 3
            draw.rectangle((bx + r * 0.08, y1 - h, bx + (x1 - x0) / 3 - r * 0.08, y1), fill=fill)
    else:
        raise ValueError(f"unknown logo shape {shape!r}")


def _rgb8(c: tuple[float, float, float]) -> tuple[int, int, int]:
    return tuple(int(round(v * 255)) for v in c)  # type: ignore[return-value]


def fascia_image(place: Place, aspect: float) -> np.ndarray:
    """The shop sign over the storefront: logo + name, ``aspect`` = width / height of the real sign.

    Drawn at ``SIGN_STRIP`` height and width ``aspect * height`` (at most the strip width), so the
    letters are not stretched when the sign is mapped onto its quad."""
    sw, sh = SIGN_STRIP
    w = int(min(sw, max(sh, round(aspect * sh))))
    bg, fg = _rgb8(place.color), _rgb8(place.text_color)
    img = Image.new("RGB", (w, sh), bg)
    draw = ImageDraw.Draw(img)
    border = max(2, sh // 16)
    draw.rectangle((0, 0, w - 1, sh - 1), outline=_rgb8(place.accent), width=border)
    pad = border + 3
    logo_size = sh - 2 * pad
    _draw_logo(draw, place.logo, (pad, pad, pad + logo_size, pad + logo_size), _rgb8(place.accent), bg)
    text_x0 = pad * 2 + logo_size
    avail_w, avail_h = w - text_x0 - pad, sh - 2 * pad
    size = avail_h
    font = _font(size)
    while size > 8:
        font = _font(size)
        x0, y0, x1, y1 = draw.textbbox((0, 0), place.name, font=font)
        if x1 - x0 <= avail_w and y1 - y0 <= avail_h:
            break
        size -= 2
    x0, y0, x1, y1 = draw.textbbox((0, 0), place.name, font=font)
    tx = text_x0 + (avail_w - (x1 - x0)) / 2 - x0
    ty = pad + (avail_h - (y1 - y0)) / 2 - y0
    draw.text((tx, ty), place.name, font=font, fill=fg)
    return np.asarray(img, dtype=np.uint8)


def blade_image(place: Place) -> np.ndarray:
    """The hanging sign perpendicular to the wall: a big logo over the name."""
    cw, ch = BLADE_CELL
    bg, fg = _rgb8(place.color), _rgb8(place.text_color)
    img = Image.new("RGB", (cw, ch), bg)
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, cw - 1, ch - 1), outline=_rgb8(place.accent), width=4)
    _draw_logo(draw, place.logo, (cw * 0.3, 8, cw * 0.7, 8 + cw * 0.4), _rgb8(place.accent), bg)
    words = place.name.split()
    lines = [" ".join(words[: (len(words) + 1) // 2]), " ".join(words[(len(words) + 1) // 2:])]
    lines = [ln for ln in lines if ln]
    top, bottom = 8 + cw * 0.4 + 4, ch - 6
    size = int((bottom - top) / len(lines)) - 2
    while size > 6:
        font = _font(size)
        widths = [draw.textbbox((0, 0), ln, font=font) for ln in lines]
        if all(b[2] - b[0] <= cw - 10 for b in widths):
            break
        size -= 1
    font = _font(size)
    y = top
    for ln in lines:
        x0, y0, x1, y1 = draw.textbbox((0, 0), ln, font=font)
        draw.text(((cw - (x1 - x0)) / 2 - x0, y - y0), ln, font=font, fill=fg)
        y += (bottom - top) / len(lines)
    return np.asarray(img, dtype=np.uint8)


def panel_image(place: Place) -> np.ndarray:
    """The corner panel (2:1) facing the intersection: logo on the left, the name in up to two
    large lines, so it stays legible from the middle of the crossing."""
    cw, ch = PANEL_CELL
    bg, fg = _rgb8(place.color), _rgb8(place.text_color)
    img = Image.new("RGB", (cw, ch), bg)
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, cw - 1, ch - 1), outline=_rgb8(place.accent), width=5)
    logo = ch * 0.42
    _draw_logo(draw, place.logo, (8, (ch - logo) / 2, 8 + logo, (ch + logo) / 2), _rgb8(place.accent), bg)
    x0 = 8 + logo + 6
    words = place.name.split()
    best = None
    for cut in range(1, len(words) + 1):  # split into two lines as evenly as possible
        lines = [" ".join(words[:cut]), " ".join(words[cut:])]
        lines = [ln for ln in lines if ln]
        width = max(len(ln) for ln in lines)
        if best is None or width < best[0]:
            best = (width, lines)
    lines = best[1]
    avail_w, avail_h = cw - x0 - 8, ch - 12
    size = int(avail_h / len(lines))
    while size > 8:
        font = _font(size)
        boxes = [draw.textbbox((0, 0), ln, font=font) for ln in lines]
        if all(b[2] - b[0] <= avail_w for b in boxes) and sum(b[3] - b[1] for b in boxes) + 4 * len(lines) <= avail_h:
            break
        size -= 1
    font = _font(size)
    boxes = [draw.textbbox((0, 0), ln, font=font) for ln in lines]
    total = sum(b[3] - b[1] for b in boxes) + 4 * (len(lines) - 1)
    y = (ch - total) / 2
    for ln, b in zip(lines, boxes, strict=True):
        draw.text((x0 + (avail_w - (b[2] - b[0])) / 2 - b[0], y - b[1]), ln, font=font, fill=fg)
        y += b[3] - b[1] + 4
    return np.asarray(img, dtype=np.uint8)
