"""Up-front validation of a V-IRL dataset: every problem is found before an episode starts.

:func:`check_dataset` lists everything wrong (``spatialrl virl check-data``): unreadable index files,
malformed routes and milestone blocks, rail points with no panorama within 20 m, missing or undecodable
images and metadata. :func:`load_dataset` is what the env calls: the same checks (image *decoding*
skipped for speed, presence and metadata kept; no image checks at all in language-only mode) and one
:class:`DataError` listing the problems — at construction, never mid-training, never a network call.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2

from spatialrl.envs.virl.data import (
    PANO_MAPPING,
    ROUTE_INFOS,
    STREET_VIEWS,
    Problem,
    VirlDataset,
    read_dataset,
    read_rotation,
)
from spatialrl.envs.virl.rail import compute_geometry
from spatialrl.errors import DataError

_MAX_LISTED = 20


@dataclass(frozen=True)
class _Use:
    route: int
    point: int


def _progress(enabled: bool, total: int, what: str):
    """A rich progress bar, or a no-op stand-in when disabled."""
    if not enabled:
        return None
    from rich.progress import Progress

    bar = Progress(transient=True)
    bar.start()
    return bar, bar.add_task(what, total=total)


def _scan(root: Path, images: bool, decode: bool, straight_line_length: int,
          progress: bool) -> tuple[VirlDataset | None, list[Problem]]:
    try:
        dataset, problems = read_dataset(root)
    except DataError as e:
        return None, [Problem(str(root), str(e))]
    uses: dict[str, _Use] = {}
    bar = _progress(progress, len(dataset.routes), "routes")
    for route in dataset.routes:
        geometry, probs = compute_geometry(dataset.panos, route, straight_line_length)
        problems += probs
        if geometry is not None:
            dataset.geometry[(route.index, straight_line_length)] = geometry
            # point k = k-th entry of [start] + geocode_list; forward candidates count with the
            # milestone their segment leads to.
            uses.setdefault(dataset.panos.pano_id(geometry.start), _Use(route.index, 0))
            for j, seg in enumerate(geometry.segments):
                for p in [c for c in seg.candidates if c is not None] + [seg.end]:
                    uses.setdefault(dataset.panos.pano_id(p), _Use(route.index, j + 1))
        if bar:
            bar[0].advance(bar[1])
    if bar:
        bar[0].stop()
    if not images:
        return dataset, problems
    bar = _progress(progress, len(uses), "panoramas")
    for pano, use in uses.items():
        where = f"route {use.route}, point {use.point} (pano {pano!r})"
        jpg = dataset.image_path(pano)
        if not jpg.is_file():
            problems.append(Problem(where, f"{STREET_VIEWS}/{jpg.name} is missing", use.route, use.point))
        elif decode:
            img = cv2.imread(str(jpg), cv2.IMREAD_COLOR)
            if img is None:
                problems.append(Problem(where, f"{STREET_VIEWS}/{jpg.name} cannot be decoded", use.route, use.point))
        try:
            dataset.rotation(pano)
        except DataError as e:
            problems.append(Problem(where, str(e).replace(str(dataset.root) + "/", ""), use.route, use.point))
        if bar:
            bar[0].advance(bar[1])
    if bar:
        bar[0].stop()
    return dataset, problems


def check_dataset(root: str | Path, *, images: bool = True, decode: bool = True, straight_line_length: int = 5,
                  progress: bool = False) -> list[Problem]:
    """Every problem of the dataset at ``root`` (empty list = usable).

    ``images=False`` checks only what language-only mode needs (the two index files and relocation).
    """
    return _scan(Path(root), images, decode, straight_line_length, progress)[1]


_LOADED: dict[tuple, VirlDataset] = {}


def _stamp(root: Path) -> tuple:
    out = []
    for name in (ROUTE_INFOS, PANO_MAPPING, STREET_VIEWS):
        p = root / name
        out.append(p.stat().st_mtime_ns if p.exists() else None)
    return tuple(out)


def load_dataset(root: str | Path, *, images: bool = True, straight_line_length: int = 5,
                 progress: bool = False) -> VirlDataset:
    """Load and validate a dataset folder; raises one :class:`DataError` listing every problem.

    Cached per process (keyed by the folder and its files' modification times), so env slots share it.
    """
    root = Path(root).expanduser()
    key = (str(root.resolve()), images, straight_line_length, _stamp(root))
    if key in _LOADED:
        return _LOADED[key]
    dataset, problems = _scan(root, images, decode=False, straight_line_length=straight_line_length,
                              progress=progress)
    if problems or dataset is None:
        listed = "\n  ".join(str(p) for p in problems[:_MAX_LISTED])
        more = f"\n  ... and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
        raise DataError(
            f"{root}: {len(problems)} problem(s) in the V-IRL dataset (run `spatialrl virl check-data {root}`):"
            f"\n  {listed}{more}"
        )
    _LOADED[key] = dataset
    return dataset


__all__ = ["Problem", "check_dataset", "load_dataset", "read_rotation"]
