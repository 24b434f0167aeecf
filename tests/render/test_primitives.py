"""Mesh builders: winding matches normals (what culling relies on), placement, grouping."""

from __future__ import annotations

import numpy as np
import pytest

from spatialrl.render.primitives import MeshBuilder, yaw_matrix


def _winding_agrees(mesh) -> np.ndarray:
    tri = mesh.positions.reshape(-1, 3, 3).astype(np.float64)
    geo = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    area = np.linalg.norm(geo, axis=1)
    dots = (geo * mesh.normals.reshape(-1, 3, 3).sum(1)).sum(1)
    return dots[area > 1e-9] > 0


@pytest.mark.parametrize("yaw", [0.0, 37.0, 90.0, 270.0])
def test_every_primitive_winds_around_its_normals(yaw):
    b = MeshBuilder()
    with b.placed((1.0, 0.5, -2.0), yaw):
        b.box((0, 0.5, 0), (1, 1, 2), (1, 0, 0), instance_id=1)
        b.cylinder((0, 0, 0), 0.3, 1.0, (0, 1, 0), instance_id=2)
        b.cylinder((0, 0, 0), 0.3, 1.0, (0, 1, 0), top_radius=0.0, instance_id=3)  # cone
        b.cylinder((0, 0, 0), 0.3, 1.0, (0, 1, 0), top_radius=0.1, texture=0, instance_id=4)  # frustum
        b.ellipsoid((0, 1, 0), (0.2, 0.4, 0.3), (0, 0, 1), instance_id=5)
    meshes = b.meshes()
    assert sorted(m.instance_id for m in meshes) == [1, 2, 3, 4, 5]
    for m in meshes:
        assert _winding_agrees(m).all(), f"instance {m.instance_id} has triangles wound against their normals"


def test_closed_primitives_enclose_volume_outward():
    """Outward normals on a closed mesh: the divergence theorem gives a positive volume."""
    b = MeshBuilder()
    b.box((0, 0, 0), (1, 2, 3), (1, 1, 1), instance_id=1)
    b.cylinder((0, 0, 0), 0.5, 1.0, (1, 1, 1), segments=32, instance_id=2)
    b.ellipsoid((0, 0, 0), 1.0, (1, 1, 1), segments=32, rings=16, instance_id=3)
    vols = {}
    for m in b.meshes():
        tri = m.positions.reshape(-1, 3, 3).astype(np.float64)
        vols[m.instance_id] = np.einsum("ij,ij->i", tri[:, 0], np.cross(tri[:, 1], tri[:, 2])).sum() / 6
    assert vols[1] == pytest.approx(6.0, rel=1e-6)
    assert vols[2] == pytest.approx(np.pi * 0.25, rel=0.02)
    assert vols[3] == pytest.approx(4 / 3 * np.pi, rel=0.03)


def test_placement_rotates_like_the_camera():
    # local +z turns to +x at yaw 90, the same convention as Camera yaw
    assert np.allclose(yaw_matrix(90) @ [0, 0, 1], [1, 0, 0])
    b = MeshBuilder()
    with b.placed((5, 0, 0), 90):
        b.box((0, 0, 2), (0.2, 0.2, 0.2), (1, 1, 1))
    center = b.meshes()[0].positions.mean(0)
    assert np.allclose(center, [7, 0, 0], atol=1e-6)


def test_groups_by_texture_instance_and_zone():
    b = MeshBuilder()
    b.box((0, 0, 0), (1, 1, 1), (1, 1, 1), instance_id=1)
    b.box((2, 0, 0), (1, 1, 1), (1, 1, 1), instance_id=1)
    b.box((0, 0, 0), (1, 1, 1), (1, 1, 1), texture=0, instance_id=1)
    with b.zone(3):
        b.box((0, 0, 0), (1, 1, 1), (1, 1, 1), instance_id=1)
    meshes = b.meshes()
    assert [(m.texture, m.instance_id, m.zone, m.n_triangles) for m in meshes] == [
        (-1, 1, -1, 24), (0, 1, -1, 12), (-1, 1, 3, 12)]
    assert meshes[0].uvs is None and meshes[1].uvs is not None


def test_box_tile_sets_world_scaled_uvs():
    b = MeshBuilder()
    b.box((0, 1, 0), (2, 2, 0.1), (1, 1, 1), texture=0, tile=0.5, faces="Z")
    uv = b.meshes()[0].uvs
    assert np.ptp(uv[:, 0]) == pytest.approx(4.0) and np.ptp(uv[:, 1]) == pytest.approx(4.0)
    b = MeshBuilder()
    b.box((0, 1, 0), (2, 2, 0.1), (1, 1, 1), texture=0, tile=None, faces="Z")
    uv = b.meshes()[0].uvs
    assert uv.min() == 0.0 and uv.max() == 1.0
