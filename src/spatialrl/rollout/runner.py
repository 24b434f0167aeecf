"""Batched lock-step episode runner: N env slots × one text policy, one ``generate`` call per turn.

The text-level loop on the rollout core (:mod:`spatialrl.rollout.core`; RL's token-level loop,
:mod:`spatialrl.rollout.agent_loop`, runs on the same core). Each turn, every active slot's conversation
goes to the policy in one batch (the act step); each env steps on its own answer; a finished slot writes
its records and takes the next pending episode (finished episodes leave, new ones join), so the batch
stays full until the queue is empty.

Records (when ``out_dir`` is given):

* ``steps.jsonl`` — one line per env step: ``episode_id, category, t, response, reward, terminated,
  truncated, completion_tokens`` plus the env's ``info["record"]`` fields;
* ``episodes.jsonl`` — one line per finished episode: ``episode_id, category, agent, n_steps, return,
  response_tokens, error`` plus the env's ``info["episode"]`` fields.

Resume: episodes already in ``episodes.jsonl`` are skipped; step lines of episodes that never finished
(a killed run) are dropped before those episodes restart, so nothing is lost or duplicated. An episode
is written to ``episodes.jsonl`` only after all its step lines, so its presence means it is complete;
one whose step lines do not add up to its ``n_steps`` (a torn or lost ``steps.jsonl`` line) is re-run,
and so, by default, is one that ended with an ``error`` (server down, out of memory: ``retry_errors``).

Seeding: every conversation of a ``generate`` call carries a stream id derived from its episode id and
turn (``SamplingParams.streams``); the random agent and seeded sampled decoding draw from a generator
seeded by (run seed, stream id), so an episode's answers do not depend on the batch size, on the other
episodes in the batch, or on where an earlier run was killed.
"""

from __future__ import annotations

import hashlib
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from spatialrl.agents.base import Generation, Policy, SamplingParams
from spatialrl.envs.registry import EpisodeSpec, TaskSuite
from spatialrl.io import JsonlAppender, read_jsonl, write_jsonl
from spatialrl.rollout.core import Slot, SlotPool
from spatialrl.rollout.records import episode_record, step_record

# Called after every env step: (slot's episode spec, conversation sent, generation, step 5-tuple).
TurnHook = Callable[[EpisodeSpec, list, Generation, tuple], None]


@dataclass(eq=False)
class _Slot(Slot):
    """A core slot plus what the runner records: answer tokens and the episode's step lines."""

    response_tokens: int = 0
    steps: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class RunResult:
    episodes: list[dict[str, Any]]  # every finished episode record of the run dir (old + new)
    new_episodes: int
    env_steps: int
    seconds: float
    retried_errors: int = 0  # episodes that had ended with an error in an earlier run and were run again
    redone_incomplete: int = 0  # recorded episodes whose step lines were torn or missing, run again

    @property
    def errors(self) -> list[dict[str, Any]]:
        """Records of the run's episodes that ended with an error (see :func:`error_summary`)."""
        return [r for r in self.episodes if r.get("error")]


@dataclass
class Resume:
    """What :func:`prepare_resume` found in a run folder."""

    done: set[str]  # ids of complete episodes (kept, skipped by this run)
    retried_errors: list[str] = field(default_factory=list)  # errored episodes dropped to run again
    incomplete: list[str] = field(default_factory=list)  # recorded episodes with missing step lines


def prepare_resume(out_dir: Path, retry_errors: bool = True) -> Resume:
    """Keep the complete episodes of ``out_dir``; drop everything else so it is run again.

    Dropped: step lines of unfinished episodes (a killed run), torn last lines, recorded episodes whose
    step lines do not add up to their ``n_steps`` (a torn ``steps.jsonl`` line), and, with
    ``retry_errors``, episodes that ended with an ``error``.
    """
    episodes_path, steps_path = out_dir / "episodes.jsonl", out_dir / "steps.jsonl"
    records = list(read_jsonl(episodes_path))
    steps = list(read_jsonl(steps_path))
    n_lines = Counter(s.get("episode_id") for s in steps)
    ts: dict[Any, set[Any]] = {}
    for s in steps:
        ts.setdefault(s.get("episode_id"), set()).add(s.get("t"))
    resume = Resume(done=set())
    kept = []
    for r in records:
        eid = r.get("episode_id")
        if eid in resume.done:
            continue
        n = r.get("n_steps")
        if n_lines.get(eid, 0) != n or ts.get(eid, set()) != set(range(n if isinstance(n, int) else -1)):
            resume.incomplete.append(eid)
        elif retry_errors and r.get("error"):
            resume.retried_errors.append(eid)
        else:
            resume.done.add(eid)
            kept.append(r)
    # Rewrite both files from what is kept: this also removes a torn last line left by a crash.
    write_jsonl(episodes_path, kept)
    write_jsonl(steps_path, [s for s in steps if s.get("episode_id") in resume.done])
    return resume


def episode_stream(episode_id: str, t: int) -> int:
    """A stable 63-bit stream id for turn ``t`` of episode ``episode_id`` (same in every process/run)."""
    digest = hashlib.sha256(f"{episode_id}\x00{t}".encode()).digest()
    return int.from_bytes(digest[:8], "little") >> 1


def error_summary(records: list[dict[str, Any]], first: int = 3) -> dict[str, Any]:
    """``{"count", "by_category", "first": [{"episode_id", "category", "error"}, ...]}`` of errored episodes."""
    errored = [r for r in records if r.get("error")]
    by_cat = Counter(str(r.get("category")) for r in errored)
    return {
        "count": len(errored),
        "by_category": dict(sorted(by_cat.items())),
        "first": [{"episode_id": r.get("episode_id"), "category": r.get("category"), "error": str(r["error"])}
                  for r in errored[:first]],
    }


def progress_fields(records: list[dict[str, Any]], active: list[tuple[int, int | None]], total: int,
                    env_steps: int) -> tuple[float, str, str]:
    """The progress bar's state: (completed, episodes text, status). ``active`` holds each running
    episode's (turns taken, turn budget or None); a running episode counts as the share of its budget
    it used (at most 0.95), so the bar moves with every env step, not only when an episode ends."""
    n_err = sum(bool(r.get("error")) for r in records)
    n_ok = len(records) - n_err
    wins = sum(bool(r.get("success")) and not r.get("error") for r in records)
    partial = sum(min(0.95, t / budget) for t, budget in active if budget)
    status = (f"{env_steps} env steps · {len(active)} running · success {wins}/{n_ok}"
              f" ({100 * wins / max(1, n_ok):.1f}%)" + (f" · [red]{n_err} errored[/red]" if n_err else ""))
    return len(records) + partial, f"{len(records)}/{total} episodes", status


def cpu_time_warning(policy: Any, seconds_per_turn: float, episodes_left: int, batch_size: int,
                     turn_budget: int | None, threshold_s: float = 300.0) -> str | None:
    """A warning when a model runs on the CPU and the run may take longer than ``threshold_s``, from the
    measured time of the first batched turn (an upper bound: every episode using its whole budget)."""
    device = getattr(policy, "device", None)
    if getattr(device, "type", device) != "cpu" or not turn_budget or episodes_left <= 0:
        return None
    batches = -(-episodes_left // max(1, batch_size))
    worst = seconds_per_turn * turn_budget * batches
    if worst < threshold_s:
        return None
    return (f"warning: the model runs on the CPU at {seconds_per_turn:.1f} s per batched turn; "
            f"{episodes_left} episodes of up to {turn_budget} turns may take up to {worst / 60:.0f} min. "
            "Try --limit 2 first, raise --batch-size, or use a GPU.")


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
    retry_errors: bool = True,
) -> RunResult:
    """Run ``episodes`` of ``suite`` with ``policy`` in lock-step batches of up to ``batch_size``.

    ``max_turns`` is a safety cap only; envs end their own episodes (budgets live in the env).
    ``env_threads`` > 1 steps the batch's envs in a thread pool (for suites whose envs declare
    ``thread_safe_envs``, e.g. V-IRL's cv2 panorama projection, which releases the GIL); records are
    still written in slot order, so the output does not depend on it. ``retry_errors``: run episodes
    that ended with an error in an earlier run of ``out_dir`` again (default) instead of keeping them.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    sampling = sampling or SamplingParams()
    ids = [e.episode_id for e in episodes]
    if len(set(ids)) != len(ids):
        raise ValueError("episode ids must be unique within a run")

    out = Path(out_dir) if out_dir is not None else None
    resume = Resume(done=set())
    previous: list[dict[str, Any]] = []
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        resume = prepare_resume(out, retry_errors=retry_errors)
        previous = list(read_jsonl(out / "episodes.jsonl"))
    done = resume.done
    pending = [e for e in episodes if e.episode_id not in done]
    pending.reverse()  # pop() from the end keeps the original order

    step_log = JsonlAppender(out / "steps.jsonl") if out else None
    episode_log = JsonlAppender(out / "episodes.jsonl") if out else None
    finished: list[dict[str, Any]] = []
    n_steps = 0
    t0 = time.perf_counter()
    pool: SlotPool[_Slot] = SlotPool(suite, options, min(batch_size, len(pending)), max_turns,
                                     env_threads=env_threads, make_slot=lambda env: _Slot(env=env))
    slots = pool.slots

    def start(indices: list[int]) -> None:
        started = pool.start([(i, pending.pop()) for i in indices[:len(pending)]])
        for slot in started:
            slot.response_tokens, slot.steps = 0, []

    def finish(index: int, episode_fields: dict[str, Any] | None, error: str | None) -> None:
        slot = slots[index]
        assert slot.spec is not None
        record = episode_record(slot.spec, getattr(policy, "name", type(policy).__name__), slot.t, slot.ret,
                                slot.response_tokens, episode_fields, error)
        if step_log is not None and episode_log is not None:
            for s in slot.steps:
                step_log.write(s)
            episode_log.write(record)  # written last: its presence marks the episode complete
        finished.append(record)
        pool.release(index)

    progress_bar = None
    if progress:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

        progress_bar = Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            TextColumn("{task.fields[episodes]}"),
            TextColumn("{task.fields[status]}"),
            TimeElapsedColumn(),
            TimeRemainingColumn(),
        )
        progress_bar.start()
        bar = progress_bar.add_task(
            f"{suite.name} · {getattr(policy, 'name', 'policy')}", total=len(episodes), completed=len(done),
            episodes=f"{len(done)}/{len(episodes)} episodes", status="starting",
        )
    warned = False

    sent: dict[int, list] = {}  # id(slot) -> the conversation the policy answered this turn

    def act(active: list[_Slot]) -> list[Generation]:
        """The text act step: one ``generate`` call for every active slot's conversation."""
        nonlocal warned
        conversations = [s.prompter.messages() for s in active]
        sent.clear()
        sent.update((id(s), c) for s, c in zip(active, conversations, strict=True))
        streams = tuple(episode_stream(s.spec.episode_id, s.t) for s in active)
        t_turn = time.perf_counter()
        generations = policy.generate(conversations, replace(sampling, streams=streams), [s.info for s in active])
        if progress_bar is not None and not warned:
            warned = True
            budget = max((int(s.info.get("max_steps") or 0) for s in active), default=0) or None
            warning = cpu_time_warning(policy, time.perf_counter() - t_turn, len(pending) + len(active),
                                       batch_size, budget)
            if warning:
                progress_bar.console.print(f"[yellow]{warning}[/yellow]")
        if len(generations) != len(active):
            raise RuntimeError(f"policy returned {len(generations)} generations for {len(active)} prompts")
        return generations

    try:
        start(pool.idle())
        while pool.active():
            for o in pool.turn(act):
                slot, gen = o.slot, o.answer
                if o.step is None:
                    finish(o.index, None, gen.error)
                    continue
                obs, reward, terminated, truncated, info = o.step
                n_steps += 1
                slot.response_tokens += int(gen.completion_tokens or 0)
                slot.steps.append(step_record(slot.spec, slot.t - 1, gen.text, reward, terminated,
                                              truncated, info, gen.completion_tokens, gen.extra.get("step_record")))
                if on_turn is not None:
                    on_turn(slot.spec, sent[id(slot)], gen, o.step)
                if o.ended:
                    finish(o.index, info.get("episode", {"success": bool(info.get("success", False))}), None)
                elif o.capped:
                    finish(o.index, info.get("episode"), f"runner safety cap of {max_turns} turns reached")
            if pending:
                start(pool.idle())
            if progress_bar is not None:
                running = [(s.t, s.info.get("max_steps")) for s in slots if s.spec is not None]
                completed, eps_text, status = progress_fields(previous + finished, running, len(episodes), n_steps)
                progress_bar.update(bar, completed=completed, episodes=eps_text, status=status)
    finally:
        pool.close()
        if progress_bar is not None:
            progress_bar.stop()
        for log in (step_log, episode_log):
            if log is not None:
                log.close()

    # Keep the caller's episode order; records of episodes not in this call are kept at the end.
    by_id = {r["episode_id"]: r for r in previous + finished}
    ordered = [by_id[i] for i in ids if i in by_id] + [r for k, r in by_id.items() if k not in set(ids)]
    return RunResult(episodes=ordered, new_episodes=len(finished), env_steps=n_steps,
                     seconds=time.perf_counter() - t0, retried_errors=len(resume.retried_errors),
                     redone_incomplete=len(resume.incomplete))
