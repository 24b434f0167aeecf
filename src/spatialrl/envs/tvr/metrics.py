"""TVR metrics, per category and overall: TVRBench's table plus the paper's failure-analysis numbers.

Definitions (``n`` episodes of a category; an episode's ``steps`` counts every action it issued, Stop
and unparsable answers included, as TVRBench's ``num_steps = len(actions)``):

* ``success_rate`` — successes / n (success = Stop issued at exactly the target pose);
* ``spl`` — mean of success · opt / max(opt, steps), ``opt`` = the oracle's ``optimal_steps`` (Stop included);
* ``mean_steps``, ``stop_rate`` = stopped / n;
* ``fstop_given_stop`` = (stopped − success) / stopped ("of Stops, fraction at the wrong pose"; left out
  when nothing stopped), ``fstop_all`` = (stopped − success) / n;
* ``final_pos_error_m`` (xz L2), ``final_yaw_error_deg`` (circular), ``final_pitch_error_deg`` — means
  over all episodes, as TVRBench's ``aggregate`` does;
* ``invalid_per_episode`` (unparsable answers), ``distinct_cells`` (cells visited, start included),
  ``revisits`` (moves that land on a pose visited before) — means per episode;
* ``share_translation|rotation|look|stop|invalid`` — pooled over every step of the category;
* ``oracle_agreement`` — steps whose answer equals the oracle's action at that state / steps;
  ``repeat_rate`` — steps after a parsed action that repeat it / those steps,
  beside ``oracle_repeat_rate``, how often the oracle's action at those states equals the previous action:
  a policy that repeats far more often than the oracle would copies its history (behaviour cloning's
  "copycat" shortcut; the built-in AO models of 2026-12-05: 0.62 vs 0.14, docs/training.md);
* ``response_tokens_per_step`` — total generated tokens / total steps, when records carry
  ``response_tokens`` (the eval runner does).

Episodes cut short by a policy error carry no env fields; they count as failures in the rates and are
skipped in the means of fields they lack.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

ACTION_KINDS = ("translation", "rotation", "look", "stop", "invalid")


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def spl_term(success: bool, steps: int, optimal: int) -> float:
    """One episode's SPL: success × optimal / max(optimal, taken)."""
    if not success:
        return 0.0
    return optimal / max(optimal, steps)


def _steps(rec: dict[str, Any]) -> int:
    return int(rec.get("steps", rec.get("n_steps", 0)))


def summarize_group(records: list[dict[str, Any]]) -> dict[str, float]:
    """Every metric of one group of episode records (see the module docstring)."""
    n = len(records)
    out: dict[str, float] = {"n": n}
    if n == 0:
        return out
    n_success = sum(bool(r.get("success")) for r in records)
    n_stopped = sum(bool(r.get("stopped")) for r in records)
    total_steps = sum(_steps(r) for r in records)
    out["success_rate"] = n_success / n
    with_opt = [r for r in records if "optimal_steps" in r]
    if with_opt:
        out["spl"] = sum(spl_term(bool(r.get("success")), _steps(r), int(r["optimal_steps"])) for r in with_opt) / len(
            with_opt
        )
    out["mean_steps"] = total_steps / n
    out["stop_rate"] = n_stopped / n
    if n_stopped:
        out["fstop_given_stop"] = (n_stopped - n_success) / n_stopped
    out["fstop_all"] = (n_stopped - n_success) / n
    for key, name in (
        ("final_pos_error", "final_pos_error_m"),
        ("final_yaw_error", "final_yaw_error_deg"),
        ("final_pitch_error", "final_pitch_error_deg"),
        ("invalid_actions", "invalid_per_episode"),
        ("distinct_cells", "distinct_cells"),
        ("revisits", "revisits"),
    ):
        m = _mean([float(r[key]) for r in records if key in r])
        if m is not None:
            out[name] = m
    counts: dict[str, int] = defaultdict(int)
    for r in records:
        for kind, c in (r.get("action_counts") or {}).items():
            counts[kind] += int(c)
    pooled = sum(counts.values())
    if pooled:
        for kind in ACTION_KINDS:
            out[f"share_{kind}"] = counts[kind] / pooled
    with_diag = [r for r in records if "oracle_agreements" in r]
    diag_steps = sum(_steps(r) for r in with_diag)
    if diag_steps:
        out["oracle_agreement"] = sum(int(r["oracle_agreements"]) for r in with_diag) / diag_steps
    chances = sum(int(r.get("repeat_chances", 0)) for r in with_diag)
    if chances:
        out["repeat_rate"] = sum(int(r["repeats"]) for r in with_diag) / chances
        out["oracle_repeat_rate"] = sum(int(r["oracle_repeats"]) for r in with_diag) / chances
    if any("response_tokens" in r for r in records) and total_steps:
        out["response_tokens_per_step"] = sum(int(r.get("response_tokens") or 0) for r in records) / total_steps
    return out


def summarize(episode_records: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """``{category: {metric: value}}`` with an ``overall`` row over all records."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in episode_records:
        groups[str(r.get("category", "unknown"))].append(r)
    out = {"overall": summarize_group(list(episode_records))}
    for cat in sorted(groups):
        out[cat] = summarize_group(groups[cat])
    return out
