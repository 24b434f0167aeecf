"""Training curves (PNG) and comparison tables (Markdown) for the reproduction write-ups in ``docs/``.

    python -m spatialrl.train.curves curves --run PPO=runs/ppo-virl --run SFT=runs/sft-virl \\
        --key rollout/step_reward_mean --key episodes/success --out docs/figures/virl_ppo.png
    python -m spatialrl.train.curves table --eval "SFT init=runs/eval-sft" --eval "PPO=runs/eval-ppo" \\
        --metric success_rate --out docs/tables/virl.md

``curves`` reads each run's ``metrics.jsonl`` (one panel per key, x = update, or wall-clock minutes with
``--x time`` — the fair axis when an SFT run's optimiser steps sit beside an RL run's updates; a run
missing a key is skipped in that panel). ``table`` reads each eval run's ``metrics.json`` (``{category: {metric: value}}``,
what ``spatialrl eval`` writes) and lays out one row per run, one column per category.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from spatialrl.errors import DataError
from spatialrl.io import atomic_write_text, read_jsonl

X_AXES = {"step": "update", "time": "minutes since start"}


def load_curves(run_dir: str | Path, keys: list[str], x: str = "step") -> dict[str, tuple[list[float], list[float]]]:
    """``{key: (xs, values)}`` from a run's ``metrics.jsonl``; ``x`` is ``step`` (update) or ``time``
    (minutes, from each record's ``time`` in seconds). A resumed run's re-logged updates keep their last value."""
    if x not in X_AXES:
        raise DataError(f"x axis must be one of {', '.join(X_AXES)}, got {x!r}")
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise DataError(f"{path}: missing; not a training run folder")
    by_key: dict[str, dict[int, tuple[float, float]]] = {k: {} for k in keys}
    for n, record in enumerate(read_jsonl(path), 1):
        if x == "time" and "time" not in record:
            raise DataError(f"{path}: line {n} has no 'time' field (needed for --x time)")
        for k in keys:
            v = record.get(k)
            if isinstance(v, int | float) and not isinstance(v, bool):
                at = float(record["time"]) / 60 if x == "time" else float(record["step"])
                by_key[k][int(record["step"])] = (at, float(v))
    out = {}
    for k, d in by_key.items():
        steps = sorted(d)
        xs = [d[s][0] for s in steps]
        out[k] = ([int(v) for v in xs] if x == "step" else xs, [d[s][1] for s in steps])
    return out


def plot_curves(runs: dict[str, str | Path], keys: list[str], out: str | Path, title: str | None = None,
                x: str = "step") -> Path:
    """One panel per metric key, one line per run, against ``x`` (see ``load_curves``); written as a PNG."""

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if not runs or not keys:
        raise DataError("plot_curves needs at least one run and one metric key")
    curves = {label: load_curves(path, keys, x) for label, path in runs.items()}
    fig, axes = plt.subplots(1, len(keys), figsize=(4.2 * len(keys), 3.2), squeeze=False)
    for ax, key in zip(axes[0], keys, strict=True):
        for label, data in curves.items():
            xs, ys = data[key]
            if xs:
                ax.plot(xs, ys, marker="o" if len(xs) < 30 else None, markersize=3, label=label)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel(X_AXES[x])
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    from spatialrl.io import save_png

    return save_png(fig, out)


def comparison_table(evals: dict[str, str | Path], metric: str = "success_rate", digits: int = 1,
                     percent: bool = True) -> str:
    """Markdown: one row per eval run, one column per category (``overall`` last) of ``metric``."""
    rows: dict[str, dict[str, Any]] = {}
    for label, run in evals.items():
        path = Path(run) / "metrics.json"
        if not path.is_file():
            raise DataError(f"{path}: missing; not an eval run folder")
        rows[label] = json.loads(path.read_text(encoding="utf-8"))
    categories = sorted({c for r in rows.values() for c in r if c != "overall"})
    if any("overall" in r for r in rows.values()):
        categories.append("overall")
    lines = ["| run | " + " | ".join(categories) + " |", "|---|" + "---:|" * len(categories)]
    for label, summary in rows.items():
        cells = []
        for c in categories:
            v = summary.get(c, {}).get(metric)
            if isinstance(v, int | float):
                cells.append(f"{100 * v:.{digits}f}" if percent else f"{v:.{digits}f}")
            else:
                cells.append("–")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _pairs(items: list[str], flag: str) -> dict[str, str]:
    out = {}
    for item in items:
        if "=" not in item:
            raise DataError(f"{flag} {item!r}: expected LABEL=PATH")
        label, path = item.split("=", 1)
        out[label] = path
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("curves", help="training curves → PNG")
    c.add_argument("--run", action="append", required=True, help="LABEL=RUN_DIR (repeatable)")
    c.add_argument("--key", action="append", required=True, help="metric key (repeatable)")
    c.add_argument("--title", default=None)
    c.add_argument("--x", default="step", choices=sorted(X_AXES), help="x axis: update (step) or minutes (time)")
    c.add_argument("--out", required=True)
    t = sub.add_parser("table", help="eval comparison → Markdown")
    t.add_argument("--eval", action="append", required=True, help="LABEL=EVAL_RUN_DIR (repeatable)")
    t.add_argument("--metric", default="success_rate")
    t.add_argument("--raw", action="store_true", help="print values as they are (not ×100)")
    t.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    if args.cmd == "curves":
        print(plot_curves(_pairs(args.run, "--run"), args.key, args.out, args.title, args.x))
    else:
        text = comparison_table(_pairs(args.eval, "--eval"), args.metric, percent=not args.raw)
        if args.out:
            atomic_write_text(args.out, text)
        print(text, end="")


if __name__ == "__main__":
    main()
