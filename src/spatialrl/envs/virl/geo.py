"""Distances, bearings and interpolation on (lat, lng) pairs, with the exact formulas V-IRL uses.

Two distance functions on purpose: the reference relocates points to panoramas with a spherical
haversine (R = 6371 km) but measures rail segments (the 5 m and 8 m thresholds) with geopy's WGS-84
geodesic. Mixing them up changes which interpolated rail points survive, so each caller names the one
it needs.
"""

from __future__ import annotations

import math

import numpy as np
from geographiclib.geodesic import Geodesic
from geopy.distance import ELLIPSOIDS

EARTH_RADIUS_KM = 6371.0
COMPASS_WORDS = ("north", "northeast", "east", "southeast", "south", "southwest", "west", "northwest")

LatLng = tuple[float, float]


# geopy's WGS-84 (semi-axis in km); geopy builds a new Geodesic per call, which dominated dataset loading.
_WGS84_KM = Geodesic(ELLIPSOIDS["WGS-84"][0], ELLIPSOIDS["WGS-84"][2])


def geodesic_m(a: LatLng, b: LatLng) -> float:
    """WGS-84 geodesic distance in metres, as the reference's rail thresholds use.

    The same numbers as ``geopy.distance.geodesic(a, b).meters`` (same ellipsoid in km, ×1000; tested
    bit for bit), without geopy's per-call set-up.
    """
    s12 = _WGS84_KM.Inverse(float(a[0]), float(a[1]), float(b[0]), float(b[1]), Geodesic.DISTANCE)["s12"]
    return s12 * 1000


def haversine_m(point: LatLng, lats: np.ndarray, lngs: np.ndarray) -> np.ndarray:
    """Vectorised haversine distance in metres from ``point`` to every (lats[i], lngs[i]).

    Elementwise, so the value for one key does not depend on which other keys are in the arrays (the
    pano index relies on this to search a neighbourhood and still agree with a full scan).
    """
    lat1, lng1 = math.radians(point[0]), math.radians(point[1])
    lat2, lng2 = np.radians(lats), np.radians(lngs)
    dlat = lat2 - lat1
    dlng = lng2 - lng1
    a = np.sin(dlat / 2.0) ** 2 + math.cos(lat1) * np.cos(lat2) * np.sin(dlng / 2.0) ** 2
    c = 2.0 * np.arcsin(np.sqrt(np.clip(a, 0.0, 1.0)))
    return EARTH_RADIUS_KM * c * 1000.0


def interpolate(a: LatLng, b: LatLng, i: int, n: int) -> LatLng:
    """Point at fraction ``i/n`` on the straight lat/lng line from ``a`` to ``b`` (the reference's
    linear interpolation of both coordinates)."""
    return (a[0] + (b[0] - a[0]) * i / n, a[1] + (b[1] - a[1]) * i / n)


def bearing_deg(a: LatLng, b: LatLng) -> float:
    """Initial great-circle bearing from ``a`` to ``b`` in degrees, 0 = north, clockwise, in [0, 360)."""
    lat1, lat2 = math.radians(a[0]), math.radians(b[0])
    dlng = math.radians(b[1] - a[1])
    x = math.sin(dlng) * math.cos(lat2)
    y = math.cos(lat1) * math.sin(lat2) - math.sin(lat1) * math.cos(lat2) * math.cos(dlng)
    return math.degrees(math.atan2(x, y)) % 360.0


def compass_word(heading: float) -> str:
    """The nearest of the 8 compass words to ``heading`` degrees (how V-IRL labels a milestone)."""
    return COMPASS_WORDS[int(math.floor((heading % 360.0) / 45.0 + 0.5)) % 8]


def offset_m(origin: LatLng, east_m: float, north_m: float) -> LatLng:
    """The point ``east_m``/``north_m`` metres from ``origin`` on the R = 6371 km sphere (small offsets)."""
    m_per_deg = math.radians(1.0) * EARTH_RADIUS_KM * 1000.0
    lat = origin[0] + north_m / m_per_deg
    lng = origin[1] + east_m / (m_per_deg * math.cos(math.radians(origin[0])))
    return (lat, lng)
