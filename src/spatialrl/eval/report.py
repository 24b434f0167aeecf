"""Reports people can read: a Markdown + HTML page per set of runs, with tables, plots and episodes.

Generic over tasks: metrics come from each task suite's ``summarize``; the per-episode viewer (TVR floor
plan + frames, V-IRL grids + verifier messages, ...) from the suite's ``render_episode`` hook.
"""

from __future__ import annotations

import datetime as dt
import html as html_lib
from collections import Counter
from pathlib import Path
from typing import Any

from spatialrl import __version__
from spatialrl.envs.registry import get_suite
from spatialrl.eval.runs import RunRecords, load_run, summarize_run
from spatialrl.io import atomic_write_text

Metrics = dict[str, dict[str, float]]


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, float):
        # counts (episodes, steps) come back as floats from averaging code; show them as integers
        return str(int(value)) if value.is_integer() and abs(value) >= 2 else f"{value:.3f}"
    return str(value)


def _categories(metrics: Metrics) -> list[str]:
    cats = [c for c in metrics if c != "overall"]
    return (["overall"] if "overall" in metrics else []) + sorted(cats)


def _metric_names(metrics: Metrics) -> list[str]:
    """Names of the scalar metrics (list-valued entries such as ``error_messages`` are shown apart)."""
    names: list[str] = []
    for row in metrics.values():
        for k, v in row.items():
            if k not in names and not isinstance(v, list | dict):
                names.append(k)
    return names


def error_lines(metrics: Metrics) -> list[str]:
    """Sentences about the errored episodes of a run's metrics (from ``summarize_run``); [] when none."""
    overall = metrics.get("overall", {})
    n = int(overall.get("errors") or 0)
    if not n:
        return []
    per_cat = ", ".join(f"{c} {int(metrics[c].get('errors') or 0)}" for c in _categories(metrics)
                        if c != "overall" and metrics[c].get("errors"))
    lines = [f"{n} episode(s) ended with an error and are left out of the metrics"
             + (f" (per category: {per_cat})" if per_cat else "")
             + "; re-running the same command runs them again."]
    lines += [f"first errors: {m}" for m in overall.get("error_messages", [])]
    return lines


def print_errors(console: Any, label: str, metrics: Metrics) -> None:
    """Print a run's error count and first messages (nothing when no episode errored)."""
    from rich.markup import escape

    for i, line in enumerate(error_lines(metrics)):
        console.print(f"[red]{escape(label)}: {escape(line)}[/red]" if i == 0 else f"  {escape(line)}")


def print_metrics(console: Any, table: dict[str, Metrics], max_rows: int = 14) -> None:
    """Print one rich table per run label: metrics as rows, categories (overall first) as columns."""
    from rich.table import Table

    for label, metrics in table.items():
        cats = _categories(metrics)
        t = Table(title=label)
        t.add_column("metric")
        for c in cats:
            t.add_column(c, justify="right")
        names = _metric_names(metrics)
        shown = names[:max_rows] + [n for n in ("errors",) if n in names[max_rows:]]
        for n in shown:
            t.add_row(n, *[_fmt(metrics[c].get(n, "")) for c in cats])
        console.print(t)
        print_errors(console, label, metrics)


def _md_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html_lib.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html_lib.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _success_key(metrics: Metrics) -> str | None:
    for key in ("success_rate", "SR", "success"):
        if any(key in row for row in metrics.values()):
            return key
    return None


def _plot_success(task: str, runs: list[tuple[str, Metrics]], path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    key = _success_key(runs[0][1]) if runs else None
    if key is None:
        return False
    cats = _categories(runs[0][1])
    x = np.arange(len(cats))
    width = 0.8 / len(runs)
    fig, ax = plt.subplots(figsize=(max(5, 1.3 * len(cats) + 2), 3.2))
    for i, (label, m) in enumerate(runs):
        ax.bar(x + i * width, [m.get(c, {}).get(key, 0.0) for c in cats], width, label=label)
    ax.set_xticks(x + width * (len(runs) - 1) / 2, cats, rotation=20)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel(key)
    ax.set_title(f"{task}: {key} per category")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def action_distribution(steps: list[dict[str, Any]]) -> Counter:
    """Counts of the parsed ``action`` field of step records (``None`` = unparsable answer)."""
    return Counter(str(s.get("action")) for s in steps if "action" in s)


def _plot_actions(task: str, runs: list[RunRecords], path: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dists = [(r.label, action_distribution(r.steps)) for r in runs]
    names = sorted({a for _, d in dists for a in d})
    if not names:
        return False
    fig, ax = plt.subplots(figsize=(7, 0.5 * len(dists) + 1.6))
    cmap = plt.get_cmap("tab20")
    for row, (_label, d) in enumerate(dists):
        total = sum(d.values()) or 1
        left = 0.0
        for j, name in enumerate(names):
            share = d.get(name, 0) / total
            ax.barh(row, share, left=left, color=cmap(j % 20), label=name if row == 0 else None)
            left += share
    ax.set_yticks(range(len(dists)), [label for label, _ in dists])
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of steps")
    ax.set_title(f"{task}: action distribution")
    ax.legend(fontsize=7, ncol=min(5, len(names)), loc="upper center", bbox_to_anchor=(0.5, -0.35))
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return True


def _pick_episodes(run: RunRecords, n: int) -> list[dict[str, Any]]:
    """Up to n episodes, half successes and half failures where both exist, in file order."""
    wins = [e for e in run.episodes if e.get("success")]
    fails = [e for e in run.episodes if not e.get("success")]
    k = min(len(wins), max(n // 2, n - len(fails)))
    return (wins[:k] + fails[: n - k])[:n]


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.2em}th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f2f2f2}td{text-align:right}td:first-child{text-align:left}
details{margin:0.4em 0;border:1px solid #ddd;border-radius:4px;padding:0.4em 0.8em}
summary{cursor:pointer;font-weight:600}img{max-width:100%}.ok{color:#17803d}.bad{color:#b42318}
"""


def write_report(run_dirs: list[str | Path], out_dir: str | Path, episodes_per_run: int = 6) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` (+ ``assets/``) comparing ``run_dirs``."""
    out = Path(out_dir)
    assets = out / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    runs = [load_run(p) for p in run_dirs]
    by_task: dict[str, list[RunRecords]] = {}
    for r in runs:
        by_task.setdefault(r.config["task"], []).append(r)

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    md = [f"# spatialrl evaluation report\n\nGenerated {now} by spatialrl {__version__}.\n"]
    body = [f"<h1>spatialrl evaluation report</h1><p>Generated {now} by spatialrl {__version__}.</p>"]
    for task, task_runs in by_task.items():
        suite = get_suite(task)
        metrics = [(r.label, summarize_run(suite, r.episodes)) for r in task_runs]
        md.append(f"## {task} — {suite.description}\n")
        body.append(f"<h2>{html_lib.escape(task)} — {html_lib.escape(suite.description)}</h2>")
        key = _success_key(metrics[0][1])
        if key is not None:
            cats = _categories(metrics[0][1])
            rows = [[label] + [_fmt(m.get(c, {}).get(key, "")) for c in cats] for label, m in metrics]
            md += [f"### {key} per category\n", _md_table(["run"] + cats, rows), ""]
            body += [f"<h3>{key} per category</h3>", _html_table(["run"] + cats, rows)]
        for run, (label, m) in zip(task_runs, metrics, strict=True):
            names = _metric_names(m)
            cats = _categories(m)
            rows = [[n] + [_fmt(m[c].get(n, "")) for c in cats] for n in names]
            where = f"{run.path} · options {run.config.get('options', {})}"
            md += [f"### {label}: all metrics\n", f"Run: `{where}`\n", _md_table(["metric"] + cats, rows), ""]
            body += [f"<h3>{html_lib.escape(label)}: all metrics</h3><p><code>{html_lib.escape(where)}</code></p>",
                     _html_table(["metric"] + cats, rows)]
            errs = error_lines(m)
            if errs:
                md += [f"**Errors ({label}):** " + errs[0], ""] + [f"- `{e}`" for e in errs[1:]] + [""]
                body += [f'<p class="bad"><b>Errors ({html_lib.escape(label)}):</b> {html_lib.escape(errs[0])}</p>'
                         "<ul>" + "".join(f"<li><code>{html_lib.escape(e)}</code></li>" for e in errs[1:]) + "</ul>"]
        for name, plot in (("success", _plot_success), ("actions", _plot_actions)):
            png = assets / f"{task}_{name}.png"
            made = plot(task, metrics, png) if name == "success" else plot(task, task_runs, png)
            if made:
                md.append(f"![{task} {name}](assets/{png.name})\n")
                body.append(f'<img src="assets/{png.name}" alt="{task} {name}">')
        if suite.render_episode is not None:
            body.append("<h3>Episodes</h3>")
            for run in task_runs:
                steps_by_ep: dict[str, list[dict[str, Any]]] = {}
                for s in run.steps:
                    steps_by_ep.setdefault(s["episode_id"], []).append(s)
                run_assets = assets / f"{task}_{run.path.name}"
                run_assets.mkdir(parents=True, exist_ok=True)
                for ep in _pick_episodes(run, episodes_per_run):
                    ok = "ok" if ep.get("success") and not ep.get("error") else "bad"
                    verdict = "error" if ep.get("error") else "success" if ep.get("success") else "failure"
                    fragment = suite.render_episode(ep, steps_by_ep.get(ep["episode_id"], []),
                                                    run.config.get("options", {}), run_assets)
                    fragment = fragment.replace('src="', f'src="assets/{run_assets.name}/')
                    body.append(
                        f'<details><summary>{html_lib.escape(run.label)} · {html_lib.escape(ep["episode_id"])} · '
                        f'<span class="{ok}">{verdict}</span> · '
                        f'{ep.get("n_steps")} steps</summary>{fragment}</details>'
                    )
    md_path, html_path = out / "report.md", out / "report.html"
    atomic_write_text(md_path, "\n".join(md) + "\n")
    page = f"<!doctype html><html><head><meta charset='utf-8'><title>spatialrl report</title><style>{_CSS}</style></head>"
    atomic_write_text(html_path, page + "<body>" + "\n".join(body) + "</body></html>\n")
    return md_path, html_path
