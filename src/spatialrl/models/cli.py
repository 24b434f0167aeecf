"""``spatialrl model ...``: build, inspect and list built-in models. torch/transformers load inside commands."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(help="Built-in small VLM: build a preset, inspect a model, list built-in names.",
                  no_args_is_help=True)

# (width, height) of the images our tasks send: a V-IRL 2x2 grid at 448², a TVR frame, a full V-IRL grid.
INFO_SIZES = [(448, 448), (640, 360), (2405, 2405)]


@app.command("init")
def init_command(
    out: Path = typer.Option(..., "--out", help="Folder to write the model, processor and tokenizer to."),
    preset: str = typer.Option("tiny", "--preset", help="tiny (< 1M params, tests) or small (20-60M, GPU training)."),
    seed: int = typer.Option(0, "--seed", help="Weight initialisation seed (same seed, same files)."),
    overwrite: bool = typer.Option(False, "--overwrite", help="Replace a non-empty output folder."),
    force: bool = typer.Option(False, "--force", hidden=True, help="Old spelling of --overwrite."),
) -> None:
    """Build an untrained built-in model (Qwen2.5-VL architecture, our BPE tokenizer) and save it."""
    from spatialrl.errors import SpatialRLError
    from spatialrl.models.builtin import PRESETS, init_model

    if preset not in PRESETS:
        raise typer.BadParameter(f"unknown preset {preset!r}; choose from {', '.join(PRESETS)}", param_hint="--preset")
    try:
        meta = init_model(preset, out, seed=seed, force=overwrite or force)
    except SpatialRLError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    typer.echo(f"wrote {out}: preset {preset}, {meta['parameters']:,} parameters, "
               f"vocab {meta['tokenizer_vocab']} (corpora: {', '.join(meta['corpus_sources'])})")


@app.command("info")
def info_command(path: Path = typer.Argument(..., help="A model folder (hf) or builtin:NAME.")) -> None:
    """Print parameters, family, vocabulary and image token counts of a model."""
    from rich.console import Console
    from rich.table import Table

    from spatialrl.errors import SpatialRLError

    try:
        model, processor, label = _load(str(path))
    except SpatialRLError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(1) from e
    from spatialrl.models.builtin import image_token_counts

    table = Table(title=label, show_header=False)
    total = sum(p.numel() for p in model.parameters())
    table.add_row("family", model.config.model_type)
    table.add_row("class", type(model).__name__)
    table.add_row("parameters", f"{total:,}")
    for part in ("visual", "vision_model", "vision_tower", "language_model"):
        module = getattr(getattr(model, "model", model), part, None)
        if module is not None:
            table.add_row(f"  {part}", f"{sum(p.numel() for p in module.parameters()):,}")
    table.add_row("vocabulary", str(len(processor.tokenizer)))
    table.add_row("processor", type(processor).__name__)
    for size, n in image_token_counts(processor, INFO_SIZES).items():
        table.add_row(f"image tokens {size}", str(n))
    Console().print(table)


@app.command("list")
def list_command() -> None:
    """List the names ``--agent builtin:NAME`` accepts."""
    from spatialrl.models.builtin import RANDOM_NAMES, shipped_models

    for name in shipped_models():
        typer.echo(f"{name}\t(trained, shipped)")
    for name, preset in sorted(RANDOM_NAMES.items()):
        typer.echo(f"{name}\t(untrained {preset} preset, built on the fly)")


def _load(spec: str):
    from spatialrl.errors import DataError

    if spec.startswith("builtin:"):
        from spatialrl.models.builtin import build_model, resolve_builtin

        target = resolve_builtin(spec.split(":", 1)[1])
        if isinstance(target, str):
            model, processor, _ = build_model(target)
            return model, processor, spec
        spec = str(target)
    path = Path(spec.removeprefix("hf:"))
    if not path.is_dir():
        raise DataError(f"{path}: model folder does not exist")
    from transformers import AutoModelForImageTextToText

    from spatialrl.models.processor import load_processor, model_type_of

    model_type_of(path)
    model = AutoModelForImageTextToText.from_pretrained(path, local_files_only=True)
    return model, load_processor(path), str(path)


@app.command("probe")
def probe_command(
    model: str = typer.Argument(..., help="builtin:NAME or hf:PATH of a TVR or V-IRL model."),
    data: Path = typer.Option(..., help="TVR bench folder or V-IRL dataset folder (use episodes the model "
                                        "never trained on)."),
    task: str | None = typer.Option(None, help="tvr | virl (default: the task in the model folder's "
                                               "spatialrl_model.json)."),
    split: str | None = typer.Option(None, help="Split the probe states come from (default: eval for TVR, "
                                                "in-dist for V-IRL)."),
    states: int = typer.Option(200, help="Held-out states probed."),
    seed: int = typer.Option(0, help="Seed of the state sample and of the image swaps."),
    set_: list[str] | None = typer.Option(None, "--set", help="Task option KEY=VALUE over the model's recorded "
                                                             "ones, e.g. intersection_in_text=false, grid_size=448."),
) -> None:
    """Image sensitivity: does swapping an image move the model's answer distribution?

    TVR: the target image of held-out states is swapped with another state's. V-IRL: the street-view
    grid at steps where the text cannot decide (forward vs stop; with intersection_in_text=false also
    forward vs turn) is swapped with the grid of a step whose answer differs. Prints JSON.
    """
    import json

    import torch

    from spatialrl.errors import SpatialRLError

    try:
        from spatialrl.eval.image_probe import probe_for
        from spatialrl.models.builtin import model_eval_settings
        from spatialrl.overrides import parse_sets

        settings = model_eval_settings(model) or {}
        task = task or settings.get("task")
        if task is None:
            raise typer.BadParameter("the model folder records no task (spatialrl_model.json → eval.task); "
                                     "name it with --task tvr|virl", param_hint="--task")
        probe = probe_for(task)
        options = {**settings.get("options", {}), **parse_sets(set_)}
        net, processor, _ = _load(model)
        net.eval()
        with torch.no_grad():
            result = probe.run(net, processor, data, split or probe.default_split, options, states, seed)
        typer.echo(json.dumps({"task": task, **result}, indent=2))
    except SpatialRLError as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
