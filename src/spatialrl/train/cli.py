"""`spatialrl data ...` (expert datasets) and `spatialrl train ...` (trainers).

Trainers register on ``train_app`` as ``spatialrl train <algo> CONFIG [--a.b=value ...]``: a command with
``context_settings=OVERRIDE_CONTEXT`` that hands its config class and ``module:train`` to
:func:`run_trainer` (see ``sft_command``). Heavy
imports (torch, transformers) happen inside the commands so ``spatialrl --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from spatialrl.errors import SpatialRLError

data_app = typer.Typer(help="Build training datasets from expert episodes.", no_args_is_help=True)
train_app = typer.Typer(help="Train models: `spatialrl train sft CONFIG [--set a.b=value | --a.b=value ...]`.",
                        no_args_is_help=True)

# Commands that take a recipe plus free `--set a.b=value` / `--a.b=value` overrides (typer must not parse
# those itself; spatialrl/overrides.py reads them, as it reads every command's --set).
OVERRIDE_CONTEXT = {"allow_extra_args": True, "ignore_unknown_options": True}


def _fail(e: Exception) -> None:
    from rich.console import Console

    Console(stderr=True).print(f"[red]error:[/red] {e}")
    raise typer.Exit(2) from None


def print_config_help(config_cls: type) -> None:
    """Every dotted key of a trainer config with its type, default and help (``--help-config``)."""
    from rich.console import Console
    from rich.table import Table

    from spatialrl.train.config import config_help

    table = Table("key", "type", "default", "help", title=f"{config_cls.__name__} (override with --key=value)")
    for row in config_help(config_cls):
        table.add_row(*row)
    Console().print(table)


def run_trainer(config_cls: type, train_fn_path: str, config: Path | None, overrides: list[str],
                help_config: bool) -> Any:
    """Shared body of trainer commands: parse + validate the recipe, then call ``module:function``."""
    if help_config:
        print_config_help(config_cls)
        return None
    if config is None:
        raise typer.BadParameter("missing CONFIG (a YAML recipe, e.g. configs/sft/tiny_cpu.yaml)")
    import importlib

    from spatialrl.train.config import load_config

    cfg = load_config(config_cls, config, overrides)
    module_name, fn_name = train_fn_path.split(":")
    train = getattr(importlib.import_module(module_name), fn_name)
    try:
        result = train(cfg)
    finally:
        spread = _end_process_group()
    if spread:
        _exit_finished_rank()
    return result


def _end_process_group() -> bool:
    """Tear a multi-process run's process group down before the interpreter exits. Left to interpreter
    shutdown, gloo's threads can abort a finished process ("terminate called without an active
    exception", exit -6: rank 1 of the two-process CPU test, after its final save, 2026-12-05). True when
    there was a group of more than one process."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return False
    spread = dist.get_world_size() > 1
    dist.destroy_process_group()
    return spread


def _exit_finished_rank() -> None:
    """End a rank of a multi-process run that finished cleanly without the interpreter's teardown. Even with
    its process group destroyed, a finished rank 1 of the two-process CPU test still aborted at exit
    once more ("terminate called without an active exception", exit -6, after its final save, 2026-12-07
    in CI): a native thread torn down during finalisation, and the launcher then failed the whole run.
    Everything the run writes is written and closed by now (atomic files, trackers closed, accelerate's
    ``end_training``), so the streams are flushed and the process exits 0 at once."""
    import logging

    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


@train_app.command("sft", context_settings=OVERRIDE_CONTEXT)
def sft_command(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Argument(help="YAML recipe (configs/sft/*.yaml).")] = None,
    help_config: Annotated[bool, typer.Option("--help-config", help="List every config key and exit.")] = False,
) -> None:
    """Supervised fine-tuning on an expert dataset. Extra `--a.b=value` flags override the recipe."""
    from spatialrl.train.config import SFTConfig

    try:
        run_trainer(SFTConfig, "spatialrl.train.sft:train", config, list(ctx.args), help_config)
    except SpatialRLError as e:
        _fail(e)


def _command_line(**args: Any) -> str:
    """The `spatialrl data sft` command that rebuilds a dataset (stored in its meta.json)."""
    parts = ["spatialrl", "data", "sft"]
    for key, value in args.items():
        flag = "--" + key.rstrip("_").replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            parts.append(flag)
        elif isinstance(value, list):
            parts += [f"{flag} {v}" for v in value]
        else:
            parts.append(f"{flag} {value}")
    return " ".join(parts)


@data_app.command("sft")
def data_sft_command(
    task: Annotated[str, typer.Option(help="Task: virl, tvr or gp.")],
    out: Annotated[Path, typer.Option(help="Dataset folder to write.")],
    data: Annotated[str | None, typer.Option(help="Task data: TVR bench folder, V-IRL dataset folder.")] = None,
    split: Annotated[str | None, typer.Option(help="Split to draw episodes from (task-specific).")] = None,
    cot: Annotated[bool, typer.Option("--cot", help="Answers start with <think>…</think> reasoning.")] = False,
    cot_annotator: Annotated[str | None, typer.Option(
        help="Agent that writes the CoT reasoning instead of the template (e.g. openai:MODEL@URL).")] = None,
    episodes: Annotated[int | None, typer.Option(help="Number of episodes (a seeded subset; default all).")] = None,
    seed: Annotated[int, typer.Option(
        help="Seed of the episode subset, the expert noise and the roll-in's draws and sampling.")] = 0,
    samples: Annotated[str, typer.Option(help="auto | step | episode (see docs/training.md).")] = "auto",
    batch_size: Annotated[int, typer.Option(help="Episodes stepped together.")] = 16,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Task option key=value (repeatable).")] = None,
    keep_failed: Annotated[bool, typer.Option("--keep-failed", help="Keep episodes the expert did not solve.")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="Replace an existing dataset folder.")] = False,
    expert_noise: Annotated[float, typer.Option(
        help="Share of turns where the expert steps a random other action (labels stay the expert's): "
             "off-path states (multi-turn prompts: earlier answers are context, not targets).")] = 0.0,
    roll_in: Annotated[str | None, typer.Option(
        help="DAgger roll-in: this agent (hf:PATH | builtin:NAME | random | openai:MODEL@URL) drives the episodes, "
             "every sample is the expert's label at the state it reached (earlier answers in a multi-turn "
             "prompt are context, not targets).")] = None,
    roll_in_beta: Annotated[float, typer.Option(
        help="With --roll-in: share of turns stepped by the expert instead (seeded per episode and turn).")] = 0.0,
    roll_in_temperature: Annotated[float, typer.Option(
        help="With --roll-in: the agent's sampling temperature (0 = greedy, as eval).")] = 0.0,
    max_new_tokens: Annotated[int | None, typer.Option(
        help="With --roll-in: the agent's answer budget (default: the model's recorded setting, else 256).")] = None,
    labels: Annotated[str, typer.Option(
        help="expert (one tie-broken label per state) | all_optimal (TVR: one sample per optimal action, each weighted 1/k so a state counts once).")] = "expert",
    memory: Annotated[str | None, typer.Option("--memory", hidden=True, help="Old spelling of --set memory=...")] = None,
    force: Annotated[bool, typer.Option("--force", hidden=True, help="Old spelling of --overwrite.")] = False,
) -> None:
    """Render expert episodes through the eval prompt code into an SFT dataset (JSONL + PNG).

    Task options (TVR's memory mode ao|va, image sizes, ...) are `--set key=value`, as in `spatialrl eval`.
    """
    from rich.console import Console

    try:
        from spatialrl.envs.registry import get_suite
        from spatialrl.overrides import parse_sets
        from spatialrl.train.cot import thought_function
        from spatialrl.train.data import build_sft_dataset

        suite = get_suite(task)
        options = dict(suite.default_options)
        if data is not None:
            options["data"] = data
        if split is not None:
            options["split"] = split
        if memory is not None:  # the hidden old flag: the same as --set memory=...
            set_ = [f"memory={memory}", *(set_ or [])]
            memory = None
        if cot and "cot" in suite.default_options:
            options["cot"] = True  # the task's prompter asks for reasoning (TVR); others keep their prompt
        user_sets = parse_sets(set_)
        agent, sampling = None, None
        if roll_in is None:
            for flag, value, default in (("--roll-in-beta", roll_in_beta, 0.0),
                                         ("--roll-in-temperature", roll_in_temperature, 0.0),
                                         ("--max-new-tokens", max_new_tokens, None)):
                if value != default:
                    raise typer.BadParameter(f"{flag} needs --roll-in AGENT")
        else:
            from spatialrl.agents.base import SamplingParams
            from spatialrl.agents.loader import load_policy
            from spatialrl.eval.cli import apply_model_settings

            # The agent sees the prompts it was trained on: its recorded eval settings (image size, memory
            # mode, answer length) apply where --set gives nothing, as in `spatialrl eval`.
            budget = apply_model_settings(Console(), roll_in, task, options, user_sets, max_new_tokens)
            if not 0.0 <= roll_in_beta <= 1.0:
                raise typer.BadParameter(f"--roll-in-beta must be in [0, 1], got {roll_in_beta}")
            sampling = SamplingParams(temperature=roll_in_temperature, max_new_tokens=budget, seed=seed)
            agent = load_policy(roll_in, seed=seed)
        options.update(user_sets)
        if labels not in ("expert", "all_optimal"):
            raise typer.BadParameter(f"--labels must be expert or all_optimal, got {labels!r}")
        annotator = None
        if cot_annotator is not None:
            if not cot:
                raise typer.BadParameter("--cot-annotator needs --cot")
            from spatialrl.agents.loader import load_policy

            annotator = load_policy(cot_annotator, seed=seed)
        meta = build_sft_dataset(
            suite, options, out, episodes=episodes, seed=seed, samples=samples,  # type: ignore[arg-type]
            thought_fn=thought_function(task) if cot else None, annotator=annotator, batch_size=batch_size,
            only_success=not keep_failed, overwrite=overwrite or force, expert_noise=expert_noise,
            roll_in=agent, roll_in_beta=roll_in_beta, roll_in_name=roll_in, sampling=sampling,
            labels=labels,  # type: ignore[arg-type]
            command=_command_line(
                task=task, data=data, split=split, memory=memory, cot=cot, cot_annotator=cot_annotator,
                episodes=episodes, seed=seed, samples=samples, set_=set_, out=out, expert_noise=expert_noise or None,
                roll_in=roll_in, roll_in_beta=roll_in_beta if roll_in else None,
                roll_in_temperature=roll_in_temperature or None, max_new_tokens=max_new_tokens,
                labels=None if labels == "expert" else labels),
        )
        turns = (f"{meta['states']} states, every optimal label of each" if "states" in meta
                 else f"{meta['assistant_turns']} assistant turns")
        Console().print(f"[green]{meta['samples']} samples ({turns}, {meta['images']} images) from "
                        f"{meta['episodes']} episodes → {out}[/green]")
        if meta["episodes_dropped"]:
            Console().print(f"[yellow]{len(meta['episodes_dropped'])} episodes dropped (expert failed)[/yellow]")
        if roll_in is not None:
            by = meta["roll_in_turns"]
            Console().print(f"roll-in {roll_in}: {by['agent']} agent turns, {by['expert']} expert turns; "
                            f"{meta['episodes_success']}/{meta['episodes']} episodes succeeded")
            if meta["episodes_agent_errors"]:
                Console().print(f"[yellow]{len(meta['episodes_agent_errors'])} episodes ended by an agent error "
                                f"(their states so far are kept; e.g. {meta['episodes_agent_errors'][0]})[/yellow]")
    except (SpatialRLError, KeyError, ValueError) as e:
        _fail(e)


@data_app.command("merge")
def data_merge_command(
    sources: Annotated[list[Path], typer.Argument(help="Dataset folders to join (e.g. shards built in parallel).")],
    out: Annotated[Path, typer.Option(help="Dataset folder to write.")],
    overwrite: Annotated[bool, typer.Option(help="Replace an existing dataset folder.")] = False,
) -> None:
    """Join SFT dataset folders of one task into one (samples in order, images deduplicated)."""
    from rich.console import Console

    try:
        from spatialrl.train.data import merge_sft_datasets

        meta = merge_sft_datasets(sources, out, overwrite=overwrite)
        Console().print(f"[green]{meta['samples']} samples, {meta['images']} images from {len(sources)} datasets → {out}[/green]")
    except (SpatialRLError, KeyError, ValueError) as e:
        _fail(e)


@train_app.command("ppo", context_settings=OVERRIDE_CONTEXT)
def ppo_command(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Argument(help="YAML recipe (configs/ppo/*.yaml).")] = None,
    help_config: Annotated[bool, typer.Option("--help-config", help="List every config key and exit.")] = False,
) -> None:
    """PPO with a value head (SFTvsRL recipe) on live env rollouts. Extra `--a.b=value` flags override the recipe."""
    from spatialrl.train.rl_config import PPOConfig

    try:
        run_trainer(PPOConfig, "spatialrl.train.ppo:train", config, list(ctx.args), help_config)
    except SpatialRLError as e:
        _fail(e)


@train_app.command("grpo", context_settings=OVERRIDE_CONTEXT)
def grpo_command(
    ctx: typer.Context,
    config: Annotated[Path | None, typer.Argument(help="YAML recipe (configs/grpo/*.yaml).")] = None,
    mode: Annotated[str | None, typer.Option(help="single (per-step expert prompts) | multi (live rollouts); "
                                                  "default: the recipe's.")] = None,
    help_config: Annotated[bool, typer.Option("--help-config", help="List every config key and exit.")] = False,
) -> None:
    """GRPO, single-turn or multi-turn (TVRBench). Extra `--a.b=value` flags override the recipe."""
    from spatialrl.train.rl_config import GRPOConfig

    overrides = list(ctx.args) + ([f"--mode={mode}"] if mode is not None else [])
    try:
        run_trainer(GRPOConfig, "spatialrl.train.grpo:train", config, overrides, help_config)
    except SpatialRLError as e:
        _fail(e)
