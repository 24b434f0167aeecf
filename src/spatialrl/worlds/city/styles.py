"""The visual styles a city can be generated in.

A style fixes how a city *looks* (block size, street widths, building massing, façade colours,
roofs, terrain, sky, street furniture) and where it sits on the globe. It never changes how routes
are sampled: every style uses the same route sampler and the same milestone quotas, so a policy
trained on ``metro`` and evaluated on ``hillside`` or ``oldtown`` faces the same instruction
statistics in a different-looking world (the V-IRL "visual OOD" split).

Street directions are chosen so that every street heading is at least ``MIN_COMPASS_MARGIN``
degrees away from a boundary between two of the 8 compass words: the word in
``to_next_intersection_heading`` is then never a coin flip decided by rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

RGB = tuple[float, float, float]

MIN_COMPASS_MARGIN = 8.0  # degrees between any street heading and a compass-word boundary (22.5 + 45k)


def _rgb(hex_code: str) -> RGB:
    h = hex_code.lstrip("#")
    return (int(h[0:2], 16) / 255.0, int(h[2:4], 16) / 255.0, int(h[4:6], 16) / 255.0)


@dataclass(frozen=True)
class CityStyle:
    """Everything that makes one city look like itself. Lengths in metres, colours RGB 0..1."""

    name: str
    summary: str
    origin: tuple[float, float]  # (lat, lng) of the city centre
    grid_rotation_deg: float  # compass heading of the lattice's +j axis
    block: tuple[float, float]  # centreline spacing along the lattice i and j axes
    blocks: tuple[int, int]  # lattice size (i, j) of a full city; both even (diagonals cross at a node)
    tiny_blocks: tuple[int, int]  # lattice size of the --tiny preset
    street_width: float  # curb to curb
    avenue_width: float  # curb to curb of the lattice's j-axis streets
    diagonal_width: float
    sidewalk: float
    street_names: tuple[str, ...]  # name stems of i-axis streets
    avenue_names: tuple[str, ...]  # name stems of j-axis avenues
    diagonal_names: tuple[str, ...]
    street_suffix: str
    avenue_suffix: str
    # buildings
    lot_width: tuple[float, float]
    lot_depth: tuple[float, float]
    floors: tuple[int, int]
    tall_share: float  # share of buildings drawn from the upper third of the floor range (towers)
    floor_height: float
    ground_floor_height: float
    facade_colors: tuple[RGB, ...]
    trim_color: RGB
    window_color: RGB
    window_frame_color: RGB
    window_cols_per_tile: int  # window bays per façade texture tile
    window_width: float  # share of a bay taken by the window (0..1)
    window_height: float  # share of a floor taken by the window (0..1)
    roof: str  # "flat" (parapet) or "gable"
    roof_color: RGB
    gable_pitch: float  # roof rise / half depth, for gable roofs
    # ground and street
    road_color: RGB
    marking_color: RGB
    sidewalk_color: RGB
    curb_color: RGB
    ground_color: RGB
    center_line: bool  # painted centre line (metro, hillside) or cobbles (oldtown)
    crosswalks: bool
    # terrain (hills): sum of two sine waves; amplitude 0 = flat
    hill_amplitude: float
    hill_wavelength: float
    # furniture
    tree_spacing: float  # metres between street trees (0 = none)
    tree_trunk_color: RGB
    tree_crown_colors: tuple[RGB, ...]
    tree_crown_radius: float
    lamp_spacing: float
    lamp_color: RGB
    awning_share: float  # share of storefronts with an awning
    # places
    store_share: float  # share of mid-block lots that hold a named place
    corner_store_share: float  # share of corner lots that hold a named place
    # sky (zenith, horizon, ground below the horizon)
    sky: tuple[RGB, RGB, RGB]
    key_light: tuple[float, float, float]

    def __post_init__(self) -> None:
        for n in (*self.blocks, *self.tiny_blocks):
            if n < 2 or n % 2:
                raise ValueError(f"style {self.name}: lattice sizes must be even and >= 2, got {self.blocks}/{self.tiny_blocks}")
        margin = min(compass_margin(h) for h in self.street_headings())
        if margin < MIN_COMPASS_MARGIN:
            raise ValueError(f"style {self.name}: a street heading is only {margin:.1f} deg from a compass-word boundary")

    def street_headings(self) -> list[float]:
        """Compass headings (0..360) of the lattice axes and both diagonal families, both ways."""
        bi, bj = self.block
        diag = math.degrees(math.atan2(bi, bj))  # heading of +i+j relative to the +j axis
        rel = [0.0, 90.0, diag, -diag]
        return [(self.grid_rotation_deg + r + flip) % 360.0 for r in rel for flip in (0.0, 180.0)]


def compass_margin(heading: float) -> float:
    """Degrees from ``heading`` to the nearest boundary between two of the 8 compass words."""
    x = (heading - 22.5) % 45.0
    return min(x, 45.0 - x)


_ORDINALS = tuple(
    f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}" for n in range(1, 60)
)

METRO = CityStyle(
    name="metro",
    summary="dense grid metropolis: tall glass and brick blocks, wide avenues, two diagonal boulevards (training city)",
    origin=(41.0231, -72.1458),
    grid_rotation_deg=8.0,
    block=(66.0, 60.0),
    blocks=(14, 14),
    tiny_blocks=(4, 4),
    street_width=10.0,
    avenue_width=13.0,
    diagonal_width=14.0,
    sidewalk=3.5,
    street_names=_ORDINALS,
    avenue_names=("First", "Second", "Third", "Park", "Lexington", "Madison", "Lenox", "Columbus", "Amsterdam",
                  "Hudson", "Franklin", "Liberty", "Jefferson", "Clinton", "Fulton", "Chambers"),
    diagonal_names=("Broadway", "Grand Diagonal", "Union Boulevard", "Crown Boulevard"),
    street_suffix="Street",
    avenue_suffix="Avenue",
    lot_width=(9.0, 22.0),
    lot_depth=(16.0, 24.0),
    floors=(4, 24),
    tall_share=0.35,
    floor_height=3.4,
    ground_floor_height=4.6,
    facade_colors=(_rgb("#8a8f96"), _rgb("#9c6b52"), _rgb("#7d4a3a"), _rgb("#b8b2a6"), _rgb("#5f6f7f"),
                   _rgb("#c9c2b3"), _rgb("#6b7b8c"), _rgb("#a9826a"), _rgb("#4f5a66"), _rgb("#d2cbbd")),
    trim_color=_rgb("#d9d6cf"),
    window_color=_rgb("#2b3a4a"),
    window_frame_color=_rgb("#c8ccd0"),
    window_cols_per_tile=4,
    window_width=0.62,
    window_height=0.62,
    roof="flat",
    roof_color=_rgb("#5b5b5e"),
    gable_pitch=0.0,
    road_color=_rgb("#3c3d40"),
    marking_color=_rgb("#e8e4d0"),
    sidewalk_color=_rgb("#a6a49f"),
    curb_color=_rgb("#c4c1ba"),
    ground_color=_rgb("#6f6d68"),
    center_line=True,
    crosswalks=True,
    hill_amplitude=0.0,
    hill_wavelength=400.0,
    tree_spacing=14.0,
    tree_trunk_color=_rgb("#4a3b2e"),
    tree_crown_colors=(_rgb("#3f6b34"), _rgb("#4d7a3a"), _rgb("#355e2e")),
    tree_crown_radius=2.2,
    lamp_spacing=30.0,
    lamp_color=_rgb("#2f3336"),
    awning_share=0.4,
    store_share=0.45,
    corner_store_share=0.75,
    sky=(_rgb("#6f9fd8"), _rgb("#d6e2ec"), _rgb("#8d8a84")),
    key_light=(0.45, 0.8, 0.3),
)

HILLSIDE = CityStyle(
    name="hillside",
    summary="pastel row houses with gable roofs on rolling hills, tree-lined streets (visual OOD)",
    origin=(37.8012, -123.0914),
    grid_rotation_deg=-6.0,
    block=(62.0, 58.0),
    blocks=(12, 12),
    tiny_blocks=(4, 4),
    street_width=9.0,
    avenue_width=10.0,
    diagonal_width=11.0,
    sidewalk=3.0,
    street_names=("Vallejo", "Green", "Union", "Filbert", "Greenwich", "Lombard", "Chestnut", "Francisco",
                  "Bay", "Jackson", "Pacific", "Broadway", "Clay", "Sacramento", "California", "Pine"),
    avenue_names=("Laguna", "Buchanan", "Webster", "Fillmore", "Steiner", "Pierce", "Scott", "Divisadero",
                  "Baker", "Lyon", "Presidio", "Walnut", "Laurel", "Locust", "Spruce", "Cherry"),
    diagonal_names=("Hillcrest Way", "Ridge Road", "Prospect Way", "Vista Drive"),
    street_suffix="Street",
    avenue_suffix="Street",
    lot_width=(6.0, 9.0),
    lot_depth=(12.0, 16.0),
    floors=(2, 4),
    tall_share=0.1,
    floor_height=3.1,
    ground_floor_height=3.6,
    facade_colors=(_rgb("#f4c7c3"), _rgb("#bfe3d0"), _rgb("#f6e3a1"), _rgb("#c9d8f0"), _rgb("#e6cbe8"),
                   _rgb("#fbd9b5"), _rgb("#d4ecc0"), _rgb("#f2f0e6"), _rgb("#b9e0e8"), _rgb("#f7c9dd")),
    trim_color=_rgb("#fbfbf7"),
    window_color=_rgb("#35506b"),
    window_frame_color=_rgb("#ffffff"),
    window_cols_per_tile=2,
    window_width=0.5,
    window_height=0.58,
    roof="gable",
    roof_color=_rgb("#6e4b45"),
    gable_pitch=0.55,
    road_color=_rgb("#4a4b4f"),
    marking_color=_rgb("#f2d24b"),
    sidewalk_color=_rgb("#c8c4bb"),
    curb_color=_rgb("#dedad2"),
    ground_color=_rgb("#7e9a5c"),
    center_line=True,
    crosswalks=True,
    hill_amplitude=11.0,
    hill_wavelength=300.0,
    tree_spacing=11.0,
    tree_trunk_color=_rgb("#5a4632"),
    tree_crown_colors=(_rgb("#5c8f45"), _rgb("#6fa052"), _rgb("#4f7f3f"), _rgb("#87a84f")),
    tree_crown_radius=2.0,
    lamp_spacing=28.0,
    lamp_color=_rgb("#27402f"),
    awning_share=0.6,
    store_share=0.3,
    corner_store_share=0.8,
    sky=(_rgb("#4f8fe0"), _rgb("#f3e6d8"), _rgb("#8f9a7a")),
    key_light=(0.55, 0.7, -0.45),
)

OLDTOWN = CityStyle(
    name="oldtown",
    summary="low ochre and terracotta old town, narrow cobbled streets, tiled roofs (visual OOD)",
    origin=(43.1017, 9.3162),
    grid_rotation_deg=3.0,
    block=(54.0, 50.0),
    blocks=(14, 14),
    tiny_blocks=(4, 4),
    street_width=6.0,
    avenue_width=7.0,
    diagonal_width=8.0,
    sidewalk=1.4,
    street_names=("Fiori", "Sole", "Luna", "Castello", "Mercato", "Pozzo", "Olivi", "Mulino", "Fontana",
                  "Chiesa", "Torre", "Porta", "Pescatori", "Orti", "Vigna", "Rose"),
    avenue_names=("Garibaldi", "Mazzini", "Cavour", "Dante", "Verdi", "Roma", "Marina", "Colombo",
                  "Galilei", "Manzoni", "Petrarca", "Leopardi", "Carducci", "Volta", "Bruno", "Giotto"),
    diagonal_names=("Corso Nuovo", "Via Diagonale", "Corso Antico", "Via Lunga"),
    street_suffix="",
    avenue_suffix="",
    lot_width=(7.0, 13.0),
    lot_depth=(12.0, 18.0),
    floors=(2, 4),
    tall_share=0.08,
    floor_height=3.3,
    ground_floor_height=3.9,
    facade_colors=(_rgb("#d9a45b"), _rgb("#c98b4f"), _rgb("#e3b877"), _rgb("#b8643e"), _rgb("#d7905c"),
                   _rgb("#e8c48a"), _rgb("#c4744a"), _rgb("#deaa68"), _rgb("#a85a3a"), _rgb("#ecd3a1")),
    trim_color=_rgb("#f0e2c4"),
    window_color=_rgb("#2e4a3a"),
    window_frame_color=_rgb("#3d6b4f"),
    window_cols_per_tile=2,
    window_width=0.42,
    window_height=0.55,
    roof="gable",
    roof_color=_rgb("#a8482e"),
    gable_pitch=0.35,
    road_color=_rgb("#8a7f72"),
    marking_color=_rgb("#c9bfae"),
    sidewalk_color=_rgb("#b5a58e"),
    curb_color=_rgb("#cbbda6"),
    ground_color=_rgb("#9b8b74"),
    center_line=False,
    crosswalks=False,
    hill_amplitude=0.0,
    hill_wavelength=300.0,
    tree_spacing=0.0,
    tree_trunk_color=_rgb("#5a4632"),
    tree_crown_colors=(_rgb("#58753c"),),
    tree_crown_radius=1.8,
    lamp_spacing=22.0,
    lamp_color=_rgb("#1f1f1f"),
    awning_share=0.7,
    store_share=0.4,
    corner_store_share=0.8,
    sky=(_rgb("#3d7fd6"), _rgb("#f6ead2"), _rgb("#b49a78")),
    key_light=(-0.35, 0.75, 0.55),
)

STYLES: dict[str, CityStyle] = {s.name: s for s in (METRO, HILLSIDE, OLDTOWN)}
TRAIN_STYLE = "metro"


def get_style(name: str) -> CityStyle:
    """The style called ``name``; a clear error lists the known ones."""
    try:
        return STYLES[name]
    except KeyError:
        raise ValueError(f"unknown city style {name!r}; known styles: {', '.join(STYLES)}") from None
