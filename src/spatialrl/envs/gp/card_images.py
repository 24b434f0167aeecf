"""Card faces drawn by our own code (no image files), laid out on a green table like the reference's.

Every card shows its rank and suit symbol in two opposite corners; number cards show the usual pip
pattern, the ace one large pip, and J/Q/K a framed cream panel with the letter, an emblem (a cap, a
tiara, a crown) and the suit — so a face card is told apart by more than its letter. Hearts and
diamonds are red, spades and clubs black (the visual-OOD split deals only red suits).

The table follows ``GeneralPointEnv_oneline._get_observation``: a square canvas of ``#35654d``
(casino green), four cards ``0.9 * size / 4`` wide with a 5:7 aspect, left edges at ``5 + i * 1.1 *
card width``, vertically centred. Shapes are drawn at twice the size and downsampled, for clean edges
at any resolution. The font is Pillow's built-in scalable one, so nothing is read from disk.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from spatialrl.envs.gp.cards import Card

TABLE_COLOR = (0x35, 0x65, 0x4D)
RED = (196, 22, 28)
BLACK = (18, 18, 18)
PAPER = (252, 251, 247)
FACE_PANEL = (250, 236, 200)
GOLD = (212, 160, 23)
SUPERSAMPLE = 2

# Pip centres in the pip area, as (x, y) fractions: x 0/0.5/1 = left/centre/right column.
PIPS: dict[int, list[tuple[float, float]]] = {
    2: [(0.5, 0.0), (0.5, 1.0)],
    3: [(0.5, 0.0), (0.5, 0.5), (0.5, 1.0)],
    4: [(0, 0), (1, 0), (0, 1), (1, 1)],
    5: [(0, 0), (1, 0), (0.5, 0.5), (0, 1), (1, 1)],
    6: [(0, 0), (1, 0), (0, 0.5), (1, 0.5), (0, 1), (1, 1)],
    7: [(0, 0), (1, 0), (0.5, 0.25), (0, 0.5), (1, 0.5), (0, 1), (1, 1)],
    8: [(0, 0), (1, 0), (0.5, 0.25), (0, 0.5), (1, 0.5), (0.5, 0.75), (0, 1), (1, 1)],
    9: [(0, 0), (1, 0), (0, 1 / 3), (1, 1 / 3), (0.5, 0.5), (0, 2 / 3), (1, 2 / 3), (0, 1), (1, 1)],
    10: [(0, 0), (1, 0), (0.5, 1 / 6), (0, 1 / 3), (1, 1 / 3), (0, 2 / 3), (1, 2 / 3), (0.5, 5 / 6), (0, 1), (1, 1)],
}


def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=max(6, size))


def _circle(draw: ImageDraw.ImageDraw, x: float, y: float, r: float, fill: tuple[int, int, int]) -> None:
    draw.ellipse((x - r, y - r, x + r, y + r), fill=fill)


def draw_suit(draw: ImageDraw.ImageDraw, suit: str, cx: float, cy: float, size: float,
              fill: tuple[int, int, int]) -> None:
    """Draw a suit symbol of height ``size`` centred on (cx, cy): heart, diamond, spade or club."""
    s = size
    if suit == "H":
        r = 0.27 * s
        _circle(draw, cx - 0.24 * s, cy - 0.2 * s, r, fill)
        _circle(draw, cx + 0.24 * s, cy - 0.2 * s, r, fill)
        draw.polygon([(cx - 0.5 * s, cy - 0.17 * s), (cx + 0.5 * s, cy - 0.17 * s), (cx, cy + 0.5 * s)], fill=fill)
    elif suit == "D":
        draw.polygon([(cx, cy - 0.5 * s), (cx + 0.36 * s, cy), (cx, cy + 0.5 * s), (cx - 0.36 * s, cy)], fill=fill)
    elif suit == "S":
        r = 0.25 * s
        _circle(draw, cx - 0.22 * s, cy + 0.08 * s, r, fill)
        _circle(draw, cx + 0.22 * s, cy + 0.08 * s, r, fill)
        draw.polygon([(cx - 0.46 * s, cy + 0.06 * s), (cx + 0.46 * s, cy + 0.06 * s), (cx, cy - 0.5 * s)], fill=fill)
        draw.polygon([(cx, cy + 0.05 * s), (cx - 0.17 * s, cy + 0.5 * s), (cx + 0.17 * s, cy + 0.5 * s)], fill=fill)
    elif suit == "C":
        r = 0.2 * s
        _circle(draw, cx, cy - 0.25 * s, r, fill)
        _circle(draw, cx - 0.23 * s, cy + 0.08 * s, r, fill)
        _circle(draw, cx + 0.23 * s, cy + 0.08 * s, r, fill)
        draw.polygon([(cx, cy - 0.05 * s), (cx - 0.16 * s, cy + 0.5 * s), (cx + 0.16 * s, cy + 0.5 * s)], fill=fill)
    else:
        raise ValueError(f"unknown suit {suit!r}")


def _emblem(draw: ImageDraw.ImageDraw, rank: int, cx: float, cy: float, w: float, color: tuple[int, int, int]) -> None:
    """A crown (K), a tiara (Q) or a feathered cap (J), ``w`` wide, centred on (cx, cy)."""
    h = 0.5 * w
    line = max(1, int(w / 40))
    if rank == 13:
        top, base = cy - h / 2, cy + h / 2
        pts = [(cx - w / 2, base), (cx - w / 2, top), (cx - w / 4, cy), (cx, top - 0.1 * h), (cx + w / 4, cy),
               (cx + w / 2, top), (cx + w / 2, base)]
        draw.polygon(pts, fill=GOLD, outline=color, width=line)
        for x in (cx - w / 2, cx, cx + w / 2):
            _circle(draw, x, (top - 0.1 * h) if x == cx else top, 0.07 * w, color)
    elif rank == 12:
        band_top = cy + 0.1 * h
        draw.rectangle((cx - w / 2, band_top, cx + w / 2, cy + h / 2), fill=GOLD, outline=color, width=line)
        # A diadem: a gold arch over the band, pearls along the arch.
        rx, ry = 0.42 * w, 0.75 * h
        draw.arc((cx - rx, band_top - ry, cx + rx, band_top + ry), 180, 360, fill=GOLD, width=max(2, int(w / 12)))
        for angle in (200, 240, 270, 300, 340):
            t = np.deg2rad(angle)
            _circle(draw, cx + rx * np.cos(t), band_top + ry * np.sin(t), 0.06 * w, color)
    elif rank == 11:
        draw.pieslice((cx - w / 2, cy - h / 2, cx + w / 2, cy + 1.5 * h / 2), 180, 360, fill=color)
        draw.rectangle((cx - 0.55 * w, cy + 0.1 * h, cx + 0.55 * w, cy + 0.3 * h), fill=color)
        draw.polygon([(cx + 0.1 * w, cy - 0.2 * h), (cx + 0.6 * w, cy - 0.9 * h), (cx + 0.3 * w, cy - 0.1 * h)],
                     fill=GOLD, outline=color, width=line)


@lru_cache(maxsize=512)
def render_card(card: Card, width: int, height: int) -> Image.Image:
    """One card face as an RGBA image of ``width`` × ``height`` (transparent outside the rounded corners).

    Cached: callers must not draw on the returned image (paste it, or copy it first).
    """
    W, H = width * SUPERSAMPLE, height * SUPERSAMPLE
    img = Image.new("RGBA", (W, H), (0, 0, 0, 0))
    draw = ImageDraw.Draw(img)
    color = RED if card.is_red else BLACK
    border = max(1, W // 110)
    draw.rounded_rectangle((0, 0, W - 1, H - 1), radius=int(0.07 * W), fill=PAPER + (255,),
                           outline=(140, 140, 140, 255), width=border)

    # Corner index: rank over a small suit symbol, top-left; the same turned 180° bottom-right.
    index_font = _font(int(0.17 * W))
    cx, top = 0.115 * W, 0.035 * H
    draw.text((cx, top), card.name, font=index_font, fill=color, anchor="mt",
              stroke_width=max(1, W // 180), stroke_fill=color)
    text_h = index_font.getbbox("10")[3]
    draw_suit(draw, card.suit, cx, top + text_h + 0.085 * W, 0.1 * W, color)
    corner = (0, 0, int(0.24 * W), int(top + text_h + 0.15 * W))
    img.paste(img.crop(corner).rotate(180), (W - corner[2], H - corner[3]))

    x0, x1, y0, y1 = 0.29 * W, 0.71 * W, 0.17 * H, 0.83 * H
    if card.rank == 1:
        draw_suit(draw, card.suit, W / 2, H / 2, 0.42 * W, color)
    elif card.rank <= 10:
        pip = 0.2 * W
        for fx, fy in PIPS[card.rank]:
            draw_suit(draw, card.suit, x0 + fx * (x1 - x0), y0 + fy * (y1 - y0), pip, color)
    else:
        panel = (0.2 * W, 0.13 * H, 0.8 * W, 0.87 * H)
        draw.rectangle(panel, fill=FACE_PANEL + (255,), outline=color, width=max(2, W // 70))
        _emblem(draw, card.rank, W / 2, 0.3 * H, 0.36 * W, color)
        draw.text((W / 2, 0.56 * H), card.name, font=_font(int(0.36 * W)), fill=color, anchor="mm",
                  stroke_width=max(1, W // 120), stroke_fill=color)
        draw_suit(draw, card.suit, W / 2, 0.76 * H, 0.14 * W, color)
    return img.resize((width, height), Image.Resampling.LANCZOS)


def card_size(resolution: int, n_cards: int = 4) -> tuple[int, int]:
    """The reference's card size on a ``resolution`` table: 90% of a quarter width, 5:7 aspect."""
    width = int(resolution / n_cards * 0.9)
    return width, int(width * 7 / 5)


def render_table(cards: list[Card] | tuple[Card, ...], resolution: int = 1200) -> np.ndarray:
    """The observation: ``cards`` side by side on a green square table, as a uint8 (H, W, 3) array."""
    if resolution < 32:
        raise ValueError(f"table resolution must be >= 32 pixels, got {resolution}")
    canvas = Image.new("RGB", (resolution, resolution), TABLE_COLOR)
    width, height = card_size(resolution, len(cards))
    for i, card in enumerate(cards):
        face = render_card(card, width, height)
        x = 5 + int(i * width * 1.1)
        y = int((resolution - height) / 2)
        canvas.paste(face, (x, y), face)
    return np.asarray(canvas, dtype=np.uint8).copy()
