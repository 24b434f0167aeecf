"""Pixels: the perspective maths, which heading lands in which tile, the grid layout, the cache."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from spatialrl.envs.virl.pixels import (
    GridCache,
    GridRenderer,
    compose_grid,
    effective_heading,
    grid_layout,
    perspective,
    perspective_reference,
    render_grid,
    view_headings,
    view_size,
)
from spatialrl.envs.virl.testdata import decode_heading, panorama
from spatialrl.envs.virl.validate import load_dataset


def _angle_diff(a: float, b: float) -> float:
    return abs((a - b + 180.0) % 360.0 - 180.0)


def _bgr(rgb: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(rgb[..., ::-1])


@pytest.mark.parametrize("yaw", [0.0, 37.25, 179.5, 270.0, 359.9])
def test_fast_perspective_equals_the_literal_reference_maths(yaw):
    rng = np.random.default_rng(0)
    noise = rng.integers(0, 256, (100, 200, 3), dtype=np.uint8)
    wheel = _bgr(panorama(256, 128, rotation=23.0))
    for pano in (noise, wheel):
        ref = perspective_reference(pano, 90.0, yaw, 0.0, 160, 160)
        assert np.array_equal(perspective(pano, 90.0, yaw, 160, 160), ref)
    # the reference maths with a pitch really tilts the view (the fast path is pitch-0 only)
    assert not np.array_equal(perspective_reference(noise, 90.0, yaw, 10.0, 160, 160),
                              perspective(noise, 90.0, yaw, 160, 160))


@pytest.mark.parametrize("heading,rotation", [(0.0, 0.0), (197.0, 0.0), (90.0, 123.4), (350.5, -77.0)])
def test_each_tile_faces_its_heading(heading, rotation):
    pano = _bgr(panorama(720, 360, rotation))
    size = 205
    tile, gap = grid_layout(size)
    for prompt_order in (False, True):
        grid = render_grid(pano, heading, rotation, size, prompt_order)
        expected = view_headings(heading, prompt_order)
        for i, want in enumerate(expected):
            x0, y0 = (i % 2) * (tile + gap), (i // 2) * (tile + gap)
            c = tile // 2
            centre = grid[y0 + c - 1 : y0 + c + 2, x0 + c - 1 : x0 + c + 2]
            assert _angle_diff(decode_heading(centre), want) < 2.0, (i, decode_heading(centre), want)
            # not mirrored: right of the centre is further clockwise
            right = grid[y0 + c - 1 : y0 + c + 2, x0 + c + 30 : x0 + c + 33]
            assert 5.0 < (decode_heading(right) - decode_heading(centre)) % 360.0 < 60.0
    assert view_headings(10.0) == [235.0, 325.0, 55.0, 145.0]  # left-behind, left-front, right-front, right-behind
    assert view_headings(10.0, prompt_order=True) == [10.0, 100.0, 190.0, 280.0]  # front, right, back, left
    assert effective_heading(10.0, 30.0) == 220.0


def test_small_grid_matches_a_shrunk_reference_grid():
    pano = _bgr(panorama(1024, 512, 40.0))
    assert view_size(448) == 442 and view_size(2405) == 640 and view_size(1285) == 640
    small = render_grid(pano, 123.0, 40.0, 448).astype(float)
    views = [cv2.cvtColor(perspective(pano, 90.0, effective_heading(h, 40.0), 640, 640), cv2.COLOR_BGR2RGB)
             for h in view_headings(123.0)]
    shrunk = compose_grid(views, 448).astype(float)
    assert np.abs(small - shrunk).mean() < 1.0


def test_reference_grid_layout():
    assert grid_layout(2405) == (1200, 5)
    assert grid_layout(448) == (221, 6)
    with pytest.raises(ValueError):
        grid_layout(16)
    grid = render_grid(_bgr(panorama(128, 64, 0.0)), 45.0, 0.0)  # reference size
    assert grid.shape == (2405, 2405, 3) and grid.dtype == np.uint8
    assert not grid[:, 1200:1205].any() and not grid[1200:1205, :].any()  # black 5 px gutters
    for y0 in (0, 1205):
        for x0 in (0, 1205):
            assert grid[y0 : y0 + 1200, x0 : x0 + 1200].mean() > 40  # every tile is filled


def test_cache_memory_disk_and_eviction(golden_data, tmp_path):
    ds = load_dataset(golden_data)
    pano = ds.panos.pano_id(ds.panos.keys[0])
    cache = GridCache(max_bytes=1 << 24, disk_dir=tmp_path / "grids")
    r = GridRenderer(ds, 64, cache=cache)
    a = r.render(pano, 30.0)
    assert (cache.misses, cache.hits) == (1, 0) and not a.flags.writeable
    b = r.render(pano, 30.0)
    assert b is a and cache.hits == 1
    assert not np.array_equal(r.render(pano, 31.0), a)
    # a different grid size is a different key on the same cache
    assert GridRenderer(ds, 96, cache=cache).render(pano, 30.0).shape == (96, 96, 3)
    # another process (a fresh cache on the same folder) reads it from disk
    other = GridCache(max_bytes=1 << 24, disk_dir=tmp_path / "grids")
    c = GridRenderer(ds, 64, cache=other).render(pano, 30.0)
    assert other.disk_hits == 1 and np.array_equal(c, a)
    assert np.array_equal(a, GridRenderer(ds, 64, cache=None).render(pano, 30.0))
    # byte budget: room for two 64² grids → the oldest is evicted
    small = GridCache(max_bytes=2 * 64 * 64 * 3)
    r2 = GridRenderer(ds, 64, cache=small)
    for h in (1.0, 2.0, 3.0):
        r2.render(pano, h)
    r2.render(pano, 1.0)
    assert small.misses == 4 and small.hits == 0
    r2.render(pano, 3.0)
    assert small.hits == 1
