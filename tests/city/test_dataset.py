"""Generated cities as V-IRL datasets: the env reads them, the expert solves them, the files are
deterministic, routes follow the declared rules, and the written files are what the manifest says."""

from __future__ import annotations

import heapq
import json
import pickle
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from spatialrl.envs.virl.data import parse_milestone, parse_milestone_info
from spatialrl.envs.virl.geo import geodesic_m
from spatialrl.envs.virl.validate import check_dataset
from spatialrl.worlds.city import writer
from spatialrl.worlds.city.graph import heading_of
from spatialrl.worlds.city.routes import (
    LANDMARK_RADIUS,
    MILESTONES,
    START_DISTANCE,
    compass_word,
    spatial_word,
)
from spatialrl.worlds.city.world import build_city


def _routes(root: Path) -> list[dict]:
    return json.loads((root / "route_infos.json").read_text())[0]


def _mapping(root: Path) -> dict:
    return pickle.loads((root / "gps_pano_mapping.pkl").read_bytes())


def test_check_data_passes_on_every_style(metro_data, oldtown_data, hillside_data):
    from spatialrl.envs.virl.cli import app

    for root in (metro_data, oldtown_data, hillside_data):
        assert check_dataset(root, images=True, decode=True) == []
    result = CliRunner().invoke(app, ["check-data", str(metro_data)])
    assert result.exit_code == 0, result.output
    assert "ok" in result.output and "20 routes" in result.output


def test_expert_scores_100_percent_on_all_three_splits(metro_data, oldtown_data):
    from spatialrl.envs.virl import suite

    opts = {"data": str(metro_data), "visual_data": str(oldtown_data), "split": "all", "grid_size": 64}
    specs = suite.episodes(opts)
    assert {s.category for s in specs} == {"in-dist", "rule-ood", "visual-ood"}
    env = suite.make_env(opts)
    outcomes: dict[str, list[bool]] = {}
    for spec in specs:
        obs, info = env.reset(seed=spec.seed, options=spec.reset_options)
        assert obs.shape == (64, 64, 3)
        for _ in range(200):
            obs, reward, terminated, truncated, info = env.step(info["expert_response"])
            assert reward == 1
            if terminated or truncated:
                break
        outcomes.setdefault(spec.category, []).append(bool(info["episode"]["success"]))
    assert {k: len(v) for k, v in outcomes.items()} == {"in-dist": 48, "rule-ood": 48, "visual-ood": 10}
    assert all(all(v) for v in outcomes.values())


def test_route_fields_and_statistics_within_declared_ranges(metro_data):
    routes = _routes(metro_data)
    manifest = json.loads((metro_data / "city.json").read_text())
    places = {p["name"]: p for p in manifest["places"]}
    hist: dict[str, int] = {}
    for r in routes:
        blocks = [parse_milestone(d) for d in parse_milestone_info(r["milestone_info"])]
        geos = [tuple(g) for g in r["route_results"]["geocode_list"]]
        assert MILESTONES[0] <= len(blocks) == len(geos) <= MILESTONES[1]
        hist[str(len(blocks))] = hist.get(str(len(blocks)), 0) + 1
        assert r["init_heading"] == 0
        assert len(r["route_results"]["landmark_list"]) == len(blocks) - 1
        d = geodesic_m(tuple(r["start_place"]["geocode"]), tuple(r["dest_place"]["geocode"]))
        assert START_DISTANCE[0] - 0.5 <= d <= START_DISTANCE[1] + 0.5
        prev = tuple(r["start_place"]["relocated_geocode"])
        human = 0
        for k, (b, g) in enumerate(zip(blocks, geos, strict=True)):
            leg = geodesic_m(prev, g)
            assert leg > 5.0
            assert b.fields["distance"] == f"{round(leg)} meters" or abs(int(b.fields["distance"].split()[0]) - leg) < 1.0
            frame = _frame(manifest)
            v = frame.to_local(np.array([g]))[0] - frame.to_local(np.array([prev]))[0]
            heading = float(heading_of(v))
            assert b.heading_deg == int(heading) and b.direction == compass_word(heading)
            assert int(b.fields["human_heading"]) == human
            human = b.heading_deg
            last = k == len(blocks) - 1
            if b.landmark != "No landmark nearby":
                prefix = "The destination " if last else ""
                assert b.landmark.startswith(prefix)
                name, spatial = b.landmark[len(prefix):].rsplit(" is on your ", 1)
                if last:
                    assert name == r["dest_place"]["name"]
                place = places[name]
                assert geodesic_m(g, tuple(place["geocode"])) <= LANDMARK_RADIUS + 0.1 or last
                rel = float(heading_of(frame.to_local(np.array([place["geocode"]]))[0] - frame.to_local(np.array([g]))[0]))
                assert spatial == spatial_word(rel - heading)
            else:
                assert not last
            prev = g
    assert hist == {k: v for k, v in manifest["routes"]["milestones_histogram"].items() if v}
    assert manifest["routes"]["count"] == len(routes) == 20
    assert manifest["routes"]["route_length_m"]["max"] <= 1000


def _frame(manifest):
    from spatialrl.worlds.city.graph import LocalFrame

    return LocalFrame(*manifest["origin_latlng"])


def test_paths_are_shortest_and_run_along_streets(metro_data, city_seed):
    city = build_city("metro", city_seed, tiny=True)
    panos = city.panos
    adj: dict[int, list[tuple[int, float]]] = {}
    for chain in panos.edge_chain:
        for a, b in zip(chain[:-1], chain[1:], strict=True):
            w = float(np.linalg.norm(panos.xz[a] - panos.xz[b]))
            adj.setdefault(int(a), []).append((int(b), w))
            adj.setdefault(int(b), []).append((int(a), w))
    index = {pid: int(pid.rsplit("-", 1)[1]) for pid in _mapping(metro_data).values()}
    key_to_pano = {k: index[v] for k, v in _mapping(metro_data).items()}
    for r in _routes(metro_data):
        start = key_to_pano[tuple(r["start_place"]["relocated_geocode"])]
        points = [start] + [key_to_pano[tuple(g)] for g in r["route_results"]["geocode_list"]]
        legs = np.linalg.norm(np.diff(panos.xz[points], axis=0), axis=1)
        best = {start: 0.0}
        heap = [(0.0, start)]
        while heap:  # plain Dijkstra on street length
            dist, u = heapq.heappop(heap)
            if dist > best[u]:
                continue
            for v, w in adj[u]:
                if dist + w < best.get(v, np.inf):
                    best[v] = dist + w
                    heapq.heappush(heap, (dist + w, v))
        assert abs(legs.sum() - best[points[-1]]) < 0.05
        for a, b in zip(points[:-1], points[1:], strict=True):  # every straight leg lies on streets
            samples = panos.xz[a] + np.linspace(0, 1, 9)[:, None] * (panos.xz[b] - panos.xz[a])
            assert city.graph.distance_to_edges(samples).min(axis=1).max() < 0.05


def test_same_seed_same_bytes_and_pixels(tmp_path, hillside_data, city_seed):
    # Regenerate the session's hillside city with the same arguments: same bytes, same pixels.
    b = writer.make_city("hillside", 10, city_seed, tmp_path / "again", tiny=True, pano_width=256,
                         progress=False)
    a = hillside_data
    assert (a / "route_infos.json").read_bytes() == (b / "route_infos.json").read_bytes()
    assert (a / "gps_pano_mapping.pkl").read_bytes() == (b / "gps_pano_mapping.pkl").read_bytes()
    files = sorted(p.name for p in (a / "street_views").iterdir())
    assert files == sorted(p.name for p in (b / "street_views").iterdir()) and len(files) > 20
    for name in files:
        if name.endswith(".jpg"):
            pa = cv2.imread(str(a / "street_views" / name))
            pb = cv2.imread(str(b / "street_views" / name))
            assert pa.shape == (128, 256, 3) and np.array_equal(pa, pb)
        else:
            assert (a / "street_views" / name).read_bytes() == (b / "street_views" / name).read_bytes()
    # Another seed is another city.
    other = build_city("hillside", city_seed + 1, tiny=True)
    assert [p.name for p in other.places] != [p.name for p in build_city("hillside", city_seed, tiny=True).places]


def test_manifest_and_contact_sheet(metro_data, city_seed):
    manifest = json.loads((metro_data / "city.json").read_text())
    assert manifest["style"] == "metro" and manifest["seed"] == city_seed
    assert manifest["generator_version"] == writer.GENERATOR_VERSION
    assert manifest["panoramas"]["count"] == len(list((metro_data / "street_views").glob("*.jpg")))
    for key in ("milestones_histogram", "route_length_m", "start_dest_distance_m"):
        assert manifest["routes"][key]
    sheet = Image.open(metro_data / "contact_sheet.png")
    assert sheet.format == "PNG" and sheet.size[0] > 1000 and sheet.size[1] > 500
    arr = np.asarray(sheet.convert("RGB"))
    assert arr.std() > 20  # pictures, not an empty canvas


def test_refuses_to_overwrite_and_leaves_nothing_half_written(tmp_path, monkeypatch):
    from spatialrl.envs.virl.cli import app

    out = tmp_path / "city"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        writer.make_city("metro", 3, 0, out, tiny=True, progress=False)
    result = CliRunner().invoke(app, ["make-city", "--tiny", "--out", str(out)])
    assert result.exit_code == 2 and "--overwrite" in result.output

    def crash(opts, root, progress, device):
        (root / "route_infos.json").write_text("[]")
        raise RuntimeError("disk full")

    monkeypatch.setattr(writer, "_write", crash)
    with pytest.raises(RuntimeError):
        writer.make_city("metro", 3, 0, out, tiny=True, force=True, progress=False)
    with pytest.raises(RuntimeError):
        writer.make_city("metro", 3, 0, tmp_path / "fresh", tiny=True, progress=False)
    assert (out / "keep.txt").read_text() == "mine" and not (out / "route_infos.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["city"]  # no temp folders, no partial output
