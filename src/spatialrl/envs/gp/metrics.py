"""GeneralPoints metrics, per split and overall, from the runner's episode records.

* ``success_rate`` — episodes ending in CORRECT_SOLUTION / episodes (the paper's GP metric; the
  reference's ``Rates["CORRECT_SOLUTION"]``). Episodes cut short by a policy error count as failures.
* ``rate/<OUTCOME>`` — answers with that outcome / answers, every verification attempt counted as
  its own sample (the reference's per-step ``Rates``). Each answer has one outcome, its most severe,
  so the six rates add up to one. The reference also counts its extra budget-exhausted call as a
  step (reward −1, logged as NO_SOLUTION); we make no such call, so our NO_SOLUTION rate excludes it.
* ``recognition_accuracy`` — answers whose card list equals the dealt cards / answers. In VL mode this
  is the reference's ``1 − INCORRECT_VISION / steps`` (the card check comes first); in L mode the
  cards are in the prompt, so it measures copying them (the reference reports 1 there).
* ``first_recognition_accuracy`` — the same on each episode's first answer only (the recognition
  split has one answer per episode, so there both agree).
* ``mean_attempts``, ``mean_return``, ``episodes``, ``steps``, ``errors`` (policy failures).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from spatialrl.envs.gp.rewards import Outcome


def _summary(records: list[dict[str, Any]]) -> dict[str, float]:
    n = len(records)
    counts = {o.value: 0 for o in Outcome}
    for r in records:
        for name, k in (r.get("outcome_counts") or {}).items():
            counts[name] = counts.get(name, 0) + int(k)
    steps = sum(counts.values())
    rec_steps = sum(int(r.get("recognition_steps", 0)) for r in records)
    rec_ok = sum(int(r.get("recognition_correct_steps", 0)) for r in records)
    first = [bool(r.get("recognition_correct")) for r in records if r.get("recognition_steps")]
    out: dict[str, float] = {
        "success_rate": sum(bool(r.get("success")) for r in records) / n if n else 0.0,
        "recognition_accuracy": rec_ok / rec_steps if rec_steps else 0.0,
        "first_recognition_accuracy": sum(first) / len(first) if first else 0.0,
    }
    for name, k in counts.items():
        out[f"rate/{name}"] = k / steps if steps else 0.0
    out["mean_attempts"] = steps / n if n else 0.0
    out["mean_return"] = sum(float(r.get("return", 0.0)) for r in records) / n if n else 0.0
    out["episodes"] = float(n)
    out["steps"] = float(steps)
    out["errors"] = float(sum(r.get("error") is not None for r in records))
    return out


def summarize(records: Iterable[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{"overall": {...}, "<split>": {...}}`` from episode records (see the module docstring)."""
    records = list(records)
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        groups.setdefault(str(r.get("category") or r.get("split") or "default"), []).append(r)
    out = {"overall": _summary(records)}
    for name in sorted(groups):
        out[name] = _summary(groups[name])
    return out
