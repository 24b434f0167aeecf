"""Small V-IRL-format datasets written once per test session (hand-made geometry, colour-wheel panos)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spatialrl.envs.virl.testdata import golden_routes, random_routes, write_dataset


@pytest.fixture(scope="session")
def golden_data(tmp_path_factory) -> Path:
    """The 4 hand-made routes of testdata.golden_routes()."""
    return write_dataset(tmp_path_factory.mktemp("virl") / "golden", golden_routes(), seed=0)


@pytest.fixture(scope="session")
def city_data(tmp_path_factory) -> Path:
    """20 random routes (training-like city)."""
    return write_dataset(tmp_path_factory.mktemp("virl") / "city", random_routes(20, seed=3), seed=1)


@pytest.fixture(scope="session")
def other_city_data(tmp_path_factory) -> Path:
    """A visually different city (tinted panoramas, other origin) for the visual-OOD split."""
    return write_dataset(tmp_path_factory.mktemp("virl") / "other", random_routes(7, seed=4),
                         origin=(51.5133, -0.1357), seed=2, tint=(40, -30, 10))


@pytest.fixture(scope="session")
def generated_city(tmp_path_factory) -> Path:
    """A fixed generated city (metro style, 3 routes, seed 5, small panoramas): the golden text of the
    vision-required variant is pinned on it."""
    from spatialrl.envs.virl.city import make_city

    return make_city("metro", 3, 5, tmp_path_factory.mktemp("virl") / "metro", tiny=True, pano_width=256,
                     contact_sheet=False, progress=False)
