"""The contact sheet of a generated city: a PNG of sample observations for people to look at.

Each cell is the 2x2 street-view grid a V-IRL agent sees at one rail point, produced by the V-IRL
env's own loader, rail and pixel code from the files just written (so it shows exactly what a
policy will get), captioned with the instruction sentence the agent is executing there, the
oracle observation and the expected action.
"""

from __future__ import annotations

import io
import random
import textwrap
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from spatialrl.io import atomic_write_bytes

CELL = 448
CAPTION_LINES = 5
LINE_PX = 17


def _pick(points) -> int:
    """A point worth showing: an intersection with a landmark, else the destination."""
    for i, p in enumerate(points):
        if p.kind == "intersection" and " is on your " in p.observation:
            return i
    return len(points) - 1


def write_contact_sheet(data: str | Path, out: str | Path, n: int = 6, seed: int = 0, cols: int = 3) -> Path:
    """Render ``n`` sample observations of the dataset at ``data`` into ``out`` (PNG)."""
    from spatialrl.envs.virl.pixels import GridRenderer
    from spatialrl.envs.virl.rail import build_rail
    from spatialrl.envs.virl.validate import load_dataset

    dataset = load_dataset(data, images=True)
    renderer = GridRenderer(dataset, CELL)
    picks = np.linspace(0, len(dataset.routes) - 1, num=min(n, len(dataset.routes))).round().astype(int)
    font = ImageFont.load_default(size=13)
    rows = (len(picks) + cols - 1) // cols
    cap_h = CAPTION_LINES * LINE_PX + 8
    sheet = Image.new("RGB", (cols * (CELL + 8) + 8, rows * (CELL + cap_h + 8) + 8), (245, 245, 245))
    draw = ImageDraw.Draw(sheet)
    for k, route_idx in enumerate(picks):
        rail = build_rail(dataset, int(route_idx), random.Random(seed * 1000 + int(route_idx)))
        i = _pick(rail.points)
        p = rail.points[i]
        key = dataset.panos.relocate(p.geocode)
        grid = renderer.render(dataset.panos.pano_id(key), p.heading)
        x = 8 + (k % cols) * (CELL + 8)
        y = 8 + (k // cols) * (CELL + cap_h + 8)
        sheet.paste(Image.fromarray(np.asarray(grid)), (x, y))
        lines = [f"route {route_idx}, point {i} ({p.kind}), heading {p.heading:g}"]
        lines += textwrap.wrap(f"instruction: {p.instruction}", 62)
        lines += textwrap.wrap(f"observation: {p.oracle_observation}  action: {p.gt_action}", 62)
        for j, line in enumerate(lines[:CAPTION_LINES]):
            draw.text((x, y + CELL + 4 + j * LINE_PX), line, fill=(20, 20, 20), font=font)
    buf = io.BytesIO()
    sheet.save(buf, format="PNG")
    atomic_write_bytes(out, buf.getvalue())
    return Path(out)
