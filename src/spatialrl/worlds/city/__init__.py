"""Procedural cities written in the V-IRL dataset format (``spec/citygen.md``, ``docs/citygen.md``).

``make_city(style, routes, seed, out)`` generates a city (streets, buildings, named storefronts with
readable signs, street furniture), renders its street-view panoramas and writes routes, so the V-IRL
env, SFT, RL and every evaluation split run on data that needs no download. ``build_city`` gives the
world before rendering. Both load lazily: importing this package (as the CLI does) stays cheap.
The V-IRL dataset check and the contact sheet need the V-IRL env, a layer above: they run in
``spatialrl.envs.virl.city.make_city`` (what `spatialrl virl make-city` calls).
"""

from __future__ import annotations

from typing import Any

from spatialrl.worlds.city.styles import STYLES, TRAIN_STYLE, CityStyle, get_style

__all__ = ["STYLES", "TRAIN_STYLE", "City", "CityStyle", "build_city", "get_style", "make_city"]

_LAZY = {"make_city": "spatialrl.worlds.city.writer", "build_city": "spatialrl.worlds.city.world",
         "City": "spatialrl.worlds.city.world"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
