"""What the envs' simulator-labelled pretraining data have in common (``spatialrl tvr pretrain-data``,
``spatialrl virl pretrain-data``; ``envs/tvr/pretrain.py``, ``envs/virl/pretrain.py``): the ``--kinds``
argument, the check of ``--set`` options, and the command's write of the samples as an SFT dataset with
a progress bar. Each env keeps what is its own: the kinds, the labels and how a sample is made."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from spatialrl.envs.registry import check_option_values
from spatialrl.errors import DataError


def parse_kinds(value: str | list[str] | tuple[str, ...] | None, kinds: tuple[str, ...]) -> tuple[str, ...]:
    """``"a,b"`` → those of ``kinds``, in ``kinds`` order, each once; None → all of them."""
    if value is None:
        return kinds
    names = [v.strip() for v in value.split(",")] if isinstance(value, str) else [str(v).strip() for v in value]
    names = [n for n in names if n]
    bad = [n for n in names if n not in kinds]
    if bad or not names:
        raise DataError(f"--kinds: expected a comma-separated subset of {', '.join(kinds)}, got {value!r}")
    return tuple(k for k in kinds if k in names)


def known_options(task: str, sets: dict[str, Any] | None, defaults: dict[str, Any], minimum: dict[str, Any],
                  what: str) -> dict[str, Any]:
    """``sets`` (``--set``) over ``defaults``; a key not among them, or a bad value, is a DataError naming
    the command (``<task> pretrain-data``) and the known keys (``what`` says what they are)."""
    sets = dict(sets or {})
    unknown = sorted(set(sets) - set(defaults))
    if unknown:
        raise DataError(f"{task} pretrain-data: unknown option(s) {', '.join(unknown)}; known: "
                        f"{', '.join(defaults)} ({what})")
    check_option_values(task, sets, defaults, minimum=minimum)
    return {**defaults, **sets}


def write_command(task: str, out: Path, pairs: int, overwrite: bool,
                  make: Callable[[], tuple[dict[str, Any], Iterable[Any]]]) -> None:
    """The ``pretrain-data`` command's body: ``make()`` → (meta, samples), written to ``out`` as an SFT
    dataset under a progress bar; a bad input prints its error and exits with status 2."""
    import typer
    from rich.console import Console
    from rich.progress import track

    from spatialrl.errors import SpatialRLError
    from spatialrl.io import write_sft_samples

    console = Console()
    try:
        meta, samples = make()
        meta = write_sft_samples(out, track(samples, total=pairs, description=f"{task} pretrain-data",
                                            console=console, transient=True), meta, overwrite=overwrite)
    except (SpatialRLError, ValueError) as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
    counts = ", ".join(f"{k} {v}" for k, v in sorted(meta["categories"].items()))
    console.print(f"[green]{meta['samples']} samples, {meta['images']} images → {out}[/green]\n  {counts}")
