"""Batched lock-step episode runner: N env slots × one policy, one ``generate`` call per turn.

Eval and RL share this loop. Each turn, every active slot's conversation goes to the policy in one
batch; each env steps on its own answer; a finished slot writes its records and takes the next
pending episode (finished episodes leave, new ones join), so the batch stays full until the queue is
empty.

Records (when ``out_dir`` is given):

* ``steps.jsonl`` — one line per env step: ``episode_id, category, t, response, reward, terminated,
  truncated, completion_tokens`` plus the env's ``info["record"]`` fields;
* ``episodes.jsonl`` — one line per finished episode: ``episode_id, category, agent, n_steps, return,
  response_tokens, error`` plus the env's ``info["episode"]`` fields.

Resume: episodes already in ``episodes.jsonl`` are skipped; step lines of episodes that never finished
(a killed run) are dropped before those episodes restart, so nothing is lost or duplicated. An episode
is written to ``episodes.jsonl`` only after all its step lines, so its presence means it is complete.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spatialrl.agents.base import Generation, Policy, SamplingParams
from spatialrl.envs.registry import EpisodeSpec, Prompter, TaskSuite
from spatialrl.io import JsonlAppender, read_jsonl, write_jsonl
from spatialrl.rollout.records import episode_record, step_record

# Called after every env step: (slot's episode spec, conversation sent, generation, step 5-tuple).
TurnHook = Callable[[EpisodeSpec, list, Generation, tuple], None]


@dataclass
class _Slot:
    env: Any
    spec: EpisodeSpec | None = None
    prompter: Prompter | None = None
    info: dict[str, Any] = field(default_factory=dict)
    t: int = 0
    ret: float = 0.0
    response_tokens: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunResult:
    episodes: list[dict[str, Any]]  # every finished episode record of the run dir (old + new)
    new_episodes: int
    env_steps: int
    seconds: float


def prepare_resume(out_dir: Path) -> set[str]:
    """Return the ids of finished episodes in ``out_dir`` and drop step lines of unfinished ones."""
    episodes_path, steps_path = out_dir / "episodes.jsonl", out_dir / "steps.jsonl"
    done = {r["episode_id"] for r in read_jsonl(episodes_path)}
    # Rewrite both files from what parses: this also removes a torn last line left by a crash.
    write_jsonl(episodes_path, list(read_jsonl(episodes_path)))
    write_jsonl(steps_path, [r for r in read_jsonl(steps_path) if r.get("episode_id") in done])
    return done


def run_episodes(
    suite: TaskSuite,
    options: dict[str, Any],
    policy: Policy,
    episodes: list[EpisodeSpec],
    batch_size: int = 8,
    sampling: SamplingParams | None = None,
    out_dir: str | Path | None = None,
    max_turns: int = 1000,
    progress: bool = True,
    on_turn: TurnHook | None = None,
    env_threads: int = 1,
) -> RunResult:
    """Run ``episodes`` of ``suite`` with ``policy`` in lock-step batches of up to ``batch_size``.

    ``max_turns`` is a safety cap only; envs end their own episodes (budgets live in the env).
    ``env_threads`` > 1 steps the batch's envs in a thread pool (for suites whose envs declare
    ``thread_safe_envs``, e.g. V-IRL's cv2 panorama projection, which releases the GIL); records are
    still written in slot order, so the output does not depend on it.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    sampling = sampling or SamplingParams()
    ids = [e.episode_id for e in episodes]
    if len(set(ids)) != len(ids):
        raise ValueError("episode ids must be unique within a run")

    out = Path(out_dir) if out_dir is not None else None
    done: set[str] = set()
    previous: list[dict[str, Any]] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        done = prepare_resume(out)
        previous = list(read_jsonl(out / "episodes.jsonl"))
    pending = [e for e in episodes if e.episode_id not in done]
    pending.reverse()  # pop() from the end keeps the original order

    step_log = JsonlAppender(out / "steps.jsonl") if out else None
    episode_log = JsonlAppender(out / "episodes.jsonl") if out else None
    finished: list[dict[str, Any]] = []
    n_steps = 0
    t0 = time.perf_counter()
    slots = [_Slot(env=suite.make_env(options)) for _ in range(min(batch_size, len(pending)))]
    pool = None
    if env_threads > 1 and suite.thread_safe_envs:
        from concurrent.futures import ThreadPoolExecutor

        pool = ThreadPoolExecutor(env_threads)

    def start(slot: _Slot) -> None:
        slot.spec = pending.pop()
        obs, info = slot.env.reset(seed=slot.spec.seed, options=dict(slot.spec.reset_options))
        slot.prompter = suite.make_prompter(options)
        slot.prompter.reset(obs, info)
        slot.info, slot.t, slot.ret, slot.response_tokens, slot.steps = info, 0, 0.0, 0, []

    def finish(slot: _Slot, episode_fields: dict[str, Any] | None, error: str | None) -> None:
        assert slot.spec is not None
        record = episode_record(slot.spec, getattr(policy, "name", type(policy).__name__), slot.t, slot.ret,
                                slot.response_tokens, episode_fields, error)
        if step_log is not None and episode_log is not None:
            for s in slot.steps:
                step_log.write(s)
            episode_log.write(record)  # written last: its presence marks the episode complete
        finished.append(record)
        slot.spec = None

    progress_bar = None
    if progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

        progress_bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"),
            TimeRemainingColumn(),
        )
        progress_bar.start()
        bar = progress_bar.add_task(
            f"{suite.name} · {getattr(policy, 'name', 'policy')}", total=len(episodes), completed=len(done),
            status="",
        )

    try:
        for slot in slots:
            if pending:
                start(slot)
        while True:
            active = [s for s in slots if s.spec is not None]
            if not active:
                break
            conversations = [s.prompter.messages() for s in active]
            generations = policy.generate(conversations, sampling, [s.info for s in active])
            if len(generations) != len(active):
                raise RuntimeError(f"policy returned {len(generations)} generations for {len(active)} prompts")
            stepping = [(s, g) for s, g in zip(active, generations, strict=True) if g.error is None]
            if pool is not None:
                outcomes = list(pool.map(lambda sg: sg[0].env.step(sg[1].text), stepping))
            else:
                outcomes = [s.env.step(g.text) for s, g in stepping]
            outcome_of = {id(s): o for (s, _), o in zip(stepping, outcomes, strict=True)}
            for slot, conv, gen in zip(active, conversations, generations, strict=True):
                if gen.error is not None:
                    finish(slot, None, gen.error)
                else:
                    obs, reward, terminated, truncated, info = outcome_of[id(slot)]
                    n_steps += 1
                    slot.t += 1
                    slot.ret += float(reward)
                    slot.response_tokens += int(gen.completion_tokens or 0)
                    slot.steps.append(step_record(slot.spec, slot.t - 1, gen.text, reward, terminated,
                                                  truncated, info, gen.completion_tokens))
                    if on_turn is not None:
                        on_turn(slot.spec, conv, gen, (obs, reward, terminated, truncated, info))
                    slot.prompter.update(gen.text, obs, info)
                    slot.info = info
                    if terminated or truncated:
                        finish(slot, info.get("episode", {"success": bool(info.get("success", False))}), None)
                    elif slot.t >= max_turns:
                        finish(slot, info.get("episode"), f"runner safety cap of {max_turns} turns reached")
                if slot.spec is None and pending:
                    start(slot)
            if progress_bar is not None:
                all_records = previous + finished
                wins = sum(bool(r.get("success")) for r in all_records)
                progress_bar.update(
                    bar,
                    completed=len(all_records),
                    status=f"success {wins}/{len(all_records)} ({100 * wins / max(1, len(all_records)):.1f}%)",
                )
    finally:
        if pool is not None:
            pool.shutdown()
        if progress_bar is not None:
            progress_bar.stop()
        for log in (step_log, episode_log):
            if log is not None:
                log.close()
        for slot in slots:
            slot.env.close()

    # Keep the caller's episode order; records of episodes not in this call are kept at the end.
    by_id = {r["episode_id"]: r for r in previous + finished}
    ordered = [by_id[i] for i in ids if i in by_id] + [r for k, r in by_id.items() if k not in set(ids)]
    return RunResult(episodes=ordered, new_episodes=len(finished), env_steps=n_steps,
                     seconds=time.perf_counter() - t0)
