"""V-IRL metrics and the reference evaluator's JSONL log layout (notes §4.2–4.3).

Per-step accuracy = env steps with reward +1 / all env steps (retries and the forced step after the
budget count). Success rate = episodes that end with a correct ``stop()`` / episodes. Both are computed
per split (the episode category) and pooled in an ``overall`` row. Beside them (runs recorded since the
env counts retries): ``retries`` (attempts after a wrong one at the same rail point, the verifier's
"You failed this trial" turn) and ``retry_accuracy`` (the share of them answered right) — an agent that
never recovers loses every episode at its first mistake, whatever its first-try accuracy — and
``reached_destination`` (episodes that got to the route's last point) with ``destination_accuracy``
(the share of those whose first answer there was the ``stop()``: the one decision only the street view
can make, since the text never says the destination is in sight).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path
from typing import Any

from spatialrl.io import read_jsonl, write_jsonl

REFERENCE_INFO_KEYS = (
    "global_instruction", "current_instruction", "instruction_idx", "gt_action", "Verify Info", "current_obs",
    "obs_act_seq", "is_success",
)
SPLIT_TAGS = {"in-dist": "indist", "rule-ood": "rule_ood", "visual-ood": "visual_ood"}
SEPARATOR = {"Split": "===================="}


def summarize(records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{split: {success_rate, per_step_accuracy, episodes, steps, mean_return, mean_progress}}`` plus
    ``overall``. Episodes cut short by a policy error count as failures with their steps so far."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        groups[str(r.get("category") or r.get("split") or "default")].append(r)

    def row(rs: list[dict[str, Any]]) -> dict[str, float]:
        n = len(rs)
        steps = sum(int(r.get("n_steps") or 0) for r in rs)
        correct = sum(int(r.get("n_correct") or 0) for r in rs)
        out = {
            "success_rate": sum(bool(r.get("success")) for r in rs) / max(1, n),
            "per_step_accuracy": correct / max(1, steps),
            "episodes": n,
            "steps": steps,
            "mean_return": sum(float(r.get("return") or 0.0) for r in rs) / max(1, n),
            "mean_progress": sum(float(r.get("progress") or 0.0) for r in rs) / max(1, n),
        }
        if any("n_retries" in r for r in rs):  # older runs did not count them
            retries = sum(int(r.get("n_retries") or 0) for r in rs)
            out["retries"] = retries
            out["retry_accuracy"] = sum(int(r.get("n_retry_correct") or 0) for r in rs) / max(1, retries)
            reached = sum(int(r.get("n_destination") or 0) for r in rs)
            out["reached_destination"] = reached
            out["destination_accuracy"] = sum(int(r.get("n_destination_correct") or 0) for r in rs) / max(1, reached)
        return out

    out = {name: row(rs) for name, rs in sorted(groups.items())}
    out["overall"] = row(list(records))
    return out


def _sample_index(episode_id: str) -> tuple[int, str]:
    m = re.search(r"(\d+)$", episode_id)
    return (int(m.group(1)) if m else 1 << 30, episode_id)


def reference_lines(episodes: list[dict[str, Any]], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One split's log in the reference layout: per step ``{sample_id, veri_step, output, reward, info}``;
    per episode ``{"Success": ...}``, a summary line (last output, episode return, last info) and the
    ``{"Split": "===="}`` separator; finally ``{"Step Number", "Trajectory Number", "Rates"}``."""
    by_episode: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in steps:
        by_episode[s["episode_id"]].append(s)
    lines: list[dict[str, Any]] = []
    counts = {"CORRECT_ACTION": 0, "INCORRECT_ACTION": 0, "INCORRECT_OBS": 0}
    n_steps = n_success = 0
    ordered = sorted(episodes, key=lambda e: _sample_index(e["episode_id"]))
    for k, ep in enumerate(ordered):
        ep_steps = sorted(by_episode.get(ep["episode_id"], []), key=lambda s: s["t"])
        for s in ep_steps:
            info = {key: s.get(key) for key in REFERENCE_INFO_KEYS}
            lines.append({"sample_id": k, "veri_step": s["t"], "output": s.get("response"), "reward": s["reward"],
                          "info": info})
            n_steps += 1
            if s["reward"] == 1:
                counts["CORRECT_ACTION"] += 1
            elif s["reward"] == -1.5:
                counts["INCORRECT_OBS"] += 1
            else:
                counts["INCORRECT_ACTION"] += 1
        success = bool(ep.get("success"))
        n_success += success
        last = ep_steps[-1] if ep_steps else {}
        lines.append({"Success": success})
        lines.append({
            "sample_id": k,
            "output": last.get("response", ""),
            "reward": float(ep.get("return") or 0.0),
            "info": {key: last.get(key) for key in REFERENCE_INFO_KEYS},
        })
        lines.append(dict(SEPARATOR))
    rates = {k: round(v / max(1, n_steps), 4) for k, v in counts.items()}
    rates["CORRECT_SOLUTION"] = round(n_success / max(1, len(ordered)), 4)
    lines.append({"Step Number": n_steps, "Trajectory Number": len(ordered), "Rates": rates})
    return lines


def write_reference_logs(run_dir: str | Path, mode: str = "vl") -> list[Path]:
    """Write ``<run>/reference_logs/virl_<mode>_<split>.jsonl`` (one per split) from the run's records,
    so parsers written for the reference evaluator's output keep working."""
    run_dir = Path(run_dir)
    episodes = list(read_jsonl(run_dir / "episodes.jsonl"))
    steps = list(read_jsonl(run_dir / "steps.jsonl"))
    by_split: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for e in episodes:
        by_split[str(e.get("category") or "default")].append(e)
    written = []
    for split, eps in sorted(by_split.items()):
        ids = {e["episode_id"] for e in eps}
        tag = SPLIT_TAGS.get(split, re.sub(r"[^A-Za-z0-9_]+", "_", split))
        path = run_dir / "reference_logs" / f"virl_{mode}_{tag}.jsonl"
        write_jsonl(path, reference_lines(eps, [s for s in steps if s.get("episode_id") in ids]))
        written.append(path)
    return written
