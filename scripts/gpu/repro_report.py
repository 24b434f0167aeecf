"""Turn an unpacked reproduce_rl.sh result (repro.tar.gz) into a docs folder: the small files
(metrics.jsonl, config.json, eval metrics.json, timeline), training curves (PNG) and tables (Markdown).

    python scripts/gpu/repro_report.py RESULT_DIR docs/results/rl-repro-NAME --title "..."
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

from spatialrl.train.curves import comparison_table, plot_curves

ARMS = {  # eval run label → (task, role in the comparison)
    "virl-sft": "V-IRL: SFT init (builtin:virl-sft)", "virl-sft-more": "V-IRL: + continued SFT",
    "virl-ppo": "V-IRL: + PPO", "tvr-va-sft": "TVR: VA-SFT (builtin:tvr-va-sft)",
    "tvr-va-grpo-multi": "TVR: VA-SFT + multi-turn GRPO", "tvr-ao-sft": "TVR: AO-SFT (builtin:tvr-ao-sft)",
    "tvr-ao-grpo-single": "TVR: AO-SFT + single-turn GRPO",
}
# name → (runs, keys, x axis). Runs of different trainers share a panel against wall-clock minutes:
# an SFT optimiser step and an RL update are not comparable units.
CURVES = {
    "virl": (["virl-ppo", "virl-sft-more"], ["eval/in-dist/per_step_accuracy", "eval/visual-ood/per_step_accuracy",
                                             "eval/rule-ood/per_step_accuracy"], "time"),
    "virl_ppo": (["virl-ppo"], ["rollout/step_reward_mean", "episodes/success", "losses/approx_kl", "losses/clipfrac"],
                 "step"),
    "tvr_grpo": (["tvr-va-grpo-multi", "tvr-ao-grpo-single"], ["episodes/return_mean", "losses/kl",
                                                               "diag/action_match"], "time"),
}


TVR_BEHAVIOUR = ("final_pos_error_m", "final_yaw_error_deg", "stop_rate", "mean_steps", "revisits",
                 "share_translation", "share_rotation")


def behaviour_table(evals: dict[str, Path]) -> str:
    """TVR's secondary metrics, overall: where the agent ended and how it moved (success is rare)."""
    lines = ["| run | episodes | " + " | ".join(TVR_BEHAVIOUR) + " |", "|---|---:|" + "---:|" * len(TVR_BEHAVIOUR)]
    for label, run in evals.items():
        row = json.loads((run / "metrics.json").read_text())["overall"]
        cells = [f"{row[k]:.2f}" if isinstance(row.get(k), int | float) else "–" for k in TVR_BEHAVIOUR]
        lines.append(f"| {label} | {row.get('n', '')} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--title", default="RL reproduction with the built-in model")
    args = ap.parse_args()
    src, out = args.result, args.out
    out.mkdir(parents=True, exist_ok=True)
    shutil.copy(src / "timeline.txt", out / "timeline.txt")
    runs = {}
    for run in sorted((src / "runs").glob("*")):
        (out / "runs" / run.name).mkdir(parents=True, exist_ok=True)
        for name in ("metrics.jsonl", "config.json", "summary.json"):
            if (run / name).is_file():
                shutil.copy(run / name, out / "runs" / run.name / name)
        runs[run.name] = out / "runs" / run.name
    evals = {}
    for ev in sorted((src / "eval").glob("*")):
        if (ev / "metrics.json").is_file():
            (out / "eval" / ev.name).mkdir(parents=True, exist_ok=True)
            shutil.copy(ev / "metrics.json", out / "eval" / ev.name / "metrics.json")
            evals[ev.name] = out / "eval" / ev.name
    lines = [f"# {args.title}", "", "Made by `scripts/gpu/reproduce_rl.sh` (timeline.txt: what ran when);",
             "this page by `scripts/gpu/repro_report.py`.", ""]
    for task, metric, second in (("virl", "per_step_accuracy", "success_rate"), ("tvr", "success_rate", "spl")):
        chosen = {label: evals[k] for k, label in ARMS.items() if k.startswith(task) and k in evals}
        if not chosen:
            continue
        for m in (metric, second):
            lines += [f"## {task.upper()} — {m} (%)", "", comparison_table(chosen, m), ""]
        if task == "tvr":
            lines += ["## TVR — behaviour (overall)", "", behaviour_table(chosen), ""]
    for name, (labels, keys, x) in CURVES.items():
        chosen = {k: runs[k] for k in labels if k in runs}
        if chosen:
            png = plot_curves(chosen, keys, out / f"curves_{name}.png", title=args.title, x=x)
            lines += [f"![{name}]({png.name})", ""]
    summary = {}
    for k, run in runs.items():
        rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        steps = [r["step"] for r in rows if "step" in r]
        summary[k] = max(steps) if steps else 0
    lines += ["Updates (RL) / optimiser steps (SFT) reached: " +
              ", ".join(f"{k} {v}" for k, v in summary.items()), ""]
    (out / "README.md").write_text("\n".join(lines))
    print((out / "README.md").read_text())


if __name__ == "__main__":
    main()
