"""One evaluation run as a function: the body of `spatialrl eval`, reused by `spatialrl demo` and trainers."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from spatialrl.agents.base import Policy, SamplingParams
from spatialrl.envs.registry import get_suite
from spatialrl.errors import SpatialRLError
from spatialrl.eval.runs import open_run_dir, summarize_run
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
) -> tuple[RunResult, dict[str, dict[str, float]]]:
    """Evaluate ``agent`` (a spec such as ``expert`` or ``hf:PATH``, or a ready ``policy``) on ``task``.

    ``options`` are the suite's options (merged over its defaults). Writes ``run.json``,
    ``steps.jsonl``, ``episodes.jsonl``, ``metrics.json`` and the suite's extra files into ``out``;
    re-running the same evaluation resumes it (and runs episodes that ended with an error again, unless
    ``retry_errors`` is False). Errored episodes are counted in ``metrics.json`` (``errors`` per
    category, the first messages in ``overall.error_messages``) and left out of the other metrics.
    ``policy_options`` go to :func:`load_policy` (e.g. an API agent's ``timeout``, ``max_retries``); they
    are not part of the run's identity.
    """
    suite = get_suite(task)
    options = {**suite.default_options, **options}
    sampling = sampling or SamplingParams()
    out = Path(out)
    episodes = suite.episodes(options)
    # streams are per generate call (set by the runner), not part of a run's identity
    config = {"task": task, "agent": agent, "options": options,
              "sampling": {k: v for k, v in asdict(sampling).items() if k != "streams"},
              "label": label or agent}
    open_run_dir(out, config, overwrite=overwrite)
    if policy is None:
        from spatialrl.agents.loader import load_policy

        policy = load_policy(agent, seed=seed, **(policy_options or {}))
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
