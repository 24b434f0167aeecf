"""Tiny generated cities, written once per test session (the --tiny preset, small panoramas)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spatialrl.envs.virl.city import make_city

SEED = 5


@pytest.fixture(scope="session")
def city_seed() -> int:
    """The seed every session dataset below was generated with."""
    return SEED


@pytest.fixture(scope="session")
def metro_data(tmp_path_factory) -> Path:
    """The training city: 20 routes, 512x256 panoramas, with its contact sheet."""
    return make_city("metro", 20, SEED, tmp_path_factory.mktemp("city") / "metro", tiny=True, progress=False)


@pytest.fixture(scope="session")
def oldtown_data(tmp_path_factory) -> Path:
    return make_city("oldtown", 10, SEED, tmp_path_factory.mktemp("city") / "oldtown", tiny=True, pano_width=256,
                     contact_sheet=False, progress=False)


@pytest.fixture(scope="session")
def hillside_data(tmp_path_factory) -> Path:
    return make_city("hillside", 10, SEED, tmp_path_factory.mktemp("city") / "hillside", tiny=True, pano_width=256,
                     contact_sheet=False, progress=False)
