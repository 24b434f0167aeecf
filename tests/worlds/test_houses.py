"""Procedural houses: determinism, walk-grid sanity, doorways, path lengths, objects, rendering."""

from __future__ import annotations

import json
import math
from collections import deque
from functools import cache

import numpy as np
import pytest

from spatialrl.render import Camera, Renderer
from spatialrl.worlds.houses import GRID, ROOM_TYPES, House, count_visible_objects, generate_house
from spatialrl.worlds.layout import AGENT_RADIUS, HALF_WALL

NON_BLOCKING = {"rug"}  # lies flat on the floor; everything else standing low must keep cells clear


@cache
def house(seed: int, kind: str, room_type: str | None = None) -> House:
    return generate_house(seed, kind, room_type)


def _bfs(cells: frozenset, start: tuple[int, int]) -> dict[tuple[int, int], int]:
    dist = {start: 0}
    q = deque([start])
    while q:
        c = q.popleft()
        for d in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            n = (c[0] + d[0], c[1] + d[1])
            if n in cells and n not in dist:
                dist[n] = dist[c] + 1
                q.append(n)
    return dist


def test_same_seed_same_house_and_pixels():
    a, b = generate_house(5, "multi"), generate_house(5, "multi")
    assert json.dumps(a.to_json(), sort_keys=True) == json.dumps(b.to_json(), sort_keys=True)
    assert len(a.meshes) == len(b.meshes)
    for ma, mb in zip(a.meshes, b.meshes, strict=True):
        assert ma.positions.tobytes() == mb.positions.tobytes() and ma.colors.tobytes() == mb.colors.tobytes()
    assert all(np.array_equal(ta, tb) for ta, tb in zip(a.textures, b.textures, strict=True))
    x, z = a.cell_to_world(sorted(a.reachable)[0])
    cams = [Camera((x, a.eye_height, z), 45.0, 0.0), Camera((x, a.eye_height, z), 180.0, 30.0)]
    with Renderer(48, 32) as r:
        img_a = r.render(r.upload(a.meshes, a.textures), cams)
        img_b = r.render(r.upload(b.meshes, b.textures), cams)
    assert img_a.tobytes() == img_b.tobytes()
    assert generate_house(6, "multi").to_json() != a.to_json()


def test_all_room_types_generate_and_are_richly_furnished():
    for k, room_type in enumerate(ROOM_TYPES):
        h = house(k, "single", room_type)
        assert [r.room_type for r in h.rooms] == [room_type]
        assert h.house_id == f"single-{room_type}-{k}"
        room = h.rooms[0]
        assert 3.0 <= room.x1 - room.x0 <= 6.0 and 3.0 <= room.z1 - room.z0 <= 6.0
        objects = [o for o in h.objects if o.room == room.name]
        assert len(objects) >= 12
        categories = {o.category for o in objects}
        assert len(categories) >= 8, categories  # varied, not 12 copies of one thing
        sizes = np.array([o.size for o in objects])
        assert sizes.max() / sizes[sizes > 0].min() > 20  # from cups to beds


def test_multi_room_types_are_distinct_and_first_type_honoured():
    for seed in range(4):
        h = house(seed, "multi")
        types = [r.room_type for r in h.rooms]
        assert 2 <= len(types) <= 3 and len(set(types)) == len(types)
        assert len(h.doors) == len(types) - 1
        for room in h.rooms:
            assert sum(o.room == room.name for o in h.objects) >= 12
    assert house(1, "multi", "bathroom").rooms[0].room_type == "bathroom"


@pytest.mark.parametrize("seed,kind", [(0, "single"), (1, "single"), (2, "multi"), (3, "multi"), (9, "multi")])
def test_reachable_cells_keep_clear_of_walls_and_furniture(seed, kind):
    h = house(seed, kind)
    pts = np.array(sorted(h.reachable), dtype=np.float64) * GRID
    for w in h.walls:  # wall footprints: agent radius must fit between cell centre and wall
        dx = np.maximum(np.maximum(w.x0 - pts[:, 0], pts[:, 0] - w.x1), 0)
        dz = np.maximum(np.maximum(w.z0 - pts[:, 1], pts[:, 1] - w.z1), 0)
        assert (np.hypot(dx, dz) >= AGENT_RADIUS - 1e-6).all()
    for o in h.objects:
        bottom = o.center[1] - o.size[1] / 2
        if o.category in NON_BLOCKING or bottom > 1.2:
            continue
        # a cell centre is never inside an object's footprint (floor-standing ones: with 10 cm to
        # spare; wall-mounted ones such as windows and towel racks stick out less than the radius)
        m = 0.1 if bottom < 0.05 else 0.0
        inside = ((np.abs(pts[:, 0] - o.center[0]) < o.size[0] / 2 + m)
                  & (np.abs(pts[:, 1] - o.center[2]) < o.size[2] / 2 + m))
        assert not inside.any(), f"{o.category} {o.instance_id} covers a reachable cell"
    for room in h.rooms:  # every room cell lies inside its room's rectangle
        for c in room.cells:
            x, z = h.cell_to_world(c)
            assert room.x0 <= x <= room.x1 and room.z0 <= z <= room.z1


def test_rooms_partition_reachable_and_room_of():
    h = house(2, "multi")
    union = frozenset().union(*(r.cells for r in h.rooms))
    assert union == h.reachable
    assert sum(len(r.cells) for r in h.rooms) == len(h.reachable)
    for r in h.rooms:
        assert len(r.cells) >= 12
        c = sorted(r.cells)[len(r.cells) // 2]
        assert h.room_of(c) is r
        assert h.world_to_cell(*h.cell_to_world(c)) == c
    assert h.room_of((-50, -50)) is None


@pytest.mark.parametrize("seed", [0, 3, 7])
def test_multi_room_connected_through_doorways(seed):
    h = house(seed, "multi")
    reach = h.reachable
    start = sorted(reach)[0]
    assert len(_bfs(reach, start)) == len(reach)  # one 4-connected region
    for d in h.doors:
        assert d.width >= 0.75
        along = [round(t / GRID) for t in np.arange(d.lo + GRID, d.hi - GRID / 2, GRID)]
        line = round(d.line / GRID)
        door_cells = {(line, t) if d.along_z else (t, line) for t in along}
        assert door_cells & reach, "no walkable cell in the doorway"
        # rooms meet only through their doorways: without them, the two rooms fall apart
        a, b = h.rooms[d.a], h.rooms[d.b]
        cut = reach - door_cells
        got = _bfs(cut, sorted(a.cells - door_cells)[0])
        assert not (set(got) & (b.cells - door_cells))


def test_task_path_lengths_exist():
    """TVR needs 2-8 cell paths inside single rooms and 10-20 cell paths across multi-room houses."""
    for seed in range(3):
        h = house(seed, "single")
        dist = _bfs(h.reachable, sorted(h.reachable)[len(h.reachable) // 2])
        assert {2, 5, 8} <= set(dist.values())
        m = house(seed, "multi")
        far = max(_bfs(m.reachable, c)[d] for c in sorted(m.reachable)[:1] for d in m.reachable)
        assert far >= 20
        assert any(10 <= v <= 20 for v in _bfs(m.reachable, sorted(m.reachable)[0]).values())


def test_object_ids_are_contiguous_and_match_meshes():
    h = house(4, "multi")
    ids = [o.instance_id for o in h.objects]
    assert ids == list(range(1, len(ids) + 1))
    mesh_ids = {m.instance_id for m in h.meshes}
    assert mesh_ids == {0, *ids}
    assert {m.zone for m in h.meshes} == set(range(len(h.rooms)))
    structure = [m for m in h.meshes if m.instance_id == 0]
    assert structure and all(m.zone >= 0 for m in structure)
    for o in h.objects:  # objects stay inside the house
        x0, z0, x1, z1 = h.bounds
        assert x0 - 0.01 <= o.center[0] <= x1 + 0.01 and z0 - 0.01 <= o.center[2] <= z1 + 0.01
        assert 0.0 <= o.center[1] - o.size[1] / 2 + 1e-3 and o.center[1] + o.size[1] / 2 <= h.wall_height + 0.1


def test_to_json_is_json_and_self_consistent():
    h = house(1, "multi")
    d = json.loads(json.dumps(h.to_json()))
    assert d["house_id"] == "multi-1" and d["seed"] == 1 and d["kind"] == "multi"
    assert len(d["reachable"]) == len(h.reachable)
    assert [r["name"] for r in d["rooms"]] == [r.name for r in h.rooms]
    assert len(d["objects"]) == len(h.objects)
    assert d["n_triangles"] == sum(m.n_triangles for m in h.meshes)


def test_views_span_easy_and_hard_object_counts():
    """From reachable cells, views toward the room centre (TVR targets) must give both >= 9 visible
    objects (easy) and 3-6 (hard), e.g. looking down vs looking up."""
    counts: dict[float, list[int]] = {-30.0: [], 0.0: [], 30.0: []}
    with Renderer(160, 90) as r:
        for seed, kind in ((0, "single"), (2, "multi")):
            h = house(seed, kind)
            scene = r.upload(h.meshes, h.textures)
            cells = sorted(h.reachable)[::7]
            cams = []
            for c in cells:
                x, z = h.cell_to_world(c)
                cx, cz = h.room_of(c).centroid
                yaw = round(math.degrees(math.atan2(cx - x, cz - z)) / 45) * 45 % 360
                cams += [Camera((x, h.eye_height, z), yaw, p) for p in counts]
            ids = r.render_ids(scene, cams)
            for cam, frame in zip(cams, ids, strict=True):
                counts[cam.pitch_deg].append(count_visible_objects(frame, min_pixels=2))
            r.release(scene)
    allc = np.array(sum(counts.values(), []))
    assert (allc >= 9).mean() > 0.25 and ((allc >= 3) & (allc <= 6)).mean() > 0.1
    assert np.mean(counts[-30.0]) < np.mean(counts[30.0])  # looking up sees fewer objects


def test_structure_and_objects_look_different():
    """Walls/floor/ceiling (id 0) and objects are both in view and differ in colour statistics."""
    h = house(3, "single")
    c = sorted(h.reachable)[len(h.reachable) // 2]
    x, z = h.cell_to_world(c)
    cams = [Camera((x, h.eye_height, z), yaw, 30.0) for yaw in range(0, 360, 45)]
    with Renderer(96, 54) as r:
        scene = r.upload(h.meshes, h.textures)
        rgb, ids = r.render(scene, cams), r.render_ids(scene, cams)
    assert (ids == 0).any() and (ids > 0).any()
    assert all(count_visible_objects(f, min_pixels=1) > 0 for f in ids[::2])
    assert rgb.std() > 20  # textured, lit, not a flat image


def test_count_visible_objects():
    ids = np.zeros((10, 10), np.int32)
    ids[0, :5] = 3
    ids[1, :2] = 7
    ids[5:, 5:] = 9
    assert count_visible_objects(ids, min_pixels=1) == 3
    assert count_visible_objects(ids, min_pixels=5) == 2
    assert count_visible_objects(ids) == 1
    with pytest.raises(ValueError, match="one"):
        count_visible_objects(np.zeros((2, 4, 4), np.int32))
    with pytest.raises(ValueError, match="min_pixels"):
        count_visible_objects(ids, min_pixels=0)


@pytest.mark.parametrize("args,match", [((-1, "single"), "seed"), ((1.5, "single"), "seed"), ((1, "flat"), "kind"),
                                        ((1, "single", "garage"), "room_type"), ((True, "multi"), "seed")])
def test_bad_arguments(args, match):
    with pytest.raises(ValueError, match=match):
        generate_house(*args)


def test_wall_geometry_matches_grid_rule():
    """A cell 0.25 m from a room edge is exactly agent-radius from the 5 cm wall face: walkable."""
    assert GRID - HALF_WALL == pytest.approx(AGENT_RADIUS)
    h = house(4, "single")
    room = h.rooms[0]
    row = {c for c in h.reachable if c[1] == round((room.z0 + GRID) / GRID)}
    assert row, "the first cell row along a wall is walkable somewhere"
