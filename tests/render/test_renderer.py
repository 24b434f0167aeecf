"""The renderer on small real scenes: conventions, ids, batching, textures, panoramas, errors."""

from __future__ import annotations

import numpy as np
import pytest

from spatialrl.errors import RenderUnavailable
from spatialrl.render import Camera, Lighting, Mesh, Renderer
from spatialrl.render import renderer as renderer_module
from spatialrl.render.primitives import MeshBuilder

EYE = (0.0, 1.5, 0.0)
RED, GREEN, BLUE = (1.0, 0.0, 0.0), (0.0, 1.0, 0.0), (0.0, 0.0, 1.0)


@pytest.fixture(scope="module")
def renderer():
    with Renderer(64, 48) as r:
        yield r


def _boxes(*specs) -> list[Mesh]:
    """specs: (center, size, color, instance_id)."""
    b = MeshBuilder()
    for center, size, color, iid in specs:
        b.box(center, size, color, instance_id=iid)
    return b.meshes()


def _centroid(mask: np.ndarray) -> tuple[float, float]:
    ys, xs = np.nonzero(mask)
    assert len(xs), "object not visible"
    return float(xs.mean()), float(ys.mean())


def test_box_ahead_is_centred_for_yaw_0_and_90(renderer):
    scene = renderer.upload(_boxes(((0, 1.5, 3), (0.5, 0.5, 0.5), RED, 1), ((3, 1.5, 0), (0.5, 0.5, 0.5), GREEN, 2),
                                   ((-3, 1.5, 0), (0.5, 0.5, 0.5), BLUE, 3)))
    ids = renderer.render_ids(scene, [Camera(EYE, 0, 0), Camera(EYE, 90, 0), Camera(EYE, 270, 0)])
    for frame, iid in zip(ids, (1, 2, 3), strict=True):
        x, y = _centroid(frame == iid)
        assert abs(x - 31.5) < 0.6 and abs(y - 23.5) < 0.6
        assert set(np.unique(frame)) == {0, iid}  # the others are behind or beside the camera
    rgb = renderer.render(scene, [Camera(EYE, 0, 0)])[0]
    assert rgb[24, 32, 0] > 100 and rgb[24, 32, 1] == 0 and rgb[24, 32, 2] == 0
    renderer.release(scene)


def test_right_is_plus_x_at_yaw_0_and_up_is_up(renderer):
    scene = renderer.upload(_boxes(((1.0, 1.5, 3), (0.3, 0.3, 0.3), RED, 1), ((0, 2.3, 3), (0.3, 0.3, 0.3), GREEN, 2)))
    ids = renderer.render_ids(scene, [Camera(EYE, 0, 0)])[0]
    assert _centroid(ids == 1)[0] > 40  # +x is on the right of the image
    assert _centroid(ids == 2)[1] < 16  # higher in the world is higher in the image (row 0 = top)
    renderer.release(scene)


def test_positive_pitch_looks_down(renderer):
    scene = renderer.upload(_boxes(((0, 1.5, 3), (0.5, 0.5, 0.5), RED, 1)))
    ids = renderer.render_ids(scene, [Camera(EYE, 0, 0), Camera(EYE, 0, 30), Camera(EYE, 0, -30)])
    y0, y_down, y_up = (_centroid(f == 1)[1] for f in ids)
    assert y_down < y0 - 10  # looking down moves the object up in the frame
    assert y_up > y0 + 10
    renderer.release(scene)


def test_rasteriser_agrees_with_analytic_projection(renderer):
    scene = renderer.upload(_boxes(((0.6, 0.5, 4), (0.2, 0.2, 0.2), RED, 1)))
    for cam in (Camera(EYE, 0, 30), Camera(EYE, 10, 20, fov_deg=75)):
        x, y = _centroid(renderer.render_ids(scene, [cam])[0] == 1)
        uv, in_front = cam.project(np.array([[0.6, 0.5, 3.9]]), 64, 48)
        assert in_front[0] and abs(uv[0, 0] - x) < 1.0 and abs(uv[0, 1] - y) < 1.0
    renderer.release(scene)


def test_render_ids_count_visible_objects(renderer):
    from spatialrl.worlds.houses import count_visible_objects

    specs = [((x, 1.5, 4), (0.4, 0.4, 0.4), BLUE, i + 1) for i, x in enumerate((-1.2, -0.4, 0.4, 1.2))]
    specs.append(((0.4, 1.5, 6), (0.3, 0.3, 0.3), RED, 9))  # hidden behind box 3
    specs.append(((0, 0, 4), (6, 0.1, 6), GREEN, 0))  # structure
    scene = renderer.upload(_boxes(*specs))
    ids = renderer.render_ids(scene, [Camera(EYE, 0, 10)])[0]
    assert ids.dtype == np.int32
    assert set(np.unique(ids)) == {0, 1, 2, 3, 4}
    assert count_visible_objects(ids, min_pixels=1) == 4
    big = max(int((ids == k).sum()) for k in range(1, 5))
    assert count_visible_objects(ids, min_pixels=big + 1) == 0
    # ids and colour agree: blue exactly where an object is
    rgb = renderer.render(scene, [Camera(EYE, 0, 10)])[0]
    blue = (rgb[..., 2] > 0) & (rgb[..., 0] == 0) & (rgb[..., 1] == 0)
    assert np.array_equal(blue, ids > 0)


def test_batch_equals_single_and_chunking(renderer, monkeypatch):
    scene = renderer.upload(_boxes(((0, 1.5, 3), (0.5, 0.5, 0.5), RED, 1), ((2, 1, 2), (1, 2, 0.5), GREEN, 2),
                                   ((0, 0, 0), (8, 0.1, 8), (0.5, 0.5, 0.5), 0)))
    cams = [Camera(EYE, yaw, pitch) for yaw in (0, 45, 90) for pitch in (-30, 0, 30)]
    batch = renderer.render(scene, cams)
    singles = np.stack([renderer.render(scene, [c])[0] for c in cams])
    assert batch.shape == (9, 48, 64, 3) and batch.dtype == np.uint8
    assert np.array_equal(batch, singles)
    monkeypatch.setattr(renderer_module, "MAX_BATCH_PIXELS", 64 * 48 * 2)  # force chunks of 2 frames
    assert np.array_equal(renderer.render(scene, cams), batch)
    assert np.array_equal(renderer.render_ids(scene, cams), np.stack([renderer.render_ids(scene, [c])[0] for c in cams]))
    assert renderer.render(scene, []).shape == (0, 48, 64, 3)


def test_one_readback_per_chunk_and_both_read_paths_agree(monkeypatch):
    """Frames of a chunk are layers of one texture array, read back in one call (``glGetTextureSubImage``);
    without that call (GL < 4.5) each layer is read on its own: same pixels, colour and ids."""
    from spatialrl.render import layers

    meshes = _boxes(((0, 1.5, 3), (0.5, 0.5, 0.5), RED, 1), ((2, 1, 2), (1, 2, 0.5), GREEN, 2))
    cams = [Camera(EYE, yaw, pitch) for yaw in (0, 30, 60) for pitch in (-30, 0, 30)]
    reads: list[int] = []
    read = layers.LayerTarget.read

    def counting(self, n, out):
        reads.append(n)
        return read(self, n, out)

    monkeypatch.setattr(layers.LayerTarget, "read", counting)
    frames = {}
    for sub_image in (True, False):
        monkeypatch.setattr(layers, "can_read_sub_image", lambda ctx, s=sub_image: s)
        with Renderer(40, 30) as r:
            scene = r.upload(meshes)
            reads.clear()
            frames[sub_image] = (r.render(scene, cams), r.render_ids(scene, cams))
            assert reads == [9, 9]  # one readback of 9 layers per call
            assert all(t.sub_image is sub_image for t in r._targets.values())
            with monkeypatch.context() as m:  # chunks of 4 frames: one readback per chunk
                m.setattr(renderer_module, "MAX_BATCH_PIXELS", 40 * 30 * 4)
                reads.clear()
                assert np.array_equal(r.render(scene, cams), frames[sub_image][0])
                assert reads == [4, 4, 1]
    assert np.array_equal(frames[True][0], frames[False][0]) and np.array_equal(frames[True][1], frames[False][1])


@pytest.mark.parametrize("size", [(40, 30), (64, 48)])
def test_pbo_readback_equals_sync(size, monkeypatch):
    """``readback="pbo"`` (chunk k copied into a pixel pack buffer while chunk k+1 is drawn) returns the
    bytes of ``"sync"``: colour and ids, into new arrays and into a list of frame views, over several
    chunks of which the last is partial (5 frames a chunk, 36 cameras), with the per-call override, and
    with the layer-by-layer ``glReadPixels`` fallback writing into the pack buffer."""
    from spatialrl.render import layers

    w, h = size
    meshes = _boxes(((0, 1.5, 3), (0.5, 0.5, 0.5), RED, 1), ((2, 1, 2), (1, 2, 0.5), GREEN, 2),
                    ((0, 0, 0), (8, 0.1, 8), (0.5, 0.5, 0.5), 0))
    cams = [Camera(EYE, yaw, pitch) for yaw in range(0, 360, 30) for pitch in (-30, 0, 30)]
    monkeypatch.setattr(renderer_module, "MAX_BATCH_PIXELS", w * h * 5)
    reads: list[int] = []
    read_async = layers.LayerTarget.read_async

    def counting(self, n, channels=4):
        reads.append(n)
        return read_async(self, n, channels)

    monkeypatch.setattr(layers.LayerTarget, "read_async", counting)
    frames = {}
    for mode, sub_image in (("sync", True), ("pbo", True), ("pbo", False), ("pbo_rgb", True), ("pbo_rgb", False)):
        monkeypatch.setattr(layers, "can_read_sub_image", lambda ctx, s=sub_image: s)
        with Renderer(w, h, readback=mode) as r:
            scene = r.upload(meshes)
            views = [np.full((h, w, 3), 7, np.uint8) for _ in cams]
            reads.clear()
            got = frames[mode, sub_image] = (r.render(scene, cams), r.render_ids(scene, cams),
                                             np.stack(r.render_batch([(scene, c) for c in cams], views)))
            assert reads == ([5] * 7 + [1]) * 3 if mode != "sync" else not reads
            other = "sync" if mode != "sync" else "pbo"  # render_batch's readback overrides the renderer's
            assert np.array_equal(r.render_batch([(scene, c) for c in cams], readback=other), got[0])
    sync = frames["sync", True]
    for key in (("pbo", True), ("pbo", False), ("pbo_rgb", True), ("pbo_rgb", False)):
        for a, b in zip(sync, frames[key], strict=True):
            assert a.dtype == b.dtype and np.array_equal(a, b), key
    assert np.array_equal(sync[0], sync[2])
    assert len(np.unique(sync[0].reshape(-1, 3), axis=0)) > 3  # real pictures, not a cleared screen


def test_auto_readback_picks_by_device(renderer):
    """``"auto"``: pixel-buffer readback on a GPU (where it overlaps the GPU's work), plain on a software
    rasteriser (where there is nothing to overlap)."""
    from spatialrl.render.layers import resolve_readback

    assert resolve_readback("auto", "llvmpipe (LLVM 15.0.7, 256 bits)") == "sync"
    assert resolve_readback("auto", "NVIDIA H100 80GB HBM3/PCIe/SSE2") == "pbo_rgb"
    assert resolve_readback("sync", "NVIDIA H100 80GB HBM3/PCIe/SSE2") == "sync"
    assert resolve_readback("pbo", "llvmpipe (LLVM 15.0.7, 256 bits)") == "pbo"
    assert renderer.readback == resolve_readback("auto", renderer.ctx.info["GL_RENDERER"])


def test_bad_readback_raises(renderer):
    for bad in ("async", "PBO", None, 1):
        with pytest.raises(ValueError, match="readback must be one of 'auto', 'sync', 'pbo', 'pbo_rgb'"):
            Renderer(16, 16, readback=bad)
    scene = renderer.upload(_boxes(((0, 1.5, 3), (0.5, 0.5, 0.5), RED, 1)))
    with pytest.raises(ValueError, match="readback must be one of"):
        renderer.render_batch([(scene, Camera(EYE, 0, 0))], readback="gpu")
    renderer.release(scene)


def test_faces_differ_by_orientation(renderer):
    """Lighting: two walls meeting at a corner get different brightness."""
    b = MeshBuilder()
    b.box((2.0, 1.5, 2.0), (0.1, 3.0, 4.0), (0.8, 0.8, 0.8))  # wall facing -x ... seen from inside
    b.box((0.0, 1.5, 4.0), (4.0, 3.0, 0.1), (0.8, 0.8, 0.8))  # wall facing -z
    scene = renderer.upload(b.meshes())
    img = renderer.render(scene, [Camera(EYE, 45, 0, fov_deg=90)])[0].astype(int)
    left, right = img[24, 10], img[24, 54]  # -z facing wall on the left, -x facing wall on the right
    assert abs(left[0] - right[0]) >= 10


def test_texture_is_not_mirrored_and_tiles(renderer):
    tex = np.zeros((8, 8, 3), np.uint8)
    tex[:, :4] = (255, 0, 0)  # left half red
    tex[:, 4:] = (0, 0, 255)  # right half blue
    for yaw, center, size in ((0, (0, 1.5, 2), (1.0, 1.0, 0.1)), (90, (2, 1.5, 0), (0.1, 1.0, 1.0)),
                              (180, (0, 1.5, -2), (1.0, 1.0, 0.1)), (270, (-2, 1.5, 0), (0.1, 1.0, 1.0))):
        b = MeshBuilder()
        b.box(center, size, (1, 1, 1), texture=0, tile=None)
        scene = renderer.upload(b.meshes(), [tex], lighting=Lighting(cube=(1, 1, 1, 1, 1, 1)))
        img = renderer.render(scene, [Camera(EYE, yaw, 0)])[0].astype(int)
        row = img[24]
        assert row[26, 0] > 200 and row[26, 2] < 50, f"yaw {yaw}: left of the face should be red"
        assert row[37, 2] > 200 and row[37, 0] < 50, f"yaw {yaw}: right of the face should be blue"
        renderer.release(scene)


def test_culling_drops_faces_seen_from_inside():
    b = MeshBuilder()
    b.box(EYE, (1, 1, 1), (1, 1, 1))
    meshes = b.meshes()
    with Renderer(16, 16) as culled, Renderer(16, 16, cull=False) as both:
        inside = Camera(EYE, 0, 0)
        assert culled.render(culled.upload(meshes), [inside]).max() == 0  # only back faces around us
        assert both.render(both.upload(meshes), [inside]).min() > 0


def test_sky_gradient_and_flat_background(renderer):
    scene = renderer.upload(_boxes(((0, -10, 0), (0.1, 0.1, 0.1), RED, 1)), sky=[(0.0, 0.0, 1.0), (1.0, 1.0, 1.0)])
    up, level = renderer.render(scene, [Camera(EYE, 0, -80), Camera(EYE, 0, 0)])
    assert up[24, 32, 2] > 200 and up[24, 32, 0] < 80  # near zenith: blue
    assert level[24, 32].min() > 230  # horizon: white
    assert level[2, 32, 0] < level[24, 32, 0]  # gets bluer going up
    flat = renderer.upload(_boxes(((0, -10, 0), (0.1, 0.1, 0.1), RED, 1)), sky=(0.2, 0.4, 0.6))
    px = renderer.render(flat, [Camera(EYE, 0, 0)])[0, 10, 10]
    assert np.allclose(px, (51, 102, 153), atol=1)
    with pytest.raises(ValueError, match="sky"):
        renderer.upload(_boxes(((0, 0, 0), (1, 1, 1), RED, 1)), sky=[(2.0, 0, 0)])


def test_equirect_orientation(renderer):
    scene = renderer.upload(_boxes(((0, 1.5, 4), (1, 1, 1), RED, 1), ((4, 1.5, 0), (1, 1, 1), GREEN, 2),
                                   ((0, 6, 0), (2, 0.2, 2), BLUE, 3)))
    pano = renderer.render_equirect(scene, EYE, width=128, height=64)
    assert pano.shape == (64, 128, 3)

    def col_of(channel):
        mask = (pano[..., channel] > 80) & (pano.sum(-1) - pano[..., channel] < 40)
        return _centroid(mask)

    assert abs(col_of(0)[0] - 63.5) < 1.5  # red (yaw 0) at the centre column
    assert abs(col_of(1)[0] - 95.5) < 1.5  # green (yaw 90) a quarter turn to the right
    assert col_of(2)[1] < 12  # blue overhead in the top rows
    east = renderer.render_equirect(scene, EYE, width=128, height=64, north_deg=90.0)
    mask = (east[..., 1] > 80) & (east[..., 0] < 40)
    assert abs(_centroid(mask)[0] - 63.5) < 1.5  # centre column follows north_deg


def test_frames_are_deterministic():
    b = MeshBuilder()
    rng = np.random.default_rng(0)
    for i in range(20):
        b.ellipsoid(rng.uniform(-2, 2, 3) + [0, 1.5, 5], rng.uniform(0.1, 0.5), rng.uniform(0, 1, 3), instance_id=i + 1)
    meshes = b.meshes()
    frames = []
    for _ in range(2):
        with Renderer(40, 30) as r:
            frames.append(r.render(r.upload(meshes), [Camera(EYE, 0, 0), Camera(EYE, 10, 10)]).tobytes())
    assert frames[0] == frames[1]


def test_zones_change_speed_not_pixels():
    """Two rooms behind a wall: zone ordering must give the same picture as one big draw."""
    b = MeshBuilder()
    with b.zone(0):
        b.box((0, 1.5, 3), (6, 3, 0.1), (0.7, 0.7, 0.7))
        b.box((0, 1.0, 2), (0.5, 0.5, 0.5), RED, instance_id=1)
    with b.zone(1):
        b.box((0, 1.0, 5), (2, 2, 2), GREEN, instance_id=2)
    zoned = b.meshes()
    flat = [Mesh(m.positions, m.normals, m.colors, m.uvs, m.texture, m.instance_id) for m in zoned]
    cams = [Camera(EYE, yaw, 0) for yaw in (-30, 0, 30)] + [Camera((0, 1.5, 6), 180, 0)]
    with Renderer(48, 32) as r:
        a = r.render(r.upload(zoned), cams)
        c = r.render(r.upload(flat), cams)
        assert np.array_equal(a, c)
        assert np.array_equal(r.render_ids(r.upload(zoned), cams), r.render_ids(r.upload(flat), cams))


def test_multisampling_is_close_to_aliased():
    meshes = _boxes(((0, 1.5, 3), (1, 1, 1), RED, 1))
    with Renderer(32, 24) as plain, Renderer(32, 24, samples=4) as msaa:
        a = plain.render(plain.upload(meshes), [Camera(EYE, 20, 5)])[0].astype(int)
        b = msaa.render(msaa.upload(meshes), [Camera(EYE, 20, 5)])[0].astype(int)
    assert np.abs(a - b).mean() < 8
    assert (np.abs(a - b).max(-1) > 0).any()  # edges are smoothed


@pytest.mark.parametrize("size", [0, -1, 1.5, True, "64", None])
def test_bad_sizes_raise_value_error(size):
    with pytest.raises(ValueError, match="width must be a positive int"):
        Renderer(size, 10)
    with pytest.raises(ValueError, match="height must be a positive int"):
        Renderer(10, size)


def test_scene_lifetime_errors(renderer):
    scene = renderer.upload(_boxes(((0, 1.5, 3), (1, 1, 1), RED, 1)))
    renderer.release(scene)
    renderer.release(scene)  # twice is fine
    with pytest.raises(ValueError, match="released"):
        renderer.render(scene, [Camera(EYE, 0, 0)])
    with pytest.raises(ValueError, match="textures"):
        b = MeshBuilder()
        b.box((0, 0, 0), (1, 1, 1), RED, texture=2)
        renderer.upload(b.meshes(), [np.zeros((4, 4, 3), np.uint8)])
    with pytest.raises(ValueError, match=r"textures\[0\]"):
        b = MeshBuilder()
        b.box((0, 0, 0), (1, 1, 1), RED, texture=0)
        renderer.upload(b.meshes(), [np.zeros((4, 4), np.uint8)])
    with pytest.raises(TypeError, match="cameras"):
        renderer.render(renderer.upload(_boxes(((0, 0, 0), (1, 1, 1), RED, 1))), [(0, 0, 0)])
    with Renderer(8, 8) as other:
        with pytest.raises(ValueError, match="not uploaded by this Renderer"):
            other.render(renderer.upload(_boxes(((0, 0, 0), (1, 1, 1), RED, 1))), [Camera(EYE, 0, 0)])
    closed = Renderer(8, 8)
    closed.close()
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        closed.upload(_boxes(((0, 0, 0), (1, 1, 1), RED, 1)))


def test_mesh_validation():
    tri = np.zeros((3, 3))
    with pytest.raises(ValueError, match="whole triangles"):
        Mesh(np.zeros((4, 3)), np.zeros((4, 3)), np.zeros((4, 3)))
    with pytest.raises(ValueError, match="colors"):
        Mesh(tri, tri, np.full((3, 3), 2.0))
    with pytest.raises(ValueError, match="normals must have shape"):
        Mesh(tri, np.zeros((2, 3)), tri)
    with pytest.raises(ValueError, match="needs uvs"):
        Mesh(tri, tri, tri, texture=0)
    with pytest.raises(ValueError, match="instance_id"):
        Mesh(tri, tri, tri, instance_id=-1)
    with pytest.raises(ValueError, match="NaN"):
        Mesh(np.full((3, 3), np.nan), tri, tri)


def test_camera_validation():
    with pytest.raises(ValueError, match="fov"):
        Camera(EYE, 0, 0, fov_deg=0)
    with pytest.raises(ValueError, match="pitch"):
        Camera(EYE, 0, 100)
    with pytest.raises(ValueError, match="position"):
        Camera((0, 1), 0, 0)


def test_missing_egl_device_gives_install_hint(monkeypatch):
    """A real EGL failure (a device index that does not exist) becomes one clear error."""
    with pytest.raises(RenderUnavailable, match="libegl1 libegl-mesa0 libgl1-mesa-dri"):
        Renderer(8, 8, device=999)
    monkeypatch.setenv("SPATIALRL_EGL_DEVICE", "999")
    with pytest.raises(RenderUnavailable, match="EGL device 999"):
        Renderer(8, 8)
    monkeypatch.setenv("SPATIALRL_EGL_DEVICE", "gpu0")
    with pytest.raises(ValueError, match="SPATIALRL_EGL_DEVICE"):
        Renderer(8, 8)


def test_two_renderers_in_one_process_do_not_interfere():
    """moderngl draws into whichever context is current; each Renderer must switch to its own."""
    meshes = _boxes(((0, 1.5, 3), (1, 1, 1), RED, 1))
    a = Renderer(16, 12)
    scene_a = a.upload(meshes, sky=(0.0, 0.0, 1.0))
    before = a.render(scene_a, [Camera(EYE, 0, 0)])
    b = Renderer(20, 10)
    scene_b = b.upload(meshes, sky=(0.0, 1.0, 0.0))
    assert np.array_equal(a.render(scene_a, [Camera(EYE, 0, 0)]), before)
    assert b.render(scene_b, [Camera(EYE, 0, 0)])[0, 0, 0].tolist() == [0, 255, 0]
    b.close()
    assert np.array_equal(a.render(scene_a, [Camera(EYE, 0, 0)]), before)
    a.release(scene_a)
    a.close()


def test_gpu_bytes_counts_targets_and_scenes(monkeypatch):
    """``Renderer.gpu_bytes``: a scene is its vertex and index buffers plus its texture array with mipmaps;
    the render target of a chunk is its RGBA8 layers and depth buffers, plus the two pack buffers once a
    ``pbo`` readback has run; it does not grow with the number of frames rendered (the chunk is reused)."""
    w, h = 40, 30
    monkeypatch.setattr(renderer_module, "MAX_BATCH_PIXELS", w * h * 4)  # chunks of 4 frames
    meshes = _boxes(((0, 1.5, 3), (0.5, 0.5, 0.5), RED, 1), ((0, 0, 0), (8, 0.1, 8), (0.5, 0.5, 0.5), 0))
    with Renderer(w, h, readback="pbo") as r:
        assert r.gpu_bytes() == {"targets": 0, "scenes": 0, "scene_count": 0}
        scene = r.upload(meshes)
        one = r.gpu_bytes()
        # 1x1 white texture (no textures given): 3 bytes, mipmaps 4/3 (integer division)
        assert one["scene_count"] == 1 and one["scenes"] == scene._vbo.size + scene._ibo.size + 4
        r.render(scene, [Camera(EYE, yaw, 0) for yaw in range(0, 360, 30)])  # 12 frames: 3 chunks of 4
        after = r.gpu_bytes()["targets"]
        assert after == w * h * 4 * (4 + 4) + 2 * 4 * w * h * 4  # layers + depths, two pack buffers
        r.render(scene, [Camera(EYE, yaw, 0) for yaw in range(0, 360, 10)])  # 36 frames: the same target
        assert r.gpu_bytes()["targets"] == after
        r.release(scene)
        assert r.gpu_bytes()["scenes"] == 0
