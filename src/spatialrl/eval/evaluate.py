"""One evaluation run as a function: the body of `spatialrl eval`, reused by `spatialrl demo` and trainers."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from spatialrl.agents.base import Policy, SamplingParams
from spatialrl.envs.registry import get_suite
from spatialrl.errors import SpatialRLError
from spatialrl.eval.runs import check_run_dir, open_run_dir, summarize_run
from spatialrl.io import atomic_write_json
from spatialrl.rollout.runner import RunResult, run_episodes


def evaluate(
    task: str,
    agent: str,
    options: dict[str, Any],
    out: str | Path,
    *,
    policy: Policy | None = None,
    batch_size: int = 8,
    sampling: SamplingParams | None = None,
    label: str | None = None,
    overwrite: bool = False,
    seed: int = 0,
    progress: bool = True,
    retry_errors: bool = True,
    policy_options: dict[str, Any] | None = None,
    tried_penalty: float = 0.0,
) -> tuple[RunResult, dict[str, dict[str, float]]]:
    """Evaluate ``agent`` (a spec such as ``expert`` or ``hf:PATH``, or a ready ``policy``) on ``task``.

    ``options`` are the suite's options (merged over its defaults). Writes ``run.json``,
    ``steps.jsonl``, ``episodes.jsonl``, ``metrics.json`` and the suite's extra files into ``out``;
    re-running the same evaluation resumes it (and runs episodes that ended with an error again, unless
    ``retry_errors`` is False). Errored episodes are counted in ``metrics.json`` (``errors`` per
    category, the first messages in ``overall.error_messages``) and left out of the other metrics.
    ``policy_options`` go to :func:`load_policy` (e.g. an API agent's ``timeout``, ``max_retries``); they
    are not part of the run's identity. ``tried_penalty`` > 0 wraps the policy in the tried-actions
    memory of greedy decoding (``agents/tried_actions.py``); it is part of the run's identity (recorded
    only when on, so runs without it keep their old ``run.json``).
    """
    suite = get_suite(task)
    options = {**suite.default_options, **options}
    sampling = sampling or SamplingParams()
    check_run_settings(batch_size, sampling)
    out = Path(out)
    episodes = suite.episodes(options)
    if not episodes:
        raise SpatialRLError(f"{task}: no episodes to evaluate with options {options}; check --split/--limit/--set")
    # streams are per generate call (set by the runner), not part of a run's identity
    config = {"task": task, "agent": agent, "options": options,
              "sampling": {k: v for k, v in asdict(sampling).items() if k != "streams"},
              "label": label or agent}
    if tried_penalty:
        from spatialrl.agents.tried_actions import penalty_text

        config["tried_penalty"] = penalty_text(tried_penalty)
    check_run_dir(out, config, overwrite=overwrite)  # before loading a model: a wrong --out fails fast
    if policy is None:
        from spatialrl.agents.loader import load_policy

        policy = load_policy(agent, seed=seed, **(policy_options or {}))
    if tried_penalty:
        from spatialrl.agents.tried_actions import TriedActionsPolicy

        policy = TriedActionsPolicy(policy, tried_penalty)
    open_run_dir(out, config, overwrite=overwrite)  # everything is checked: only now is the folder made
    result = run_episodes(suite, options, policy, episodes, batch_size=batch_size, sampling=sampling,
                          out_dir=out, progress=progress, retry_errors=retry_errors)
    metrics = summarize_run(suite, result.episodes)
    atomic_write_json(out / "metrics.json", metrics)
    if suite.after_run is not None:
        suite.after_run(out, options)
    return result, metrics


def check_not_all_errored(result: RunResult) -> None:
    """Raise when every episode of a run ended with an error (nothing was measured): the message gives the
    count and the first error, so a wrong URL, key or model name is seen at once."""
    errored = result.errors
    if result.episodes and len(errored) == len(result.episodes):
        first = errored[0]
        raise SpatialRLError(f"all {len(errored)} episodes ended with an error, nothing was measured; first "
                             f"({first.get('episode_id')}): {first['error']}")


def check_run_settings(batch_size: int, sampling: SamplingParams) -> None:
    """Validate the runner and decoding settings; each error names the flag and the allowed values."""
    import math

    def bad(flag: str, want: str, got: Any) -> SpatialRLError:
        return SpatialRLError(f"{flag}: expected {want}, got {got!r}")

    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise bad("--batch-size", "an integer >= 1", batch_size)
    if not isinstance(sampling.temperature, int | float) or not math.isfinite(sampling.temperature) \
            or sampling.temperature < 0:
        raise bad("--temperature", "a finite number >= 0 (0 = greedy)", sampling.temperature)
    if not isinstance(sampling.top_p, int | float) or not 0 < sampling.top_p <= 1:
        raise bad("--top-p", "a number in (0, 1]", sampling.top_p)
    if isinstance(sampling.max_new_tokens, bool) or not isinstance(sampling.max_new_tokens, int) \
            or sampling.max_new_tokens < 1:
        raise bad("--max-new-tokens", "an integer >= 1", sampling.max_new_tokens)
