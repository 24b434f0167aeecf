"""`spatialrl play`: the human play page (and replay viewer) on localhost."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def play_command(
    task: Annotated[str, typer.Option(help="Task: tvr or virl (any task whose suite has a human view).")],
    data: Annotated[str | None, typer.Option(help="Task data: TVR bench folder, V-IRL dataset folder.")] = None,
    split: Annotated[str | None, typer.Option(help="Split to play.")] = None,
    out: Annotated[Path, typer.Option(help="Run folder for the human episodes.")] = Path("runs/human"),
    replay: Annotated[Path | None, typer.Option(help="A run folder (model or human) to step through.")] = None,
    host: Annotated[str, typer.Option(help="Bind address (localhost only by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option()] = 8765,
    idle_timeout: Annotated[float, typer.Option(
        help="Minutes after which an idle unfinished session expires and its episode is free again.")] = 30.0,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Task option key=value (repeatable).")] = None,
) -> None:
    """Play a task in the browser with the papers' human protocol; episodes are recorded like model runs."""
    import uvicorn

    from spatialrl.envs.registry import get_suite
    from spatialrl.errors import SpatialRLError
    from spatialrl.overrides import parse_sets
    from spatialrl.web.server import PlayState, create_app

    try:
        suite = get_suite(task)
        options = dict(suite.default_options)
        if data is not None:
            options["data"] = data
        if split is not None:
            options["split"] = split
        options.update(parse_sets(set_))
    except SpatialRLError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    if not idle_timeout > 0:
        raise typer.BadParameter(f"must be > 0 minutes, got {idle_timeout}", param_hint="--idle-timeout")
    state = PlayState(suite, options, out, replay_dir=replay, idle_timeout_s=idle_timeout * 60.0)
    typer.echo(f"spatialrl play: http://{host}:{port}/  (episodes recorded in {out})")
    uvicorn.run(create_app(state), host=host, port=port, log_level="warning")
