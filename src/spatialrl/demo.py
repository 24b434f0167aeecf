"""`spatialrl demo`: the main job on built-in defaults, end to end, with nothing to download.

1. generate a small TVR benchmark (procedural houses) and two small cities in the V-IRL file format
   (the `metro` training city, and a visually different `hillside` city for visual OOD);
2. evaluate each agent on TVR (four categories), V-IRL (in-dist, rule-OOD, visual-OOD) and
   GeneralPoints (in-dist, rule-OOD, visual-OOD);
3. print the per-category tables and write one combined report.

Every step is resumable: re-running the command reuses the generated data and finished episodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

# The shipped model shown per task (AO: a CPU evaluates it much faster than the VA model).
BUILTIN_ROWS = {"tvr": "builtin:tvr-ao-sft", "virl": "builtin:virl-sft"}


def builtin_row(task: str, options: dict, episodes: int) -> tuple[str, dict, object, float]:
    """(agent, options, sampling, tried-actions penalty) of the task's built-in model at its recorded eval
    settings, on ``episodes`` episodes per category (TVR, spread round-robin) or per split (V-IRL)."""
    from spatialrl.agents.base import SamplingParams
    from spatialrl.agents.tried_actions import recorded_penalty
    from spatialrl.models.builtin import model_eval_settings

    agent = BUILTIN_ROWS[task]
    settings = model_eval_settings(agent) or {"options": {}, "max_new_tokens": 256}
    limit = 4 * episodes if task == "tvr" else episodes
    opts = {**options, **settings.get("options", {}), "limit": limit}
    return (agent, opts, SamplingParams(max_new_tokens=int(settings.get("max_new_tokens", 256))),
            recorded_penalty(settings))


def demo_command(
    out: Annotated[Path, typer.Option(help="Folder for data, runs and the report.")] = Path("runs/demo"),
    agents: Annotated[str, typer.Option(help="Comma-separated agents (expert, random, hf:PATH, builtin:NAME).")]
    = "expert,random",
    tvr_per_category: Annotated[int, typer.Option(help="TVR eval tasks per category.")] = 10,
    virl_episodes: Annotated[int, typer.Option(help="V-IRL episodes per split (the paper: 48/48/18).")] = 12,
    gp_episodes: Annotated[int, typer.Option(help="GeneralPoints episodes per split.")] = 20,
    city_routes: Annotated[int, typer.Option(help="Routes per generated city.")] = 24,
    seed: Annotated[int, typer.Option()] = 0,
    batch_size: Annotated[int, typer.Option()] = 8,
    builtin: Annotated[bool, typer.Option(
        help="Add the shipped built-in models' rows (tvr-ao-sft, virl-sft) at their recorded settings.")] = True,
    builtin_episodes: Annotated[int, typer.Option(
        help="Episodes of a built-in model per TVR category / V-IRL split (a CPU runs them slowly).")] = 1,
) -> None:
    """Generate data, evaluate agents on all three tasks, write runs/demo/report/report.html."""
    from rich.console import Console

    from spatialrl.eval.evaluate import evaluate
    from spatialrl.eval.report import print_metrics, write_report

    console = Console()
    data = out / "data"
    bench, metro, hillside = data / "tvr-bench", data / "city-metro", data / "city-hillside"
    if not (bench / "bench.json").exists():
        from spatialrl.envs.tvr.bench import BenchConfig, make_bench

        console.rule("TVR benchmark")
        cfg = BenchConfig.preset(
            tiny=True, seed=seed, sizes={"eval": 4 * tvr_per_category, "sft": 0, "rl": 0,
                                          "diag_rotate": 0, "diag_move": 0},
            scenes={"eval": max(2, tvr_per_category // 2), "sft": 0, "rl": 0})
        make_bench(bench, cfg, force=True)
    for style, path, s in (("metro", metro, seed), ("hillside", hillside, seed + 1)):
        if not (path / "city.json").exists():
            from spatialrl.envs.virl.city import make_city

            console.rule(f"{style} city")
            make_city(style, city_routes, s, path, tiny=True, force=True)

    jobs = [
        ("tvr", {"data": str(bench), "split": "eval"}),
        ("virl", {"data": str(metro), "visual_data": str(hillside), "split": "all", "grid_size": 448,
                  "episodes": virl_episodes}),
        ("gp", {"split": "in-dist,rule-ood,visual-ood", "episodes": gp_episodes}),
    ]
    runs = []
    for task, options in jobs:
        table = {}
        chosen = [(a.strip(), options, None, 0.0) for a in agents.split(",") if a.strip()]
        if builtin and task in BUILTIN_ROWS:
            chosen.append(builtin_row(task, options, builtin_episodes))
        for agent, opts, sampling, tried_penalty in chosen:
            console.rule(f"{task} · {agent}")
            name = agent.replace(":", "-").replace("/", "_").replace("@", "_")
            run_dir = out / "runs" / f"{task}-{name}"
            _, metrics = evaluate(task, agent, opts, run_dir, batch_size=batch_size, seed=seed, sampling=sampling,
                                  tried_penalty=tried_penalty)
            table[agent] = metrics
            runs.append(run_dir)
        print_metrics(console, table)
    md, html = write_report(runs, out / "report")
    console.print(f"[bold green]report:[/bold green] {html}  (Markdown: {md})")
