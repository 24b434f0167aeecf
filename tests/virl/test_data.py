"""The file format: milestone parsing, the restricted unpickler, relocation, and clear errors for bad data
(from check-data and at env construction)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections import OrderedDict

import numpy as np
import pytest

from spatialrl.envs.virl.data import (
    MAPPING_RADIUS_M,
    PanoIndex,
    load_pano_mapping,
    parse_milestone,
    parse_milestone_info,
)
from spatialrl.envs.virl.env import VirlEnv
from spatialrl.envs.virl.geo import haversine_m, offset_m
from spatialrl.envs.virl.validate import check_dataset, load_dataset
from spatialrl.errors import DataError

BLOCKS = """{
"intersection_idx": "0",
"landmarks": "Shuka: a cafe is on your right",
"distance": "53 meters",
"human_heading": "0",
"to_next_intersection_heading": "177 (south)",
}
{
"intersection_idx": "1",
"distance": "20 meters",
"human_heading": "177",
"to_next_intersection_heading": "92 (east)",
}"""


def test_parse_milestone_info_like_the_reference():
    blocks = parse_milestone_info(BLOCKS)
    assert blocks[0] == {"intersection_idx": "0", "landmarks": "Shuka: a cafe is on your right", "distance": "53 meters",
                         "human_heading": "0", "to_next_intersection_heading": "177 (south)"}
    m0, m1 = (parse_milestone(b) for b in blocks)
    assert (m0.heading_deg, m0.direction, m0.landmark) == (177, "south", "Shuka: a cafe is on your right")
    assert m1.landmark == "No landmark nearby"  # missing key → the reference's default
    with pytest.raises(ValueError, match="unknown key"):
        parse_milestone({"landmark": "x", "to_next_intersection_heading": "1 (north)"})
    with pytest.raises(ValueError, match="direction"):
        parse_milestone({"to_next_intersection_heading": "1 (up)"})
    with pytest.raises(ValueError, match="not an integer"):
        parse_milestone({"to_next_intersection_heading": "1.5 (north)"})


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


@pytest.mark.parametrize("payload,match", [
    ({(1.0, 2.0): "a", (1.5, 2.5): _Evil()}, "posix.system|nt.system|os.system"),
    (OrderedDict({(1.0, 2.0): "a"}), "collections.OrderedDict"),
    ({(np.float64(1.0), 2.0): "a"}, "numpy"),
    ([(1.0, 2.0)], "expected a dict"),
    ({(1.0,): "a"}, "not a \\(lat, lng\\)"),
    ({(1.0, 2.0): "../etc/passwd"}, "not a pano id"),
])
def test_unpickler_admits_plain_data_only(tmp_path, payload, match):
    path = tmp_path / "gps_pano_mapping.pkl"
    path.write_bytes(pickle.dumps(payload))
    with pytest.raises(DataError, match=match):
        load_pano_mapping(path)


def test_unpickler_loads_plain_mapping_and_rejects_garbage(tmp_path):
    path = tmp_path / "m.pkl"
    path.write_bytes(pickle.dumps({(40.1, -73.2): "p1", (40.2, -73.3): "p2"}, protocol=2))
    assert load_pano_mapping(path) == {(40.1, -73.2): "p1", (40.2, -73.3): "p2"}
    path.write_bytes(b"not a pickle")
    with pytest.raises(DataError, match="not a readable pickle"):
        load_pano_mapping(path)


def test_relocation_matches_a_full_haversine_scan():
    origin = (40.74, -73.99)
    rng = np.random.default_rng(1)
    keys = [offset_m(origin, float(e), float(n)) for e, n in rng.uniform(-300, 300, (400, 2))]
    # two keys at the same distance from a query point: the first in key order wins, as in a full scan
    keys += [offset_m(origin, 1000.0, 10.0), offset_m(origin, 1000.0, -10.0)]
    index = PanoIndex({k: f"p{i}" for i, k in enumerate(keys)})
    lats, lngs = np.array([k[0] for k in keys]), np.array([k[1] for k in keys])
    queries = [offset_m(origin, float(e), float(n)) for e, n in rng.uniform(-330, 330, (300, 2))]
    queries.append(offset_m(origin, 1000.0, 0.0))
    for q in queries:
        d = haversine_m(q, lats, lngs)
        j = int(np.argmin(d))
        want = keys[j] if d[j] < MAPPING_RADIUS_M else None
        assert index.relocate(q) == want
    assert index.relocate(keys[3]) == keys[3]  # exact hit
    far = offset_m(origin, 5000.0, 5000.0)
    assert index.relocate(far) is None and index.nearest(far)[1] > 1000


def test_geodesic_is_geopys_to_the_bit():
    from geopy.distance import geodesic

    from spatialrl.envs.virl.geo import geodesic_m

    rng = np.random.default_rng(2)
    for lat, lng, dlat, dlng in zip(rng.uniform(-70, 70, 300), rng.uniform(-179, 179, 300),
                                    rng.normal(0, 2e-4, 300), rng.normal(0, 2e-4, 300), strict=True):
        a, b = (lat, lng), (lat + dlat, lng + dlng)
        assert geodesic_m(a, b) == geodesic(a, b).meters


def _copy(src, dst):
    shutil.copytree(src, dst)
    return dst


def _edit_routes(root, fn):
    path = root / "route_infos.json"
    data = json.loads(path.read_text())
    fn(data[0])
    path.write_text(json.dumps(data))


def test_clean_dataset_has_no_problems(golden_data):
    assert check_dataset(golden_data) == []
    assert check_dataset(golden_data, images=False) == []


def test_problems_name_route_point_and_file(golden_data, tmp_path):
    root = _copy(golden_data, tmp_path / "broken")
    ds = load_dataset(golden_data)

    def damage(routes):
        routes[1]["route_results"]["geocode_list"][1] = list(offset_m(tuple(routes[1]["route_results"]["geocode_list"][1]), 0, 800))
        routes[2]["milestone_info"] = routes[2]["milestone_info"].replace('"landmarks"', '"landmark"', 1)
        del routes[3]["start_place"]

    _edit_routes(root, damage)
    start_pano = ds.panos.pano_id(ds.panos.relocate(ds.routes[0].start))
    (root / "street_views" / f"{start_pano}.jpg").unlink()
    inter_pano = ds.panos.pano_id(ds.panos.relocate(ds.routes[0].geocodes[1]))
    (root / "street_views" / f"{inter_pano}.metadata.json").write_text('{"north": 3}')
    fwd_pano = ds.panos.pano_id(ds.panos.relocate(offset_m(ds.routes[0].start, 0.0, 20.0)))
    (root / "street_views" / f"{fwd_pano}.jpg").write_bytes(b"\xff\xd8 not really a jpeg")

    problems = [str(p) for p in check_dataset(root)]
    text = "\n".join(problems)
    assert "route 1, point 2 (route_results.geocode_list[1]" in text and "no panorama within 20 m" in text
    assert "route 2" in text and "unknown key(s) ['landmark']" in text
    assert "route 3" in text and "start_place.relocated_geocode is missing" in text
    assert f"route 0, point 0 (pano '{start_pano}'): street_views/{start_pano}.jpg is missing" in text
    assert f"{inter_pano}.metadata.json: needs a numeric 'rotation'" in text
    assert f"street_views/{fwd_pano}.jpg cannot be decoded" in text
    assert len(problems) == 6
    # language-only needs no images: only the route problems remain
    assert len(check_dataset(root, images=False)) == 3
    # the env refuses to start and lists them (decoding is left to check-data)
    with pytest.raises(DataError) as err:
        VirlEnv(root, mode="vl")
    msg = str(err.value)
    assert "5 problem(s)" in msg and "route 1, point 2" in msg and "spatialrl virl check-data" in msg


@pytest.mark.parametrize("fn,match", [
    (lambda r: (r / "route_infos.json").unlink(), "route_infos.json: missing"),
    (lambda r: (r / "route_infos.json").write_text("[[], 0"), "malformed JSON"),
    (lambda r: (r / "route_infos.json").write_text('{"routes": []}'), "2-element list"),
    (lambda r: (r / "gps_pano_mapping.pkl").unlink(), "gps_pano_mapping.pkl: missing"),
    (lambda r: (r / "gps_pano_mapping.pkl").write_bytes(pickle.dumps(OrderedDict({(1.0, 2.0): "a"}))),
     "refusing to unpickle collections.OrderedDict"),
])
def test_unreadable_index_files(golden_data, tmp_path, fn, match):
    root = _copy(golden_data, tmp_path / "bad")
    fn(root)
    assert any(match in str(p) for p in check_dataset(root))
    with pytest.raises(DataError, match=match):
        VirlEnv(root, mode="l")


def test_milestone_count_must_match_the_geocodes(golden_data, tmp_path):
    root = _copy(golden_data, tmp_path / "count")
    _edit_routes(root, lambda routes: routes[0]["route_results"]["geocode_list"].pop())
    (problem,) = check_dataset(root, images=False)
    assert "route 0" in str(problem) and "2 blocks but geocode_list has 1" in str(problem)
