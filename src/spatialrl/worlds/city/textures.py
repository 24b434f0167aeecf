"""Procedural textures of a city: façade window tiles, storefronts, pavements, roof tiles, and the
atlas of shop-sign images. All are ``TEX`` x ``TEX`` RGB images (the renderer's texture array wants
one size), drawn with numpy and PIL from the style's colours and a seeded RNG.

Façade tiles hold ``cols`` window bays by two floors and tile seamlessly; the wall colour is baked
in (vertex colours stay white) so windows keep their own colour instead of being tinted by the wall.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

from spatialrl.worlds.city.places import (
    BLADE_CELL,
    PANEL_CELL,
    SIGN_STRIP,
    Place,
    blade_image,
    fascia_image,
    panel_image,
)
from spatialrl.worlds.city.styles import RGB, CityStyle

TEX = 512


def _u8(c: RGB) -> tuple[int, int, int]:
    return tuple(int(round(min(max(v, 0.0), 1.0) * 255)) for v in c)  # type: ignore[return-value]


def _shade(c: RGB, f: float) -> RGB:
    return tuple(min(1.0, max(0.0, v * f)) for v in c)  # type: ignore[return-value]


def _noise(rng: np.random.Generator, amount: float, scale: int = 4) -> np.ndarray:
    """Smooth-ish multiplicative noise (TEX, TEX, 1) around 1.0, tileable."""
    small = rng.normal(0.0, 1.0, (TEX // scale, TEX // scale)).astype(np.float32)
    big = np.kron(small, np.ones((scale, scale), np.float32))
    blur = (big + np.roll(big, 1, 0) + np.roll(big, -1, 0) + np.roll(big, 1, 1) + np.roll(big, -1, 1)) / 5
    return (1.0 + amount * blur / max(1e-6, float(np.abs(blur).max())))[..., None]


def _finish(img: Image.Image, rng: np.random.Generator, grain: float) -> np.ndarray:
    a = np.asarray(img, dtype=np.float32) * _noise(rng, grain)
    return np.clip(a, 0, 255).astype(np.uint8)


def facade_texture(style: CityStyle, wall: RGB, pattern: str, rng: np.random.Generator) -> np.ndarray:
    """One tile: ``style.window_cols_per_tile`` bays x 2 floors of windows on a ``wall`` coloured wall."""
    cols = style.window_cols_per_tile
    img = Image.new("RGB", (TEX, TEX), _u8(wall))
    d = ImageDraw.Draw(img)
    bw, fh = TEX / cols, TEX / 2
    glass = style.window_color
    frame = _u8(style.window_frame_color)
    if pattern == "glass":  # curtain wall: glass everywhere, thin mullions and spandrels
        for f in range(2):
            for c in range(cols * 2):
                x0, y0 = c * bw / 2, f * fh
                tint = _shade(glass, rng.uniform(0.8, 1.35))
                d.rectangle((x0, y0, x0 + bw / 2, y0 + fh * 0.82), fill=_u8(tint))
                d.rectangle((x0, y0 + fh * 0.82, x0 + bw / 2, y0 + fh), fill=_u8(_shade(glass, 0.6)))
                d.line((x0, y0, x0, y0 + fh), fill=frame, width=3)
        return _finish(img, rng, 0.04)
    if pattern == "ribbon":  # horizontal window bands
        for f in range(2):
            y0 = f * fh + fh * 0.3
            d.rectangle((0, y0, TEX, y0 + fh * 0.45), fill=_u8(_shade(glass, rng.uniform(0.85, 1.2))))
            for c in range(cols * 2):
                d.line((c * bw / 2, y0, c * bw / 2, y0 + fh * 0.45), fill=frame, width=4)
        return _finish(img, rng, 0.06)
    ww, wh = style.window_width * bw, style.window_height * fh
    for f in range(2):
        for c in range(cols):
            cx, top = (c + 0.5) * bw, f * fh + (fh - wh) * 0.45
            x0, x1, y0, y1 = cx - ww / 2, cx + ww / 2, top, top + wh
            lit = rng.random() < 0.15
            tint = _shade(glass, rng.uniform(0.8, 1.3) * (1.6 if lit else 1.0))
            if pattern == "shutters":  # Mediterranean: green shutters folded beside the window
                sh = _u8(_shade(style.window_frame_color, rng.uniform(0.85, 1.1)))
                d.rectangle((x0 - ww * 0.5, y0, x0, y1), fill=sh)
                d.rectangle((x1, y0, x1 + ww * 0.5, y1), fill=sh)
                for k in range(6):
                    yy = y0 + (k + 0.5) * wh / 6
                    d.line((x0 - ww * 0.5, yy, x0, yy), fill=_u8(_shade(style.window_frame_color, 0.6)), width=2)
                    d.line((x1, yy, x1 + ww * 0.5, yy), fill=_u8(_shade(style.window_frame_color, 0.6)), width=2)
            d.rectangle((x0 - 5, y0 - 5, x1 + 5, y1 + 5), fill=frame)  # frame
            d.rectangle((x0, y0, x1, y1), fill=_u8(tint))
            d.rectangle((x0, y0, x1, y0 + wh * 0.18), fill=_u8(_shade(tint, 1.25)))  # sky reflection
            d.line((cx, y0, cx, y1), fill=frame, width=4)  # mullion
            if pattern == "bay":  # pastel row house: white trim band and a transom bar
                d.line((x0, y0 + wh * 0.3, x1, y0 + wh * 0.3), fill=frame, width=4)
            d.rectangle((x0 - 8, y1 + 5, x1 + 8, y1 + 13), fill=_u8(_shade(wall, 0.8)))  # sill
        if pattern in ("punched", "bay"):  # cornice line between floors
            d.rectangle((0, f * fh, TEX, f * fh + 6), fill=_u8(style.trim_color))
    return _finish(img, rng, 0.05 if pattern != "punched" else 0.08)


def storefront_texture(style: CityStyle, frame: RGB, rng: np.random.Generator) -> np.ndarray:
    """A shop ground floor: two display windows and a glass door (one tile per shop unit)."""
    img = Image.new("RGB", (TEX, TEX), _u8(frame))
    d = ImageDraw.Draw(img)
    glass = _shade(style.window_color, 1.15)
    top = TEX * 0.2  # the sign hangs over the top band
    d.rectangle((TEX * 0.05, top, TEX * 0.38, TEX * 0.93), fill=_u8(glass))
    d.rectangle((TEX * 0.62, top, TEX * 0.95, TEX * 0.93), fill=_u8(glass))
    d.rectangle((TEX * 0.43, top + TEX * 0.05, TEX * 0.57, TEX), fill=_u8(_shade(glass, 0.7)))  # door
    d.line((TEX * 0.5, top + TEX * 0.05, TEX * 0.5, TEX), fill=_u8(frame), width=5)
    for x0 in (0.05, 0.62):  # goods behind the glass
        for k in range(4):
            c = tuple(float(v) for v in rng.uniform(0.3, 0.95, 3))
            xx = TEX * (x0 + 0.03 + 0.08 * k)
            d.rectangle((xx, TEX * 0.72, xx + TEX * 0.05, TEX * 0.9), fill=_u8(c))
    return _finish(img, rng, 0.04)


def door_texture(style: CityStyle, wall: RGB, rng: np.random.Generator) -> np.ndarray:
    """A residential ground floor bay: a door with steps between two windows."""
    img = Image.new("RGB", (TEX, TEX), _u8(wall))
    d = ImageDraw.Draw(img)
    glass = style.window_color
    frame = _u8(style.window_frame_color)
    for x0 in (0.08, 0.66):
        d.rectangle((TEX * x0 - 5, TEX * 0.25 - 5, TEX * (x0 + 0.26) + 5, TEX * 0.7 + 5), fill=frame)
        d.rectangle((TEX * x0, TEX * 0.25, TEX * (x0 + 0.26), TEX * 0.7), fill=_u8(_shade(glass, rng.uniform(0.9, 1.2))))
    door = tuple(float(v) for v in rng.uniform(0.15, 0.6, 3))
    d.rectangle((TEX * 0.4 - 6, TEX * 0.18 - 6, TEX * 0.6 + 6, TEX), fill=frame)
    d.rectangle((TEX * 0.4, TEX * 0.18, TEX * 0.6, TEX), fill=_u8(door))
    return _finish(img, rng, 0.05)


def paving_texture(base: RGB, kind: str, rng: np.random.Generator) -> np.ndarray:
    """Ground materials, tiling every ``TEX`` px: asphalt, paving slabs, cobbles or roof tiles."""
    img = Image.new("RGB", (TEX, TEX), _u8(base))
    d = ImageDraw.Draw(img)
    if kind == "slabs":
        for k in range(0, TEX, TEX // 4):
            d.line((k, 0, k, TEX), fill=_u8(_shade(base, 0.8)), width=3)
            d.line((0, k, TEX, k), fill=_u8(_shade(base, 0.8)), width=3)
        return _finish(img, rng, 0.08)
    if kind == "cobbles":
        n = 16
        for r in range(n):
            off = (r % 2) * TEX / n / 2
            for c in range(n + 1):
                x0, y0 = c * TEX / n - off, r * TEX / n
                col = _shade(base, rng.uniform(0.75, 1.2))
                d.rounded_rectangle((x0 + 2, y0 + 2, x0 + TEX / n - 2, y0 + TEX / n - 2), radius=6, fill=_u8(col))
        return _finish(img, rng, 0.05)
    if kind == "tiles":  # roof tiles in rows
        n = 12
        for r in range(n):
            y0 = r * TEX / n
            d.rectangle((0, y0, TEX, y0 + 4), fill=_u8(_shade(base, 0.65)))
            for c in range(n):
                x = c * TEX / n + (r % 2) * TEX / n / 2
                d.line((x, y0, x, y0 + TEX / n), fill=_u8(_shade(base, 0.75)), width=2)
        return _finish(img, rng, 0.1)
    return _finish(img, rng, 0.12)  # asphalt


@dataclass
class SignAtlas:
    """Shop-sign images packed into texture layers: ``fascia_uv[place]`` = (layer, u0, v0, u1, v1) of
    its fascia, ``blade_uv`` of a mid-block shop's hanging sign, ``panel_uv`` of a corner shop's
    panel (uv (0, 0) = the image's bottom-left)."""

    layers: list[np.ndarray] = field(default_factory=list)
    fascia_uv: dict[int, tuple[int, float, float, float, float]] = field(default_factory=dict)
    blade_uv: dict[int, tuple[int, float, float, float, float]] = field(default_factory=dict)
    panel_uv: dict[int, tuple[int, float, float, float, float]] = field(default_factory=dict)

    @classmethod
    def build(cls, places: list[Place], aspects: dict[int, float], first_layer: int) -> SignAtlas:
        atlas = cls()
        sw, sh = SIGN_STRIP
        per_layer = TEX // sh
        canvas = None
        for k, place in enumerate(places):
            slot = k % per_layer
            if slot == 0:
                canvas = np.zeros((TEX, TEX, 3), np.uint8)
                atlas.layers.append(canvas)
            img = fascia_image(place, aspects[place.index])
            canvas[slot * sh:(slot + 1) * sh, : img.shape[1]] = img
            layer = first_layer + len(atlas.layers) - 1
            atlas.fascia_uv[place.index] = (layer, 0.0, 1.0 - (slot + 1) * sh / TEX,
                                            img.shape[1] / TEX, 1.0 - slot * sh / TEX)
        for cell, draw, uvs, chosen in ((BLADE_CELL, blade_image, atlas.blade_uv, [p for p in places if p.corner_end < 0]),
                                        (PANEL_CELL, panel_image, atlas.panel_uv, [p for p in places if p.corner_end >= 0])):
            bw, bh = cell
            per_row = TEX // bw
            per_layer = per_row * (TEX // bh)
            for k, place in enumerate(chosen):
                slot = k % per_layer
                if slot == 0:
                    canvas = np.zeros((TEX, TEX, 3), np.uint8)
                    atlas.layers.append(canvas)
                r, c = divmod(slot, per_row)
                canvas[r * bh:(r + 1) * bh, c * bw:(c + 1) * bw] = draw(place)
                layer = first_layer + len(atlas.layers) - 1
                uvs[place.index] = (layer, c * bw / TEX, 1.0 - (r + 1) * bh / TEX, (c + 1) * bw / TEX, 1.0 - r * bh / TEX)
        return atlas
