"""`spatialrl virl ...`: check a dataset, look at a route's rail, write a toy dataset, make a city,
write visual pretraining data.

Light imports only at module level (no torch); each command imports what it needs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="V-IRL street-view navigation: datasets, rails, views.", no_args_is_help=True)


@app.command("check-data")
def check_data(
    data: Annotated[Path, typer.Argument(help="Dataset folder (route_infos.json, gps_pano_mapping.pkl, street_views/).")],
    language_only: Annotated[bool, typer.Option("--language-only", help="Skip image checks (V-IRL-L needs none).")] = False,
    decode: Annotated[bool, typer.Option(help="Decode every checked panorama (slower, thorough).")] = True,
    straight_line_length: Annotated[int, typer.Option(help="Interpolated points per segment (reference: 5).")] = 5,
    all_panoramas: Annotated[bool, typer.Option(
        "--all-panoramas", help="Check every panorama of gps_pano_mapping.pkl, not only those a rail reaches "
                                "(the only ones an episode loads, and what `eval` checks).")] = False,
) -> None:
    """Validate a dataset up front: list every problem (route, point, file); exit 1 if there is any.
    The last line says exactly which panoramas were checked."""
    from rich.console import Console

    from spatialrl.envs.virl.data import read_dataset
    from spatialrl.envs.virl.validate import check_report
    from spatialrl.errors import DataError

    console = Console()
    report = check_report(data, images=not language_only, decode=decode,
                          straight_line_length=straight_line_length, progress=True, all_panoramas=all_panoramas)
    problems = report.problems
    if problems:
        console.print(f"[red]{len(problems)} problem(s) in {data}:[/red]")
        for p in problems:
            console.print(f"  {p}", markup=False, highlight=False)
        if report.routes:
            console.print(f"scope: {report.scope()}", markup=False, highlight=False)
        raise typer.Exit(1)
    try:
        dataset, _ = read_dataset(data)
    except DataError as e:  # pragma: no cover - check_dataset already reported it
        console.print(f"[red]{e}[/red]")
        raise typer.Exit(1) from None
    hist: dict[int, int] = {}
    for r in dataset.routes:
        hist[len(r.milestones)] = hist.get(len(r.milestones), 0) + 1
    shape = ", ".join(f"{k}: {v}" for k, v in sorted(hist.items()))
    console.print(
        f"[green]ok[/green] {data}: {len(dataset.routes)} routes, {report.panoramas} panoramas in the mapping; "
        f"routes per milestone count {{{shape}}}"
    )
    console.print(f"scope: {report.scope()}", markup=False, highlight=False)


@app.command("show-route")
def show_route(
    data: Annotated[Path, typer.Argument(help="Dataset folder.")],
    route: Annotated[int, typer.Option(help="Route index (file order).")] = 0,
    seed: Annotated[int, typer.Option(help="Seed of the heading and drop draws.")] = 12,
    heading: Annotated[float | None, typer.Option(help="Start heading instead of a draw.")] = None,
    relative: Annotated[bool, typer.Option("--relative", help="Relative action space (rule-OOD).")] = False,
    rail_mode: Annotated[str, typer.Option(help="faithful | fixed | comma list of fixes.")] = "faithful",
    drop_rate: Annotated[float, typer.Option(help="Chance to drop each interpolated point (reference: 0.5).")] = 0.5,
    out: Annotated[Path | None, typer.Option(help="Write a PNG: the rail map and the grid at --point.")] = None,
    point: Annotated[int, typer.Option(help="Rail point whose street-view grid goes in the PNG.")] = 0,
    grid_size: Annotated[int, typer.Option(help="Grid size in the PNG.")] = 448,
) -> None:
    """Print a route's instruction and rail (point by point); optionally draw it."""
    import random

    from rich.console import Console
    from rich.table import Table

    from spatialrl.envs.virl.rail import build_rail, parse_rail_mode
    from spatialrl.envs.virl.validate import load_dataset
    from spatialrl.errors import SpatialRLError

    console = Console()
    try:
        dataset = load_dataset(data, images=out is not None)
        if not 0 <= route < len(dataset.routes):
            raise SpatialRLError(f"route {route} out of range: {data} has {len(dataset.routes)} routes")
        fixes = parse_rail_mode(rail_mode)
        rail = build_rail(dataset, route, random.Random(seed), absolute_action=not relative, drop_rate=drop_rate,
                          fixes=fixes, start_heading=heading)
    except (SpatialRLError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    console.print(f"[bold]route {route}[/bold] · start heading {rail.start_heading} · {len(rail)} rail points")
    typer.echo(rail.global_instruction, nl=False)  # unwrapped: the exact text the model gets
    table = Table("#", "kind", "heading", "gt action", "oracle observation", "instruction (idx)")
    for i, p in enumerate(rail.points):
        table.add_row(str(i), p.kind, f"{p.heading:g}", p.gt_action, p.oracle_observation,
                      f"{p.instruction} ({p.instruction_idx})")
    console.print(table)
    if out is not None:
        _draw_route(dataset, rail, point, grid_size, fixes.grid_order, out)
        console.print(f"wrote {out}")


def _draw_route(dataset, rail, point: int, grid_size: int, prompt_order: bool, out: Path) -> None:
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from spatialrl.envs.virl.pixels import GridRenderer
    from spatialrl.io import atomic_write_bytes

    point = max(0, min(point, len(rail) - 1))
    lat0, lng0 = rail.points[0].geocode
    m = 111_195.0
    xy = [((g[1] - lng0) * m * math.cos(math.radians(lat0)), (g[0] - lat0) * m) for g in (p.geocode for p in rail.points)]
    fig, (ax, ax_img) = plt.subplots(1, 2, figsize=(12, 6))
    colours = {"start": "tab:green", "forward": "tab:gray", "intersection": "tab:blue", "destination": "tab:red"}
    ax.plot([x for x, _ in xy], [y for _, y in xy], "-", color="lightgray", zorder=1)
    for i, ((x, y), p) in enumerate(zip(xy, rail.points, strict=True)):
        ax.scatter([x], [y], color=colours[p.kind], s=60 if p.kind != "forward" else 20, zorder=2)
        dx, dy = 6 * math.sin(math.radians(p.heading)), 6 * math.cos(math.radians(p.heading))
        ax.annotate("", (x + dx, y + dy), (x, y), arrowprops={"arrowstyle": "->", "color": colours[p.kind]})
        if p.kind != "forward":
            ax.annotate(f"{i}: {p.gt_action}", (x, y), fontsize=7, xytext=(4, -10), textcoords="offset points")
    ax.set_aspect("equal")
    ax.set_xlabel("east (m)")
    ax.set_ylabel("north (m)")
    ax.set_title(f"route {rail.route_index}: rail of {len(rail)} points (arrows = camera heading)")
    p = rail.points[point]
    key = dataset.panos.relocate(p.geocode)
    grid = GridRenderer(dataset, grid_size, prompt_order).render(dataset.panos.pano_id(key), p.heading)
    ax_img.imshow(grid)
    ax_img.set_axis_off()
    ax_img.set_title(f"point {point} ({p.kind}), heading {p.heading:g}°", fontsize=9)
    fig.tight_layout()
    import io

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100)
    plt.close(fig)
    atomic_write_bytes(out, buf.getvalue())


@app.command("make-toy-data")
def make_toy_data(
    out: Annotated[Path, typer.Argument(help="Folder to create.")],
    routes: Annotated[int, typer.Option(help="0 = the 4 hand-made golden routes; N = N random routes.")] = 0,
    pano_width: Annotated[int, typer.Option(help="Panorama width in px (height = width / 2).")] = 512,
    seed: Annotated[int, typer.Option()] = 0,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing folder.")] = False,
    force: Annotated[bool, typer.Option("--force", hidden=True, help="Old spelling of --overwrite.")] = False,
) -> None:
    """Write a tiny V-IRL-format dataset (colour-wheel panoramas) to try the pipeline without real data."""
    from spatialrl.envs.virl.testdata import golden_routes, random_routes, write_dataset

    try:
        path = write_dataset(out, golden_routes() if routes == 0 else random_routes(routes, seed),
                             pano_size=(pano_width, pano_width // 2), seed=seed,
                             overwrite=overwrite or force)
    except FileExistsError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"wrote {path}")


@app.command("pretrain-data")
def pretrain_data_command(
    data: Annotated[Path, typer.Option(help="Dataset folder: a city from `spatialrl virl make-city` (a training city, "
                                            "never an evaluation one).")],
    out: Annotated[Path, typer.Option(help="SFT dataset folder to write (the `spatialrl data sft` format).")],
    pairs: Annotated[int, typer.Option(help="Samples in all, split evenly over the kinds.")],
    seed: Annotated[int, typer.Option(help="Seed: classes, routes, poses and the sign search all derive from it.")] = 0,
    kinds: Annotated[str, typer.Option(help="Comma-separated sample kinds: destination_here, which_view.")] =
        "destination_here,which_view",
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Grid option key=value (repeatable): grid_size (224), rail_mode, straight_line_length, "
                      "cache_mb.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing dataset folder.")] = False,
) -> None:
    """Visual pretraining samples from the simulator's labels: destination reached yes/no, which view shows a
    shop's sign (docs/virl.md)."""
    import shlex
    import sys

    from spatialrl.envs.pretrain_data import write_command
    from spatialrl.envs.virl.pretrain import parse_kinds, pretrain_meta, pretrain_options, pretrain_samples
    from spatialrl.overrides import parse_sets

    def make() -> tuple[dict, object]:
        chosen = parse_kinds(kinds)
        sets = parse_sets(set_)
        pretrain_options(sets)  # bad options fail before the city is loaded
        meta = pretrain_meta(data, pairs, seed, chosen, sets,
                             command=shlex.join(["spatialrl", *sys.argv[1:]]) if sys.argv else None)
        return meta, pretrain_samples(data, pairs, seed, chosen, sets)

    write_command("virl", out, pairs, overwrite, make)


# `spatialrl virl make-city`: the city generator's command (envs/virl/city.py), next to check-data.
def _register_city_commands() -> None:
    from spatialrl.envs.virl.city import make_city_command  # noqa: PLC0415 (deliberately lazy)

    app.command("make-city")(make_city_command)


_register_city_commands()
