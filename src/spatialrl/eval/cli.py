"""`spatialrl eval` and `spatialrl report`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from spatialrl.errors import SpatialRLError
from spatialrl.overrides import parse_sets


def default_run_dir(task: str, agent: str, options: dict[str, Any]) -> Path:
    """``runs/<task>-<split>-<agent>``, with the split the run will record (the task's default when none
    is given), so the folder name matches run.json and the README's commands."""
    from spatialrl.envs.registry import get_suite

    split = options.get("split") or get_suite(task).default_options.get("split") or "default"
    safe = {ord(c): "_" for c in "/\\@ "} | {ord(":"): "-", ord(","): "+"}
    return Path("runs") / f"{task}-{str(split).translate(safe)}-{agent.translate(safe)}"


def api_options(agent: str, timeout: float | None, retries: int | None, max_wait: float | None) -> dict[str, Any]:
    """``load_policy`` options from the ``--api-*`` flags, checked before anything is written; an error
    when they are given for an agent that is not an API agent (they would do nothing)."""
    given = {flag: value for flag, value in (("--api-timeout", timeout), ("--api-retries", retries),
                                              ("--api-max-wait", max_wait)) if value is not None}
    if not given:
        return {}
    if not agent.startswith("openai:"):
        raise SpatialRLError(f"{', '.join(given)} only apply to openai:MODEL@URL agents, not --agent {agent}")
    from spatialrl.agents.openai_api import check_client_options

    out = {"timeout": 60.0 if timeout is None else timeout, "max_retries": 5 if retries is None else retries,
           "max_wait": 60.0 if max_wait is None else max_wait}
    check_client_options(**out)
    return out


def local_options(agent: str, prefix_cache_mb: float | None) -> dict[str, Any]:
    """``load_policy`` options of a local model (``hf:`` / ``builtin:``) from their flags; an error when they
    are given for another agent (they would do nothing)."""
    if prefix_cache_mb is None:
        return {}
    if agent.partition(":")[0] not in ("hf", "builtin"):
        raise SpatialRLError(f"--prefix-cache-mb only applies to hf:PATH and builtin:NAME agents, not --agent {agent}")
    if prefix_cache_mb < 0:
        raise SpatialRLError(f"--prefix-cache-mb must be >= 0 (0 turns it off), got {prefix_cache_mb}")
    return {"prefix_cache_mb": prefix_cache_mb}


def tried_penalty_of(console: Any, agent: str, task: str, flag: str | None, temperature: float) -> float:
    """The tried-actions penalty of a run (``agents/tried_actions.py``): ``--tried-penalty`` when given,
    else the model's recorded ``eval.tried_penalty`` for greedy runs of its task, else 0 (off)."""
    from spatialrl.agents.tried_actions import parse_penalty, recorded_penalty
    from spatialrl.models.builtin import model_eval_settings

    if flag is not None:
        penalty = parse_penalty(flag)
        if penalty and agent.partition(":")[0] not in ("hf", "builtin"):
            raise SpatialRLError(f"--tried-penalty only applies to hf:PATH and builtin:NAME agents, not --agent {agent}")
        return penalty
    settings = model_eval_settings(agent)
    if settings is None or settings["task"] != task or "tried_penalty" not in settings:
        return 0.0
    if temperature:
        console.print(f"{agent}: its recorded tried-actions memory is a rule of greedy decoding; off at "
                      f"--temperature {temperature}")
        return 0.0
    penalty = recorded_penalty(settings)
    console.print(f"{agent}: its evaluation setting tried-penalty {settings['tried_penalty']} "
                  "(--tried-penalty 0 turns it off)")
    return penalty


def apply_model_settings(console: Any, agent: str, task: str, options: dict[str, Any], user_sets: dict[str, Any],
                         max_new_tokens: int | None) -> int:
    """Put a trained model's recorded evaluation settings (image size, memory mode, grid size, answer
    length) into ``options`` where the user set nothing; returns the generation budget to use."""
    from spatialrl.models.builtin import model_eval_settings

    settings = model_eval_settings(agent)
    if settings is None or settings["task"] != task:
        return 256 if max_new_tokens is None else max_new_tokens
    applied = {k: v for k, v in settings.get("options", {}).items() if k not in user_sets}
    options.update(applied)
    budget = max_new_tokens if max_new_tokens is not None else int(settings.get("max_new_tokens", 256))
    shown = [f"{k}={v}" for k, v in applied.items()]
    if max_new_tokens is None:
        shown.append(f"max-new-tokens {budget}")
    if shown:
        console.print(f"{agent}: its evaluation settings {', '.join(shown)} (override with --set KEY=VALUE / "
                      "--max-new-tokens)")
    return budget


def eval_command(
    task: Annotated[str, typer.Option(help="Task: tvr, virl or gp.")],
    agent: Annotated[str, typer.Option(help="expert | random | hf:PATH | openai:MODEL@URL | builtin:NAME")] = "expert",
    data: Annotated[str | None, typer.Option(help="Task data: TVR bench folder, V-IRL dataset folder.")] = None,
    split: Annotated[str | None, typer.Option(help="Split to evaluate (task-specific; default: the task's).")] = None,
    out: Annotated[Path | None, typer.Option(
        help="Run folder (default runs/<task>-<split>-<agent>, split = the task's default when not given, "
             "e.g. runs/tvr-eval-expert).")] = None,
    batch_size: Annotated[int, typer.Option(help="Episodes stepped together per generate call.")] = 8,
    limit: Annotated[int | None, typer.Option(help="Evaluate only the first N episodes (of each split).")] = None,
    temperature: Annotated[float, typer.Option(help="0 = greedy (the papers' default).")] = 0.0,
    top_p: Annotated[float, typer.Option()] = 1.0,
    max_new_tokens: Annotated[int | None, typer.Option(
        help="Generation budget per turn [default: the model's recorded setting, else 256].")] = None,
    seed: Annotated[int, typer.Option(help="Seed of sampling and of the random agent.")] = 0,
    label: Annotated[str | None, typer.Option(help="Name of this run in reports (default: the agent).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="Task option key=value (repeatable).")] = None,
    overwrite: Annotated[bool, typer.Option("--overwrite",
                                            help="Delete an existing run folder instead of resuming it.")] = False,
    report: Annotated[bool, typer.Option(help="Write report.md/report.html into the run folder.")] = True,
    retry_errors: Annotated[bool, typer.Option(
        help="On a re-run, run episodes that ended with an error again (--no-retry-errors keeps them).")] = True,
    api_timeout: Annotated[float | None, typer.Option(
        help="openai: agents: seconds one request attempt may take [default: 60].")] = None,
    api_retries: Annotated[int | None, typer.Option(
        help="openai: agents: retries after a 429, 5xx, timeout or dropped connection [default: 5].")] = None,
    api_max_wait: Annotated[float | None, typer.Option(
        help="openai: agents: longest Retry-After honoured, in seconds; a server asking for more fails "
             "that request at once [default: 60].")] = None,
    prefix_cache_mb: Annotated[float | None, typer.Option(
        help="hf:/builtin: agents: MB of KV cache kept between an episode's turns, so a turn prefills only "
             "what was added since (0 = off) [default: 1024 on CPU, off on GPU].")] = None,
    tried_penalty: Annotated[str | None, typer.Option(
        help="hf:/builtin: agents, greedy: a memory of what was tried (docs/evaluation.md). When the model's "
             "answer was already given at the same view in this episode, answer with the best of log p - "
             "PENALTY x times given there; inf = the most likely answer not given there yet; 0 = off "
             "[default: the model's recorded setting, else 0].")] = None,
) -> None:
    """Evaluate an agent on a task; resumable (re-running the same command skips finished episodes)."""
    from rich.console import Console

    from spatialrl.agents.base import SamplingParams
    from spatialrl.eval.evaluate import check_not_all_errored, evaluate
    from spatialrl.eval.report import print_metrics, write_report

    console = Console()
    try:
        options: dict[str, Any] = {}
        if data is not None:
            options["data"] = data
        if split is not None:
            options["split"] = split
        if limit is not None:
            options["limit"] = limit  # the suite applies it (per split where it has several)
        user_sets = parse_sets(set_)
        max_new_tokens = apply_model_settings(console, agent, task, options, user_sets, max_new_tokens)
        options.update(user_sets)
        policy_options = api_options(agent, api_timeout, api_retries, api_max_wait) | local_options(agent, prefix_cache_mb)
        if out is None:
            out = default_run_dir(task, agent, options)
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)
        penalty = tried_penalty_of(console, agent, task, tried_penalty, temperature)
        result, metrics = evaluate(task, agent, options, out, batch_size=batch_size, sampling=sampling,
                                   label=label, overwrite=overwrite, seed=seed, retry_errors=retry_errors,
                                   policy_options=policy_options, tried_penalty=penalty)
        again = [f"{n} {what}" for n, what in ((result.retried_errors, "errored before, run again"),
                                               (result.redone_incomplete, "with torn step records, run again")) if n]
        console.print(
            f"[green]{result.new_episodes} new episodes{' (' + ', '.join(again) + ')' if again else ''}, "
            f"{result.env_steps} env steps in {result.seconds:.1f}s → {out}[/green]"
        )
        print_metrics(console, {label or agent: metrics})
        if report:
            md, html = write_report([out], out)
            console.print(f"report: {md} · {html}")
        check_not_all_errored(result)
    except SpatialRLError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None


def report_command(
    runs: Annotated[list[Path], typer.Argument(help="Run folders to compare (one row group per run).")],
    out: Annotated[Path, typer.Option(help="Folder for report.md, report.html and assets.")] = Path("report"),
    episodes_per_run: Annotated[int, typer.Option(help="Episodes shown in the trajectory viewer per run.")] = 6,
) -> None:
    """Combine run folders (e.g. expert, random, a model) into one Markdown + HTML report. The first run of
    each task is the baseline: the others are compared with it episode by episode (solved by each, and a
    paired bootstrap interval of the difference in successes)."""
    from rich.console import Console

    from spatialrl.eval.report import write_report

    console = Console()
    try:
        md, html = write_report(runs, out, episodes_per_run=episodes_per_run, console=console)
        console.print(f"report: {md} · {html}")
    except SpatialRLError as e:
        console.print(f"[red]error:[/red] {e}")
        raise typer.Exit(2) from None
