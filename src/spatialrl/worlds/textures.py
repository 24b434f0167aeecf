"""Procedural textures made with numpy: wood, tiles, fabric, stripes, noise, marble, brick, paintings.

All are HxWx3 uint8 and, except paintings, tile seamlessly (noise is band-limited in the Fourier
domain, patterns have a whole number of periods), because walls and floors repeat them every metre.
Patterns meant to be tinted by a mesh's vertex colour (fabric, noise, stripes of greys) are light
greys, so one texture gives many differently coloured objects.
"""

from __future__ import annotations

import numpy as np

SIZE = 128  # texels per side: enough detail at 640x360, cheap to generate and sample

Color = tuple[float, float, float]


def _to_u8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(img * 255.0), 0, 255).astype(np.uint8)


def _mix(a: Color, b: Color, t: np.ndarray) -> np.ndarray:
    a_, b_ = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return a_ + (b_ - a_) * t[..., None]


def noise(rng: np.random.Generator, size: int = SIZE, scale: float = 8.0, power: float = 2.0) -> np.ndarray:
    """Tileable smooth noise in [0, 1]: white noise with its spectrum damped beyond ``scale`` cycles."""
    white = rng.standard_normal((size, size))
    f = np.fft.fftfreq(size) * size
    radius = np.sqrt(f[:, None] ** 2 + f[None, :] ** 2)
    filt = 1.0 / (1.0 + (radius / scale) ** power)
    filt[0, 0] = 0.0
    field = np.real(np.fft.ifft2(np.fft.fft2(white) * filt))
    field -= field.min()
    return field / max(field.max(), 1e-12)


def plain(rng: np.random.Generator, base: Color, amount: float = 0.06, size: int = SIZE) -> np.ndarray:
    """Almost flat colour with a little mottling (plaster, painted wood, plastic)."""
    n = noise(rng, size, scale=10.0) - 0.5
    return _to_u8(np.asarray(base) * (1.0 + amount * 2 * n)[..., None])


def wood(rng: np.random.Generator, light: Color, dark: Color, size: int = SIZE, planks: int = 0) -> np.ndarray:
    """Grain running along u; ``planks`` > 0 adds plank seams (floors)."""
    y = np.arange(size)[:, None] / size
    warp = noise(rng, size, scale=3.0) * 2.0 + noise(rng, size, scale=12.0) * 0.4
    rings = int(rng.integers(6, 14))
    t = 0.5 + 0.5 * np.sin(2 * np.pi * (rings * y + warp))
    t = t ** 3 * 0.8 + noise(rng, size, scale=40.0) * 0.2
    img = _mix(light, dark, t)
    if planks:
        seam = ((y * planks) % 1.0) < 0.03  # (size, 1): a dark line at each plank edge
        shade = rng.uniform(0.85, 1.1, planks)[np.arange(size) * planks // size][:, None]
        img = img * (np.where(seam, 0.55, 1.0) * shade)[..., None]
    return _to_u8(img)


def tiles(rng: np.random.Generator, color: Color, grout: Color, n: int = 4, size: int = SIZE,
          jitter: float = 0.06) -> np.ndarray:
    """n x n square tiles with grout lines and slight per-tile colour variation."""
    idx = np.arange(size) * n // size
    local = (np.arange(size) * n % size) / size
    line = (local < 0.06) | (local > 0.96)
    per_tile = 1.0 + rng.uniform(-jitter, jitter, (n, n))
    img = np.asarray(color)[None, None] * per_tile[idx][:, idx][..., None]
    img = img * (1.0 + 0.05 * (noise(rng, size, scale=20.0) - 0.5))[..., None]
    mask = line[:, None] | line[None, :]
    img[mask] = grout
    return _to_u8(img)


def checker(a: Color, b: Color, n: int = 4, size: int = SIZE) -> np.ndarray:
    idx = np.arange(size) * n // size
    t = ((idx[:, None] + idx[None, :]) % 2).astype(np.float64)
    return _to_u8(_mix(a, b, t))


def stripes(rng: np.random.Generator, a: Color, b: Color, n: int = 6, size: int = SIZE,
            vertical: bool = True) -> np.ndarray:
    """Two-colour stripes (wallpaper, towels, rugs); ``n`` periods per tile."""
    coord = np.arange(size) * n / size
    t = ((coord % 1.0) < rng.uniform(0.3, 0.7)).astype(np.float64)
    t = np.broadcast_to(t[None, :] if vertical else t[:, None], (size, size))
    img = _mix(a, b, t) * (1.0 + 0.04 * (noise(rng, size, scale=16.0) - 0.5))[..., None]
    return _to_u8(img)


def fabric(rng: np.random.Generator, base: Color = (0.92, 0.92, 0.92), size: int = SIZE) -> np.ndarray:
    """Woven look: crossing thread ridges plus soft noise (tinted by the mesh colour)."""
    k = 2 * np.pi * int(rng.integers(24, 40)) / size
    i = np.arange(size)
    weave = 0.5 + 0.25 * np.sin(k * i)[:, None] * np.sign(np.sin(k * i / 2))[None, :] \
        + 0.25 * np.sin(k * i)[None, :] * np.sign(np.cos(k * i / 2))[:, None]
    t = 0.82 + 0.12 * weave + 0.1 * (noise(rng, size, scale=6.0) - 0.5)
    return _to_u8(np.asarray(base) * t[..., None])


def marble(rng: np.random.Generator, base: Color, vein: Color, size: int = SIZE) -> np.ndarray:
    x = np.arange(size)[None, :] / size
    turb = noise(rng, size, scale=4.0) * 3.0 + noise(rng, size, scale=16.0)
    t = np.abs(np.sin(2 * np.pi * (2 * x + turb))) ** 0.25
    return _to_u8(_mix(vein, base, t))


def brick(rng: np.random.Generator, color: Color, mortar: Color, rows: int = 8, size: int = SIZE) -> np.ndarray:
    """Running-bond bricks: ``rows`` courses of rows/2 bricks, odd courses shifted by half a brick."""
    cols = rows // 2
    y = np.arange(size)[:, None] * rows / size
    x = np.arange(size)[None, :] * cols / size + 0.5 * (np.floor(y) % 2)
    mask = np.broadcast_to(((y % 1.0) < 0.1) | ((x % 1.0) < 0.05), (size, size))
    shade = rng.uniform(0.9, 1.1, (rows, cols))
    # the brick cut by the right edge continues at the left edge: same shade (x wraps modulo cols)
    per = shade[np.floor(y).astype(int) % rows, np.floor(x).astype(int) % cols]
    img = np.asarray(color)[None, None] * per[..., None]
    img[mask] = mortar
    return _to_u8(img)


def dots(rng: np.random.Generator, bg: Color, fg: Color, n: int = 6, size: int = SIZE) -> np.ndarray:
    c = (np.arange(size) * n / size) % 1.0 - 0.5
    r = np.sqrt(c[:, None] ** 2 + c[None, :] ** 2)
    return _to_u8(_mix(bg, fg, (r < rng.uniform(0.18, 0.3)).astype(np.float64)))


def painting(rng: np.random.Generator, size: int = SIZE) -> np.ndarray:
    """A small abstract picture: coloured background, a few rectangles and discs (not tileable)."""
    palette = rng.uniform(0.1, 0.95, (5, 3))
    img = np.broadcast_to(_mix(palette[0], palette[1], np.linspace(0, 1, size)[:, None] * np.ones(size)),
                          (size, size, 3)).copy()
    yy, xx = np.mgrid[0:size, 0:size] / size
    for k in range(int(rng.integers(3, 7))):
        col = palette[2 + k % 3]
        if rng.random() < 0.5:
            x0, y0 = rng.uniform(0, 0.7, 2)
            w, h = rng.uniform(0.15, 0.5, 2)
            img[(xx >= x0) & (xx < x0 + w) & (yy >= y0) & (yy < y0 + h)] = col
        else:
            cx, cy, r = *rng.uniform(0.2, 0.8, 2), rng.uniform(0.08, 0.25)
            img[(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = col
    return _to_u8(img)
