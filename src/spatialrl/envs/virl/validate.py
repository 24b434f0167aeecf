"""Up-front validation of a V-IRL dataset: every problem is found before an episode starts.

:func:`check_dataset` lists everything wrong (``spatialrl virl check-data``): unreadable index files,
malformed routes and milestone blocks, rail points with no panorama within 20 m, missing or undecodable
images and metadata. :func:`load_dataset` is what the env calls: the same checks (image *decoding*
skipped for speed, presence and metadata kept; no image checks at all in language-only mode) and one
:class:`DataError` listing the problems — at construction, never mid-training, never a network call.

Which panoramas are checked: by default the ones a rail can reach (each route's start, its interpolated
candidates and milestone ends) -- the only images an episode can ever load, so a dataset that passes
``check-data`` never fails the env's check and the other way round. ``all_panoramas=True``
(``check-data --all-panoramas``) checks every panorama of ``gps_pano_mapping.pkl`` too. :func:`check_report`
says exactly what was checked (:class:`CheckReport`), and both ``check-data`` and the env's error print it.
"""

from __future__ import annotations

import dataclasses
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
class CheckReport:
    """What a check looked at and what it found."""

    problems: list[Problem]
    routes: int = 0
    panoramas: int = 0  # distinct pano ids in gps_pano_mapping.pkl
    reachable: int = 0  # distinct pano ids a rail can reach
    checked: int = 0  # distinct pano ids whose image file and metadata were checked
    images: bool = True
    decoded: bool = False  # whether the checked images were decoded too

    def scope(self) -> str:
        """One line: what was checked (and, by omission, what was not)."""
        if not self.images:
            return "language-only: index files and rail relocation checked, no images"
        how = "image decoded, metadata read" if self.decoded else "image file present, metadata read"
        if self.checked >= self.panoramas:
            return f"all {self.checked} panoramas checked ({how})"
        rest = self.panoramas - self.checked
        return (f"checked the {self.checked} panoramas the rails reach ({how}); the other {rest} in "
                f"{PANO_MAPPING} are never loaded by an episode and were not checked (--all-panoramas checks them)")


@dataclass(frozen=True)
class _Use:
    route: int | None
    point: int | None


def _progress(enabled: bool, total: int, what: str):
    """A rich progress bar, or a no-op stand-in when disabled."""
    if not enabled:
        return None
    from rich.progress import Progress

    bar = Progress(transient=True)
    bar.start()
    return bar, bar.add_task(what, total=total)


def _scan(root: Path, images: bool, decode: bool, straight_line_length: int,
          progress: bool, all_panoramas: bool = False) -> tuple[VirlDataset | None, CheckReport]:
    try:
        dataset, problems = read_dataset(root)
    except DataError as e:
        return None, CheckReport([Problem(str(root), str(e))], images=images, decoded=decode)
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
    panos = dict.fromkeys(dataset.panos.mapping.values())  # distinct ids, mapping order
    report = CheckReport(problems, routes=len(dataset.routes), panoramas=len(panos), reachable=len(uses),
                         images=images, decoded=decode)
    if not images:
        return dataset, report
    todo: dict[str, _Use | None] = dict(uses)
    if all_panoramas:
        todo.update({pano: None for pano in panos if pano not in uses})
    bar = _progress(progress, len(todo), "panoramas (all)" if all_panoramas else "panoramas the rails reach")
    for pano, use in todo.items():
        if use is None:
            use = _Use(None, None)
            where = f"pano {pano!r} (in {PANO_MAPPING}; no rail reaches it)"
        else:
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
    return dataset, dataclasses.replace(report, checked=len(todo))


def check_report(root: str | Path, *, images: bool = True, decode: bool = True, straight_line_length: int = 5,
                 progress: bool = False, all_panoramas: bool = False) -> CheckReport:
    """Every problem of the dataset at ``root`` and what was checked (see the module docstring).

    ``images=False`` checks only what language-only mode needs (the two index files and relocation);
    ``all_panoramas=True`` checks the image and metadata of every panorama in the mapping, not only
    of those a rail reaches.
    """
    return _scan(Path(root), images, decode, straight_line_length, progress, all_panoramas)[1]


def check_dataset(root: str | Path, *, images: bool = True, decode: bool = True, straight_line_length: int = 5,
                  progress: bool = False, all_panoramas: bool = False) -> list[Problem]:
    """Every problem of the dataset at ``root`` (empty list = usable); :func:`check_report` for the scope."""
    return check_report(root, images=images, decode=decode, straight_line_length=straight_line_length,
                        progress=progress, all_panoramas=all_panoramas).problems


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
    dataset, report = _scan(root, images, decode=False, straight_line_length=straight_line_length,
                            progress=progress)
    problems = report.problems
    if problems or dataset is None:
        listed = "\n  ".join(str(p) for p in problems[:_MAX_LISTED])
        more = f"\n  ... and {len(problems) - _MAX_LISTED} more" if len(problems) > _MAX_LISTED else ""
        raise DataError(
            f"{root}: {len(problems)} problem(s) in the V-IRL dataset (run `spatialrl virl check-data {root}`):"
            f"\n  {listed}{more}" + (f"\nscope: {report.scope()}" if dataset is not None else "")
        )
    _LOADED[key] = dataset
    return dataset


__all__ = ["CheckReport", "Problem", "check_dataset", "check_report", "load_dataset", "read_rotation"]
