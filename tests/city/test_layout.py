"""Street graph, lat/lng frame, lots and places of generated cities (pure geometry, no rendering)."""

from __future__ import annotations

import numpy as np
import pytest

from spatialrl.envs.virl.data import parse_milestone, parse_milestone_info
from spatialrl.envs.virl.geo import bearing_deg, geodesic_m, haversine_m
from spatialrl.worlds.city.graph import LocalFrame, heading_of
from spatialrl.worlds.city.lots import _PolygonIndex, corridor_polygon
from spatialrl.worlds.city.places import check_name
from spatialrl.worlds.city.routes import COMPASS, compass_word, milestone_block, spatial_word
from spatialrl.worlds.city.styles import MIN_COMPASS_MARGIN, STYLES, compass_margin
from spatialrl.worlds.city.world import build_city


@pytest.fixture(scope="module", params=sorted(STYLES))
def city(request):
    return build_city(request.param, seed=3, tiny=True)


def test_local_frame_matches_geodesic_and_haversine():
    frame = LocalFrame(41.0, -72.0)
    rng = np.random.default_rng(0)
    pts = rng.uniform(-600, 600, (20, 2))
    geo = frame.to_latlng(pts)
    for a, b, ga, gb in zip(pts[:-1], pts[1:], geo[:-1], geo[1:], strict=True):
        local = float(np.linalg.norm(a - b))
        assert abs(geodesic_m(tuple(ga), tuple(gb)) - local) < 0.002 * local + 0.02
        assert abs(float(haversine_m(tuple(ga), np.array([gb[0]]), np.array([gb[1]]))[0]) - local) < 0.005 * local + 0.02
        assert abs((bearing_deg(tuple(ga), tuple(gb)) - float(heading_of(b - a)) + 180) % 360 - 180) < 0.3  # meridian convergence
    assert np.abs(frame.to_local(geo) - pts).max() < 0.02  # 7 decimals of a degree ~ 1 cm


def test_streets_run_in_all_eight_directions_far_from_word_boundaries(city):
    heads = heading_of(city.graph.edge_vectors)
    both = np.concatenate([heads, (heads + 180) % 360])
    assert {compass_word(h) for h in both} == set(COMPASS)
    assert min(compass_margin(h) for h in both) >= MIN_COMPASS_MARGIN


def test_panos_every_ten_metres_and_at_every_intersection(city):
    panos, graph = city.panos, city.graph
    assert np.allclose(panos.xz[: len(graph.nodes)], graph.nodes, atol=0.02)
    for chain in panos.edge_chain:
        gaps = np.linalg.norm(np.diff(panos.xz[chain], axis=0), axis=1)
        assert gaps.min() > 6.5 and gaps.max() < 13.5
    # No two panos share a lat/lng key.
    geo = city.frame.to_latlng(panos.xz)
    assert len({tuple(g) for g in geo}) == len(panos)


def test_lots_clear_of_streets_and_of_each_other(city):
    index = _PolygonIndex()
    for e in range(len(city.graph.edges)):
        index.add(corridor_polygon(city.graph, e))
    assert len(city.lots) > 50
    for lot in city.lots:
        assert not index.overlaps(lot.polygon), "a lot overlaps a street or an earlier lot"
        index.add(lot.polygon)
    # The overlap test itself must catch an overlap (otherwise the assertion above cannot fail).
    assert index.overlaps(city.lots[0].polygon + 0.5)


def test_places_have_unique_parser_safe_names_and_corner_shops_near_crossings(city):
    names = [p.name for p in city.places]
    assert len(names) == len(set(names))
    for n in names:
        check_name(n)
    with pytest.raises(ValueError):
        check_name('Joe\'s "Diner"')
    near = [min(np.linalg.norm(city.graph.nodes - p.position, axis=1)) for p in city.places if p.corner_end >= 0]
    assert np.mean(np.array(near) <= 18.0) > 0.6  # most corner shops qualify as intersection landmarks


def test_milestone_block_parses_with_the_env_parser():
    text = "\n".join([milestone_block(0, "Bluebird Cafe is on your right front", 52.6, 0, 187.9),
                      milestone_block(1, "The destination Maple Bank is on your left", 40.2, 187, 278.3)])
    blocks = [parse_milestone(d) for d in parse_milestone_info(text)]
    assert [(b.heading_deg, b.direction) for b in blocks] == [(187, "south"), (278, "west")]
    assert blocks[0].fields["distance"] == "53 meters" and blocks[1].fields["human_heading"] == "187"
    assert blocks[1].landmark == "The destination Maple Bank is on your left"
    assert [spatial_word(a) for a in (0, 44, 91, 140, 181, 230, 269, 316, 359)] == [
        "front", "right front", "right", "right behind", "behind", "left behind", "left", "left front", "front"]
