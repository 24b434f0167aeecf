"""The `spatialrl` command line. Each area owns its sub-commands in its own `cli.py`; this file only
mounts them. Sub-command modules import heavy dependencies (torch, transformers) inside commands so
`spatialrl --help` stays fast."""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="spatialrl",
    help="Train and benchmark vision-language-model agents on active spatial tasks.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
)

# (module, attribute, name): a Typer sub-app mounted as `spatialrl <name> ...`, or a single command
# mounted as `spatialrl <name>` when the attribute is a function.
_MOUNTS = [
    ("spatialrl.eval.cli", "eval_command", "eval"),
    ("spatialrl.eval.cli", "report_command", "report"),
    ("spatialrl.envs.tvr.cli", "app", "tvr"),
    ("spatialrl.envs.virl.cli", "app", "virl"),
    ("spatialrl.envs.gp.cli", "app", "gp"),
    ("spatialrl.models.cli", "app", "model"),
    ("spatialrl.train.cli", "data_app", "data"),
    ("spatialrl.train.cli", "train_app", "train"),
    ("spatialrl.web.cli", "play_command", "play"),
    ("spatialrl.demo", "demo_command", "demo"),
]


def _mount() -> None:
    for module_name, attr, name in _MOUNTS:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name and e.name.startswith("spatialrl"):
                continue  # area not built yet
            raise
        obj = getattr(module, attr)
        if isinstance(obj, typer.Typer):
            app.add_typer(obj, name=name)
        else:
            app.command(name=name)(obj)


_mount()

if __name__ == "__main__":
    app()
