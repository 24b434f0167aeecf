"""A generated city before rendering: streets, panorama points, terrain, lots and named places.

``build_city(style, seed, tiny)`` is a pure function of its arguments. Street nodes, panos and
place positions are snapped to the written lat/lng grid (``LocalFrame.snap``), so the headings and
distances in the route files are exactly those recomputed from the files. Each stage draws from its
own RNG stream (``numpy`` SeedSequence of ``[seed, stage]``), so changing one stage (say, the
façade colours) never reshuffles another (the routes).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from spatialrl.worlds.city.graph import LocalFrame, PanoPoints, StreetGraph, build_street_graph, place_panos
from spatialrl.worlds.city.lots import Lot, layout_lots
from spatialrl.worlds.city.places import Place, assign_places
from spatialrl.worlds.city.styles import CityStyle, get_style
from spatialrl.worlds.city.terrain import Terrain

CAMERA_HEIGHT = 2.5  # metres above the street, like a street-view car's camera

# Stream ids of the per-stage RNGs (append new stages; never renumber).
STAGE_TERRAIN, STAGE_LOTS, STAGE_PLACES, STAGE_GEOMETRY, STAGE_ROUTES, STAGE_ROTATION, STAGE_TEXTURES = range(7)


def stage_rng(seed: int, stage: int) -> np.random.Generator:
    return np.random.default_rng([int(seed), int(stage)])


@dataclass
class City:
    style: CityStyle
    seed: int
    tiny: bool
    frame: LocalFrame
    terrain: Terrain
    graph: StreetGraph
    panos: PanoPoints
    lots: list[Lot]
    places: list[Place]
    place_pano: np.ndarray  # (n_places,) nearest pano index of each place

    def ground(self, xz: np.ndarray) -> np.ndarray:
        return self.terrain.height(xz)

    def camera_position(self, pano: int) -> tuple[float, float, float]:
        """Renderer (x, y, z) of a pano's camera: y up, ``CAMERA_HEIGHT`` above the street."""
        x, z = self.panos.xz[pano]
        return (float(x), float(self.ground(self.panos.xz[pano])) + CAMERA_HEIGHT, float(z))

    def street_of_place(self, place: Place) -> str:
        return self.graph.street_names[int(self.graph.street_of_edge[self.lots[place.lot].edge])]


def build_city(style: CityStyle | str, seed: int, tiny: bool = False) -> City:
    style = get_style(style) if isinstance(style, str) else style
    frame = LocalFrame(*style.origin)
    graph = build_street_graph(style, style.tiny_blocks if tiny else style.blocks)
    graph.nodes = frame.snap(graph.nodes)
    panos = place_panos(graph)
    panos.xz = frame.snap(panos.xz)
    terrain = Terrain.make(style.hill_amplitude, style.hill_wavelength, stage_rng(seed, STAGE_TERRAIN))
    lots = layout_lots(graph, style, stage_rng(seed, STAGE_LOTS))
    places = assign_places(lots, style, stage_rng(seed, STAGE_PLACES))
    if not places:
        raise ValueError(f"city {style.name} seed {seed} has no named places")
    for p in places:
        p.position = frame.snap(p.position)[0]
    pos = np.stack([p.position for p in places])
    place_pano = np.argmin(np.linalg.norm(pos[:, None] - panos.xz[None], axis=-1), axis=1)
    return City(style, int(seed), tiny, frame, terrain, graph, panos, lots, places, place_pano)
