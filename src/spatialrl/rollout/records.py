"""The per-step and per-episode record layout shared by the runner, the human play page and reports."""

from __future__ import annotations

from typing import Any

from spatialrl.envs.registry import EpisodeSpec


def jsonable(value: Any) -> Any:
    """Coerce numpy scalars/arrays in env records to plain JSON types."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def step_record(
    spec: EpisodeSpec,
    t: int,
    response: str,
    reward: float,
    terminated: bool,
    truncated: bool,
    info: dict[str, Any],
    completion_tokens: int | None = None,
    policy_fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """One line of ``steps.jsonl``: the runner's fields, the policy's own (``Generation.extra["step_record"]``,
    e.g. the greedy answer the tried-actions memory replaced), then the env's ``info["record"]`` fields."""
    return {
        "episode_id": spec.episode_id,
        "category": spec.category,
        "t": t,
        "response": response,
        "reward": float(reward),
        "terminated": bool(terminated),
        "truncated": bool(truncated),
        "completion_tokens": completion_tokens,
        **jsonable(policy_fields or {}),
        **jsonable(info.get("record", {})),
    }


def episode_record(
    spec: EpisodeSpec,
    agent: str,
    n_steps: int,
    ret: float,
    response_tokens: int,
    episode_fields: dict[str, Any] | None,
    error: str | None = None,
) -> dict[str, Any]:
    """One line of ``episodes.jsonl``. Without ``episode_fields`` (cut short by an error) it is a failure."""
    record = {
        "episode_id": spec.episode_id,
        "category": spec.category,
        "agent": agent,
        "n_steps": n_steps,
        "return": ret,
        "response_tokens": response_tokens,
        "error": error,
    }
    if episode_fields is not None:
        record.update(jsonable(episode_fields))
    else:
        record["success"] = False
    return record
