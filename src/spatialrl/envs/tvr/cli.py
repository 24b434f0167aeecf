"""`spatialrl tvr ...`: build a TVR benchmark folder and look at its tasks. No torch imports here."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from spatialrl.errors import SpatialRLError

app = typer.Typer(help="Target Viewpoint Reproduction (TVRBench): benchmark generation and inspection.",
                  no_args_is_help=True)


@app.command("make-bench")
def make_bench_command(
    out: Annotated[Path, typer.Option(help="Bench folder to create.")],
    tiny: Annotated[bool, typer.Option("--tiny", help="A few tasks per category from a handful of scenes (seconds).")] = False,
    seed: Annotated[int, typer.Option(help="Bench seed: scene seeds and every sample derive from it.")] = 0,
    sizes: Annotated[str | None, typer.Option(
        help="Override task counts, e.g. 'eval=500,sft=1600,rl=4800,diag_rotate=100,diag_move=100'.")] = None,
    scenes: Annotated[str | None, typer.Option(
        help="Override scenes per split and family, e.g. 'sft=20,eval=40,rl=60'.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing folder.")] = False,
    force: Annotated[bool, typer.Option("--force", hidden=True, help="Old spelling of --overwrite.")] = False,
) -> None:
    """Generate scene splits and the eval / SFT / RL / diagnostic task files (atomically)."""
    from rich.console import Console

    from spatialrl.envs.tvr.bench import BenchConfig, make_bench, parse_counts

    console = Console()
    try:
        cfg = BenchConfig.preset(tiny=tiny, seed=seed, sizes=parse_counts(sizes), scenes=parse_counts(scenes))
        manifest = make_bench(out, cfg, force=overwrite or force)
    except (SpatialRLError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    total = sum(sum(c.values()) for c in manifest["counts"].values())
    console.print(f"[green]{total} tasks in {manifest['timings_s']['total']:.1f}s → {out}[/green]")
    for split, counts in manifest["counts"].items():
        console.print(f"  {split}: " + ", ".join(f"{k} {v}" for k, v in counts.items() if v))


@app.command("show")
def show_command(
    task_id: Annotated[str, typer.Argument(help="Task id, e.g. single-kitchen-004211_easy_t00_s00.")],
    out: Annotated[Path, typer.Option(help="PNG to write.")],
    data: Annotated[Path | None, typer.Option(help="Bench folder (as in `spatialrl eval --data`).")] = None,
    width: Annotated[int, typer.Option(help="Image width.")] = 640,
    height: Annotated[int, typer.Option(help="Image height.")] = 360,
    bench: Annotated[Path | None, typer.Option("--bench", hidden=True, help="Old spelling of --data.")] = None,
) -> None:
    """Write a PNG with the task's start and target views above its floor plan."""
    from rich.console import Console

    from spatialrl.envs.tvr.report import show_task_png

    console = Console()
    data = data or bench
    if data is None:
        console.print("[red]error:[/red] missing option --data (the bench folder, e.g. data/tvr)")
        raise typer.Exit(2)
    try:
        if width <= 0 or height <= 0:
            raise ValueError(f"image size must be positive, got {width}x{height}")
        path = show_task_png(data, task_id, out, width, height)
    except (SpatialRLError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    console.print(f"[green]wrote {path}[/green]")


@app.command("pretrain-data")
def pretrain_data_command(
    data: Annotated[Path, typer.Option(help="Bench folder (as in `spatialrl eval --data`).")],
    out: Annotated[Path, typer.Option(help="SFT dataset folder to write (the `spatialrl data sft` format).")],
    pairs: Annotated[int, typer.Option(help="Samples (frame pairs) in all, split evenly over the kinds.")],
    split: Annotated[str, typer.Option(help="Split whose scenes give the poses (sft or rl; never eval scenes).")] = "sft",
    seed: Annotated[int, typer.Option(help="Seed: kinds, classes, scenes and poses all derive from it.")] = 0,
    kinds: Annotated[str, typer.Option(help="Comma-separated sample kinds: same_view, which_action.")] =
        "same_view,which_action",
    set_: Annotated[list[str] | None, typer.Option(
        "--set", help="Frame option key=value (repeatable): width, height, badges, cache_mb.")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing dataset folder.")] = False,
) -> None:
    """Visual pretraining pairs from the simulator's free labels: same view yes/no, which action (docs/tvr.md)."""
    import shlex
    import sys

    from spatialrl.envs.pretrain_data import write_command
    from spatialrl.envs.tvr.pretrain import parse_kinds, pretrain_meta, pretrain_options, pretrain_samples
    from spatialrl.overrides import parse_sets

    def make() -> tuple[dict, object]:
        chosen = parse_kinds(kinds)
        sets = parse_sets(set_)
        pretrain_options(sets)  # bad options fail before any scene is built
        meta = pretrain_meta(data, split, pairs, seed, chosen, sets,
                             command=shlex.join(["spatialrl", *sys.argv[1:]]) if sys.argv else None)
        return meta, pretrain_samples(data, split, pairs, seed, chosen, sets)

    write_command("tvr", out, pairs, overwrite, make)
