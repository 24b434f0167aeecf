"""What the pixels of a generated city show: landmark signs are visible where the routes say,
panoramas follow the V-IRL column convention, and the styles look different."""

from __future__ import annotations

import json
import pickle

import cv2
import numpy as np
import pytest

from spatialrl.envs.virl.data import parse_milestone, parse_milestone_info
from spatialrl.envs.virl.pixels import effective_heading, perspective
from spatialrl.render import Camera, Renderer
from spatialrl.worlds.city.geometry import sign_instance_id
from spatialrl.worlds.city.panorama import PanoramaRenderer, rotation_deg
from spatialrl.worlds.city.visibility import MIN_SIGN_AREA_PX
from spatialrl.worlds.city.world import build_city


@pytest.fixture(scope="module")
def metro_city(city_seed):
    city = build_city("metro", city_seed, tiny=True)
    with PanoramaRenderer(city) as pr:
        yield city, pr


def test_every_milestone_landmark_sign_is_visible_at_its_rail_point(metro_data, metro_city):
    city, pr = metro_city
    place_of = {p.name: p for p in city.places}
    mapping = pickle.loads((metro_data / "gps_pano_mapping.pkl").read_bytes())
    pano_of = {k: int(v.rsplit("-", 1)[1]) for k, v in mapping.items()}
    checked = 0
    for r in json.loads((metro_data / "route_infos.json").read_text())[0]:
        blocks = [parse_milestone(d) for d in parse_milestone_info(r["milestone_info"])]
        for b, g in zip(blocks, r["route_results"]["geocode_list"], strict=True):
            if b.landmark == "No landmark nearby":
                continue
            name = b.landmark.removeprefix("The destination ").rsplit(" is on your ", 1)[0]
            place = place_of[name]
            pano = pano_of[tuple(g)]
            # The env looks from the milestone's pano at the written (integer) heading.
            area = pr.sign_pixels(sign_instance_id(place.index), pano, float(b.heading_deg))
            assert area >= MIN_SIGN_AREA_PX, f"{name} covers only {area:.0f} px at pano {pano}"
            checked += 1
            if checked <= 3:  # control: the same sign seen from a pano > 120 m away is not "visible"
                far = int(np.argmax(np.linalg.norm(city.panos.xz - place.position, axis=1)))
                assert pr.sign_pixels(sign_instance_id(place.index), far, float(b.heading_deg)) < MIN_SIGN_AREA_PX
    assert checked >= 30  # destinations plus intersection landmarks


def test_panorama_follows_the_virl_column_convention(metro_city):
    city, pr = metro_city
    pano, width, shift = 7, 1024, 301
    img = pr.panorama(pano, width, shift)
    assert img.shape == (512, 1024, 3)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(img, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])
    bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    rot = rotation_deg(shift, width)
    def small(rgb):  # compare at low resolution: both images alias fine texture differently
        return cv2.resize(rgb, (48, 48), interpolation=cv2.INTER_AREA).astype(float)

    errors = []
    with Renderer(192, 192) as direct:
        scene = direct.upload(pr.meshes.meshes, pr.meshes.textures, sky=city.style.sky, lighting=pr.lighting)
        for heading in (0.0, 77.0, 190.0, 300.0):
            truth = small(direct.render(scene, [Camera(city.camera_position(pano), heading, 0.0, 90.0)])[0])

            def env_view(h):
                return small(cv2.cvtColor(perspective(bgr, 90.0, effective_heading(h, rot), 192, 192), cv2.COLOR_BGR2RGB))

            err = np.abs(env_view(heading) - truth).mean()
            errors.append((heading, round(err, 2), [round(np.abs(env_view(heading + d) - truth).mean(), 2)
                                                    for d in (-8.0, 8.0, 90.0)]))
    for _heading, err, off in errors:
        # The env's view of the panorama is the scene seen at that compass heading, and a view
        # turned by 8 or 90 degrees is clearly worse (so the convention is pinned, not just close).
        assert err < 6.0 and min(off) > 3 * err, errors


def _histogram(root, bins: int = 6) -> np.ndarray:
    hist = np.zeros((bins, bins, bins))
    for path in sorted((root / "street_views").glob("*.jpg")):
        img = cv2.imread(str(path))
        top = img[: img.shape[0] // 2]  # sky and façades; the lower half is mostly road
        h, _ = np.histogramdd(top.reshape(-1, 3), bins=bins, range=[(0, 256)] * 3)
        hist += h
    return hist / hist.sum()


def test_styles_look_measurably_different(metro_data, oldtown_data, hillside_data):
    hists = {name: _histogram(root) for name, root in
             (("metro", metro_data), ("oldtown", oldtown_data), ("hillside", hillside_data))}
    names = sorted(hists)
    between = min(np.abs(hists[a] - hists[b]).sum() for a in names for b in names if a < b)
    # Within one style, two halves of its panoramas agree far better than any two styles do.
    paths = sorted((metro_data / "street_views").glob("*.jpg"))
    halves = []
    for part in (paths[::2], paths[1::2]):
        h = np.zeros((6, 6, 6))
        for p in part:
            top = cv2.imread(str(p))
            top = top[: top.shape[0] // 2]
            h += np.histogramdd(top.reshape(-1, 3), bins=6, range=[(0, 256)] * 3)[0]
        halves.append(h / h.sum())
    within = np.abs(halves[0] - halves[1]).sum()
    assert between > 0.6 and between > 3 * within, (between, within)
