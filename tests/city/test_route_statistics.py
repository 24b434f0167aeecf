"""Full-size cities of every style give the same route statistics (the visual-OOD promise)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from spatialrl.worlds.city.geometry import sign_quads
from spatialrl.worlds.city.routes import RouteSampler, milestone_quotas
from spatialrl.worlds.city.styles import STYLES
from spatialrl.worlds.city.visibility import SignVisibility
from spatialrl.worlds.city.world import STAGE_ROUTES, build_city, stage_rng


@pytest.mark.slow
def test_full_size_styles_fill_the_same_milestone_quotas():
    n = 80
    hists, medians = {}, {}
    for name in sorted(STYLES):
        city = build_city(name, seed=2)
        vis = SignVisibility(city, sign_quads(city))  # geometric check only: no renderer needed
        sampler = RouteSampler(city.graph, city.panos, city.places, city.place_pano, vis.visible)
        routes, stats = sampler.sample(n, stage_rng(2, STAGE_ROUTES))
        assert len(routes) == n and stats["unfilled_quota"] == {}, (name, stats)
        hists[name] = dict(Counter(len(r.milestones) for r in routes))
        medians[name] = float(np.median([r.length for r in routes]))
        assert max(len(r.milestones) for r in routes) == 8
    expected = {m: q for m, q in milestone_quotas(n).items() if q}
    assert all(h == expected for h in hists.values()), hists
    lo, hi = min(medians.values()), max(medians.values())
    assert hi < 1.5 * lo, medians  # route lengths of the same order in every style
