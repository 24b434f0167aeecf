"""Gather a train_builtin.sh output folder into results.json and a Markdown table (results.md).

    python scripts/gpu/collect_results.py OUT

Per shipped model: parameters, weight size on disk, training summary (updates, last train loss/token
accuracy, in-training eval); per `spatialrl eval` run: every category's success rate and the task's
main secondary metric (SPL for TVR, per-step accuracy for V-IRL).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

KEY_METRICS = ("success_rate", "spl", "per_step_accuracy", "episodes", "n")


def _read(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}


def collect(out: Path) -> dict:
    models = {}
    for folder in sorted((out / "weights").glob("*")):
        meta = _read(folder / "spatialrl_model.json")
        size = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
        summary = _read(out / "runs" / folder.name / "summary.json")
        models[folder.name] = {
            "parameters": meta.get("parameters"), "size_mb": round(size / 2**20, 2),
            "updates": summary.get("step"), "train_seconds": summary.get("seconds"),
            "train": summary.get("train", {}), "in_training_eval": summary.get("final", {}),
            "dataset": {k: meta.get("dataset", {}).get(k) for k in ("task", "samples", "episodes", "options")},
        }
    evals = {}
    for run in sorted((out / "eval").glob("*")):
        metrics = _read(run / "metrics.json")
        if metrics:
            evals[run.name] = {cat: {k: v for k, v in row.items() if k in KEY_METRICS} for cat, row in metrics.items()}
    timeline = (out / "timeline.txt").read_text().splitlines() if (out / "timeline.txt").exists() else []
    return {"models": models, "eval": evals, "timeline": timeline}


def markdown(results: dict) -> str:
    lines = ["| model | params | size (MB) | updates | train loss | token acc. |", "|---|---|---|---|---|---|"]
    for name, m in results["models"].items():
        t = m["train"]
        lines.append(f"| {name} | {m['parameters']} | {m['size_mb']} | {m['updates']} | "
                     f"{t.get('train/loss', float('nan')):.4f} | {t.get('train/token_accuracy', float('nan')):.3f} |")
    lines += ["", "| eval run | category | success | SPL / per-step acc. | episodes |", "|---|---|---|---|---|"]
    for run, cats in results["eval"].items():
        for cat, row in cats.items():
            second = row.get("spl", row.get("per_step_accuracy"))
            second = "" if second is None else f"{second:.3f}"
            lines.append(f"| {run} | {cat} | {row.get('success_rate', float('nan')):.3f} | {second} | "
                         f"{row.get('episodes', row.get('n', ''))} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    out = Path(sys.argv[1])
    results = collect(out)
    (out / "results.json").write_text(json.dumps(results, indent=2) + "\n")
    (out / "results.md").write_text(markdown(results))
    print(markdown(results))


if __name__ == "__main__":
    main()
