"""The `spatialrl` command line. Each area owns its sub-commands in its own `cli.py`; this file only
mounts them. Sub-command modules import heavy dependencies (torch, transformers) inside commands so
`spatialrl --help` stays fast."""

from __future__ import annotations

import importlib
from typing import Any

import typer
from typer.core import TyperGroup

# One spelling per flag: each renamed flag keeps its old spelling as a hidden alias (see
# docs/troubleshooting.md). Canonical: --overwrite (not --force), --data (not tvr show's --bench),
# --set memory=... (not data sft's --memory).


def tidy_flags(command: Any) -> None:
    """Show plain on/off flags without a ``<bool>`` value placeholder in help (they take no value)."""
    ctx = typer.Context(command, info_name=command.name)
    for param in [*command.params, command.get_help_option(ctx)]:
        if getattr(param, "is_flag", False):
            param.metavar = ""
    for sub in getattr(command, "commands", {}).values():
        tidy_flags(sub)


class _SpatialRLGroup(TyperGroup):
    """The root group; tidies the help of every sub-command once the tree is built."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        tidy_flags(self)

    def get_params(self, ctx: Any) -> Any:
        params = super().get_params(ctx)  # the shell-completion flags are added after __init__
        for param in params:
            if getattr(param, "is_flag", False):
                param.metavar = ""
        return params


app = typer.Typer(
    name="spatialrl",
    help="Train and benchmark vision-language-model agents on active spatial tasks.",
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    cls=_SpatialRLGroup,
)

# (module, attribute, name): a Typer sub-app mounted as `spatialrl <name> ...`, or a single command
# mounted as `spatialrl <name>` when the attribute is a function.
_MOUNTS = [
    ("spatialrl.eval.cli", "eval_command", "eval"),
    ("spatialrl.eval.cli", "report_command", "report"),
    ("spatialrl.eval.findings", "app", "findings"),
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
