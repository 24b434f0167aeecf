"""Generated cities as checked V-IRL datasets, and the `spatialrl virl make-city` command.

:func:`make_city` is the city writer of the world layer (``spatialrl.worlds.city.writer``) plus what
needs the V-IRL env: the dataset check with the env's own loader and the contact sheet
(:mod:`spatialrl.envs.virl.contact_sheet`), both run on the written folder before it is renamed into
place. Light imports only: the generator (numpy, OpenGL) loads inside the functions.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

CONTACT_SAMPLES = 6


def make_city(style: str, routes: int, seed: int, out: str | Path, *, contact_sheet: bool = True,
              **kwargs: Any) -> Path:
    """Generate a city, write it as a V-IRL dataset at ``out``, check it with the V-IRL loader and (with
    ``contact_sheet``) draw ``contact_sheet.png``. ``kwargs`` go to
    :func:`spatialrl.worlds.city.writer.make_city` (``tiny``, ``force``, ``pano_width``, ...)."""
    from spatialrl.errors import DataError
    from spatialrl.worlds.city import writer

    def finish(root: Path) -> None:
        from spatialrl.envs.virl.validate import check_dataset

        problems = check_dataset(root, images=True, decode=False)
        if problems:
            listed = "\n  ".join(str(p) for p in problems[:10])
            raise DataError(f"generated city fails the V-IRL dataset check ({len(problems)} problems):\n  {listed}")
        if contact_sheet:
            from spatialrl.envs.virl.contact_sheet import write_contact_sheet

            write_contact_sheet(root, root / "contact_sheet.png", n=CONTACT_SAMPLES, seed=seed)

    return writer.make_city(style, routes, seed, out, finish=finish, **kwargs)


def make_city_command(
    out: Annotated[Path, typer.Option("--out", help="Folder to write (route_infos.json, gps_pano_mapping.pkl, "
                                                    "street_views/, city.json, contact_sheet.png).")],
    style: Annotated[str, typer.Option(help="metro (training city) | hillside | oldtown (visual OOD).")] = "metro",
    routes: Annotated[int | None, typer.Option(help="Routes to write (default 1000; 20 with --tiny).")] = None,
    seed: Annotated[int, typer.Option(help="Seed: the same seed writes the same bytes.")] = 0,
    tiny: Annotated[bool, typer.Option("--tiny", help="A few blocks, small panoramas: a dataset in seconds.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace --out if it exists.")] = False,
    force: Annotated[bool, typer.Option("--force", hidden=True, help="Old spelling of --overwrite.")] = False,
    pano_width: Annotated[int | None, typer.Option(help="Panorama width in px, height = width/2 "
                                                        "(default 2048; 512 with --tiny).")] = None,
    jpeg_quality: Annotated[int, typer.Option(help="JPEG quality of the panoramas.")] = 90,
    contact_sheet: Annotated[bool, typer.Option(help="Write contact_sheet.png.")] = True,
) -> None:
    """Generate a city (streets, buildings, named shops with signs) and write it as a V-IRL dataset."""
    from rich.console import Console

    from spatialrl.errors import SpatialRLError
    from spatialrl.worlds.city.styles import STYLES
    from spatialrl.worlds.city.writer import TINY_ROUTES

    console = Console(stderr=True)
    if style not in STYLES:
        console.print(f"[red]error:[/red] unknown style {style!r}; choose from {', '.join(STYLES)}")
        raise typer.Exit(2)
    n = routes if routes is not None else (TINY_ROUTES if tiny else 1000)
    try:
        path = make_city(style, n, seed, out, tiny=tiny, force=overwrite or force, pano_width=pano_width,
                          jpeg_quality=jpeg_quality, contact_sheet=contact_sheet)
    except FileExistsError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    except (SpatialRLError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    import json

    manifest = json.loads((path / "city.json").read_text(encoding="utf-8"))
    r = manifest["routes"]
    hist = ", ".join(f"{k}: {v}" for k, v in r["milestones_histogram"].items() if v)
    typer.echo(f"wrote {path}: {r['count']} routes ({hist} milestones), "
               f"{manifest['panoramas']['count']} panoramas, style {manifest['style']}, seed {manifest['seed']}")
