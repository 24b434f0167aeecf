"""Reports people can read: a Markdown + HTML page per set of runs, with tables, plots and episodes.

Generic over tasks: metrics come from each task suite's ``summarize``; the per-episode viewer (TVR floor
plan + frames, V-IRL grids + verifier messages, ...) from the suite's ``render_episode`` hook.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from pathlib import Path
from typing import Any

from spatialrl import __version__
from spatialrl.envs.registry import get_suite
from spatialrl.eval.paired import paired_comparison, successes
from spatialrl.eval.runs import RunRecords, load_run, summarize_run
from spatialrl.io import atomic_write_text

Metrics = dict[str, dict[str, float]]

# What every metric a suite reports means (shown under the tables of a report). Exact names first, then
# prefixes ending in "*"; the task docs (docs/tvr.md, docs/virl.md, docs/gp.md) have the derivations.
GLOSSARY: dict[str, str] = {
    "n": "episodes in the row (errored episodes excluded)",
    "episodes": "episodes in the row (errored episodes excluded)",
    "errors": "episodes ended by a policy error (server down, out of memory, ...); left out of every other metric",
    "success_rate": "successful episodes / episodes",
    "spl": "success weighted by path length: mean of success × optimal / max(optimal, steps taken), "
           "optimal = the oracle's shortest action count (TVR)",
    "mean_steps": "actions per episode, Stop and unparsable answers included (TVR)",
    "stop_rate": "episodes that ended with Stop / episodes (TVR)",
    "fstop_given_stop": "false stops: Stops at a wrong pose / Stops; absent when nothing stopped (TVR)",
    "fstop_all": "false stops: Stops at a wrong pose / episodes (TVR)",
    "final_pos_error_m": "mean distance in metres between the final and the target position, floor plane (TVR)",
    "final_yaw_error_deg": "mean final heading error in degrees, circular (TVR)",
    "final_pitch_error_deg": "mean final camera tilt error in degrees (TVR)",
    "invalid_per_episode": "unparsable or illegal answers per episode (TVR)",
    "distinct_cells": "grid cells visited per episode, start included (TVR)",
    "revisits": "moves per episode that land on a pose visited before (TVR)",
    "oracle_agreement": "steps whose action equals the oracle's at that state / steps (TVR)",
    "repeat_rate": "steps that repeat the previous action / steps after an action (TVR); far above "
                   "oracle_repeat_rate = the policy copies its history",
    "oracle_repeat_rate": "how often the oracle's action at those states equals the previous action (TVR)",
    "response_tokens_per_step": "generated tokens / steps",
    "per_step_accuracy": "steps whose action was correct (reward +1) / steps (V-IRL)",
    "retries": "attempts after a wrong answer at the same point, the verifier's retry turn (V-IRL)",
    "retry_accuracy": "retries answered right / retries (V-IRL)",
    "reached_destination": "episodes that reached the route's last point (V-IRL)",
    "destination_accuracy": "first answers there that were the stop() / episodes that reached it (V-IRL)",
    "steps": "env steps in the row, all episodes together",
    "mean_return": "mean episode return (sum of rewards)",
    "mean_progress": "mean share of the route's rail completed; 1 for a success (V-IRL)",
    "recognition_accuracy": "answers whose card list equals the dealt cards / answers (GeneralPoints)",
    "first_recognition_accuracy": "recognition accuracy of each episode's first answer (GeneralPoints)",
    "mean_attempts": "answers per episode, retries included (GeneralPoints)",
    "share_*": "share of all steps whose action is of that kind: translation (move), rotation (turn), "
               "look (tilt), stop, invalid (TVR)",
    "fstop_*": "false stops: Stop issued at a pose that is not the target (TVR)",
    "rate/*": "answers with that verifier outcome / answers; the six outcomes add up to 1 (GeneralPoints)",
}


def describe_metric(name: str) -> str | None:
    """The glossary entry of a metric name (exact name first, then the longest matching ``prefix*``)."""
    if name in GLOSSARY:
        return GLOSSARY[name]
    prefixes = [k for k in GLOSSARY if k.endswith("*") and name.startswith(k[:-1])]
    return GLOSSARY[max(prefixes, key=len)] if prefixes else None


def _glossary_rows(names: list[str]) -> list[list[str]]:
    return [[n, describe_metric(n) or ""] for n in names]


def _fmt(value: Any, decimals: int = 3) -> str:
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.{decimals}f}"
    return str(value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and float(value).is_integer()


def fmt_row(values: list[Any], name: str = "") -> list[str]:
    """One metric's cells in one format: all integers when every value is a whole number and the metric
    is a count (n, episodes, steps, errors), else every number with 3 decimals (rates, means)."""
    counts = {"n", "episodes", "steps", "errors"}
    whole = all(_is_count(v) for v in values if v != "")
    if whole and (name in counts or all(isinstance(v, int) for v in values if v != "")):
        return [_fmt(int(v)) if v != "" else "" for v in values]
    return [_fmt(float(v)) if isinstance(v, int | float) and not isinstance(v, bool) else _fmt(v) for v in values]


def unique_labels(runs: list[RunRecords]) -> list[str]:
    """Run labels for tables, with repeated labels told apart by their folder (``expert (runs/a)``)."""
    labels = [r.label for r in runs]
    seen = Counter(labels)
    out = []
    for r, label in zip(runs, labels, strict=True):
        if seen[label] == 1:
            out.append(label)
            continue
        names = [x.path.name for x, lab in zip(runs, labels, strict=True) if lab == label]
        where = r.path.name if names.count(r.path.name) == 1 else str(r.path)
        out.append(f"{label} ({where})")
    for i, label in enumerate(out):  # still equal (same folder given twice): number them
        if out.count(label) > 1:
            out[i] = f"{label} #{out[:i + 1].count(label)}"
    return out


def options_rows(options: dict[str, Any]) -> list[list[str]]:
    """A run's task options as ``[key, value]`` rows, sorted by key."""
    return [[str(k), "" if v is None else str(v)] for k, v in sorted(options.items())]


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


def _column_chunks(first: list[str], columns: list[list[str]], width: int) -> list[list[int]]:
    """Split column indices into groups whose rich table (first column repeated) fits ``width``."""
    def w(cells: list[str]) -> int:
        return max(len(c) for c in cells) + 3  # padding and one border

    budget = width - w(first) - 1
    chunks: list[list[int]] = [[]]
    used = 0
    for i, col in enumerate(columns):
        if chunks[-1] and used + w(col) > budget:
            chunks.append([])
            used = 0
        chunks[-1].append(i)
        used += w(col)
    return chunks


def print_metrics(console: Any, table: dict[str, Metrics], max_rows: int = 14, width: int = 80) -> None:
    """Print rich tables per run label: metrics as rows, categories (overall first) as columns. A table
    wider than ``width`` columns is split into several (the metric column repeated), so none wraps."""
    from rich.table import Table

    for label, metrics in table.items():
        cats = _categories(metrics)
        names = _metric_names(metrics)
        shown = names[:max_rows] + [n for n in ("errors",) if n in names[max_rows:]]
        cells = {n: fmt_row([metrics[c].get(n, "") for c in cats], n) for n in shown}
        columns = [[c] + [cells[n][j] for n in shown] for j, c in enumerate(cats)]
        chunks = _column_chunks(["metric", *shown], columns, width)
        for k, chunk in enumerate(chunks):
            title = label if len(chunks) == 1 else f"{label} ({k + 1}/{len(chunks)})"
            t = Table(title=title)
            t.add_column("metric")
            for j in chunk:
                t.add_column(cats[j], justify="right")
            for n in shown:
                t.add_row(n, *[cells[n][j] for j in chunk])
            console.print(t)
        print_errors(console, label, metrics)


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
    """About n episodes spread over every category (at least one per category, so ``n`` grows to the
    number of categories): round-robin over the categories; within one, a success and a failure in turn
    (file order), errored episodes last. Shown grouped by category."""
    by_cat: dict[str, list[dict[str, Any]]] = {}
    for e in run.episodes:
        by_cat.setdefault(str(e.get("category")), []).append(e)
    queues = []
    for cat in sorted(by_cat):
        eps = by_cat[cat]
        wins = [e for e in eps if e.get("success") and not e.get("error")]
        fails = [e for e in eps if not e.get("success") and not e.get("error")]
        errs = [e for e in eps if e.get("error")]
        mixed = [e for pair in zip(wins, fails, strict=False) for e in pair]
        k = min(len(wins), len(fails))
        queues.append(mixed + wins[k:] + fails[k:] + errs)
    picked: list[dict[str, Any]] = []
    want = max(n, len(queues))
    while len(picked) < want and any(queues):
        for q in queues:
            if q and len(picked) < want:
                picked.append(q.pop(0))
    order = {id(e): i for i, e in enumerate(run.episodes)}
    return sorted(picked, key=lambda e: (str(e.get("category")), order[id(e)]))


_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1400px;color:#222}
table{border-collapse:collapse;margin:0.6em 0 1.2em}th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f2f2f2}td{text-align:right}td:first-child{text-align:left}
details{margin:0.4em 0;border:1px solid #ddd;border-radius:4px;padding:0.4em 0.8em}
summary{cursor:pointer;font-weight:600}img{max-width:100%}.ok{color:#17803d}.bad{color:#b42318}
"""


def _template(name: str, autoescape: bool) -> Any:
    """A report template (``eval/templates/``); HTML autoescapes every value, episode fragments are
    marked safe (the task's renderer escapes its own text)."""
    import jinja2

    env = jinja2.Environment(loader=jinja2.PackageLoader("spatialrl.eval", "templates"), autoescape=autoescape,
                             trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
                             undefined=jinja2.StrictUndefined)
    return env.get_template(name)


def _episode_views(suite: Any, task: str, task_runs: list[RunRecords], labels: dict[int, str], assets: Path,
                   episodes_per_run: int) -> list[dict[str, Any]]:
    """The episode viewer's entries: each picked episode's summary line and the task's HTML fragment."""
    views = []
    for run in task_runs:
        steps_by_ep: dict[str, list[dict[str, Any]]] = {}
        for s in run.steps:
            steps_by_ep.setdefault(s["episode_id"], []).append(s)
        run_assets = assets / f"{task}_{run.path.name}_{task_runs.index(run)}"
        run_assets.mkdir(parents=True, exist_ok=True)
        for ep in _pick_episodes(run, episodes_per_run):
            fragment = suite.render_episode(ep, steps_by_ep.get(ep["episode_id"], []), run.config.get("options", {}),
                                            run_assets)
            views.append({"label": labels[id(run)], "category": str(ep.get("category")), "id": ep["episode_id"],
                          "ok": "ok" if ep.get("success") and not ep.get("error") else "bad",
                          "verdict": "error" if ep.get("error") else "success" if ep.get("success") else "failure",
                          "n_steps": ep.get("n_steps"),
                          "fragment": fragment.replace('src="', f'src="assets/{run_assets.name}/')})
    return views


def paired_rows(runs: list[RunRecords], labels: list[str]) -> dict[str, Any] | None:
    """Each later run against the first on the episodes they share (``eval/paired.py``), or None."""
    if len(runs) < 2:
        return None
    base = successes(runs[0].episodes)
    rows = []
    for run, label in zip(runs[1:], labels[1:], strict=True):
        p = paired_comparison(successes(run.episodes), base)
        if p is not None:
            rows.append([label, str(p.episodes), str(p.a), str(p.b), str(p.only_a), str(p.only_b), str(p.both),
                         f"{p.a - p.b:+d} [{p.low:+.0f}, {p.high:+.0f}]"])
    if not rows:
        return None
    return {"baseline": labels[0], "header": ["run", "episodes", "solved", "baseline solved", "only this run",
                                              "only the baseline", "both", "difference [95% interval]"],
            "rows": rows}


def print_paired(console: Any, task: str, paired: dict[str, Any]) -> None:
    """One task's paired table of ``write_report`` (``paired_rows``) on the console."""
    from rich.table import Table

    t = Table(title=f"{task}: paired against the baseline, {paired['baseline']} (the same episodes)")
    for h in ("run", "episodes", "solved", "baseline", "only run", "only base", "both", "difference, 95%"):
        t.add_column(h, overflow="fold")
    for row in paired["rows"]:
        t.add_row(*row)
    console.print(t)


def write_report(runs: list[str | Path | RunRecords], out_dir: str | Path,
                 episodes_per_run: int = 6, console: Any = None) -> tuple[Path, Path]:
    """Write ``report.md`` and ``report.html`` (+ ``assets/``) comparing ``runs``: run folders, or runs
    already loaded with ``load_run``. With a rich ``console``, each task's metric and paired tables are
    printed there too, from the same summaries (a long run's records are worth reading and summarising
    only once)."""
    out = Path(out_dir)
    assets = out / "assets"
    assets.mkdir(parents=True, exist_ok=True)
    runs = [p if isinstance(p, RunRecords) else load_run(p) for p in runs]
    labels = dict(zip(map(id, runs), unique_labels(runs), strict=True))
    by_task: dict[str, list[RunRecords]] = {}
    for r in runs:
        by_task.setdefault(r.config["task"], []).append(r)

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    tasks = []
    for task, task_runs in by_task.items():
        suite = get_suite(task)
        metrics = [(labels[id(r)], summarize_run(suite, r.episodes)) for r in task_runs]
        section: dict[str, Any] = {"task": task, "description": suite.description, "success": None, "runs": [],
                                   "images": [], "episodes": None}
        key = _success_key(metrics[0][1])
        if key is not None:
            cats = _categories(metrics[0][1])
            section["success"] = {"key": key, "header": ["run"] + cats,
                                  "rows": [[label] + fmt_row([m.get(c, {}).get(key, "") for c in cats], key)
                                           for label, m in metrics]}
        section["paired"] = paired_rows(task_runs, [label for label, _ in metrics])
        if console is not None:
            print_metrics(console, dict(metrics))
            if section["paired"] is not None:
                print_paired(console, task, section["paired"])
        for run, (label, m) in zip(task_runs, metrics, strict=True):
            cats = _categories(m)
            section["runs"].append({
                "label": label, "path": str(run.path), "agent": str(run.config.get("agent")),
                "header": ["metric"] + cats,
                "rows": [[n] + fmt_row([m[c].get(n, "") for c in cats], n) for n in _metric_names(m)],
                "options": options_rows(run.config.get("options", {})), "errors": error_lines(m)})
        seen_names: list[str] = []
        for _, m in metrics:
            seen_names += [n for n in _metric_names(m) if n not in seen_names]
        section["glossary"] = _glossary_rows(seen_names)
        for name, plot in (("success", _plot_success), ("actions", _plot_actions)):
            png = assets / f"{task}_{name}.png"
            if plot(task, metrics, png) if name == "success" else plot(task, task_runs, png):
                section["images"].append({"src": f"assets/{png.name}", "alt": f"{task} {name}"})
        if suite.render_episode is not None:
            section["episodes"] = _episode_views(suite, task, task_runs, labels, assets, episodes_per_run)
        tasks.append(section)
    md_path, html_path = out / "report.md", out / "report.html"
    context = {"now": now, "version": __version__, "tasks": tasks, "css": _CSS}
    atomic_write_text(md_path, _template("report.md.jinja", autoescape=False).render(context))
    atomic_write_text(html_path, _template("report.html.jinja", autoescape=True).render(context))
    return md_path, html_path
