"""A tiny learnable task for the RL tests (``letters``), meeting the whole env/suite contract of docs/architecture.md.

"letters": each turn the agent sees a colour swatch and the text "Letter: e" and should answer with as
many copies of that letter as it can; a turn's reward is the share of the answer's characters that are
the letter (in [0, 1]), so even a random tiny model earns some reward and every sample differs —
a dense signal that PPO and GRPO lift within a few updates on a CPU. Memory is visual-action style: the
conversation grows by one assistant and one user turn (with a new image) per step, so the multi-turn
token-in-token-out path is exercised; ``fresh_prompt=True`` makes every turn a new conversation (one
segment per turn) instead.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from spatialrl.envs.registry import EpisodeSpec, TaskSuite

LETTERS = "aeo"
COLOURS = {"a": (200, 40, 40), "e": (40, 200, 40), "o": (40, 40, 200)}


class LetterEnv(gym.Env):
    """Answer with copies of the asked letter for ``turns`` turns; reward = share of that letter."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        options = options or {}
        pool = options.get("letters", LETTERS)
        self.letter = options.get("letter") or pool[int(self.np_random.integers(len(pool)))]
        self.turns, self.t, self.shares = int(options.get("turns", 2)), 0, []
        return self._obs(), self._info(None)

    def _obs(self) -> np.ndarray:
        img = np.zeros((28, 28, 3), np.uint8)
        img[:] = COLOURS[self.letter]
        img[: 4 * (self.t + 1), :4] = 255  # the turn, so observations differ across turns
        return img

    def _info(self, record: dict[str, Any] | None) -> dict[str, Any]:
        info = {"expert_response": self.letter * 4, "candidate_responses": [c * 4 for c in LETTERS],
                "letter": self.letter, "t": self.t}
        info["record"] = record if record is not None else {"turn": self.t}
        return info

    def step(self, action: str):
        text = action.strip().lower()
        share = text.count(self.letter) / len(text) if text else 0.0
        self.shares.append(share)
        record = {"turn": self.t, "prev_pose": [self.t], "letter": self.letter, "share": share,
                  "reward_share": share}
        self.t += 1
        terminated = self.t >= self.turns
        info = self._info(record)
        if terminated:
            info["episode"] = {"success": float(np.mean(self.shares)) >= 0.5, "mean_share": float(np.mean(self.shares))}
        return self._obs(), share, terminated, False, info


class LetterPrompter:
    def __init__(self, fresh_prompt: bool = False):
        self.fresh = fresh_prompt

    def _user(self, obs, info) -> dict[str, Any]:
        return {"role": "user", "content": [{"type": "image", "image": obs},
                                            {"type": "text", "text": f"Letter: {info['letter']}. Turn {info['t']}."}]}

    def reset(self, obs, info):
        self.msgs = [{"role": "system", "content": [{"type": "text", "text": "Answer with the letter."}]},
                     self._user(obs, info)]

    def update(self, response, obs, info):
        if self.fresh:
            self.msgs = [self.msgs[0], self._user(obs, info)]
        else:
            self.msgs = self.msgs + [{"role": "assistant", "content": [{"type": "text", "text": response}]},
                                     self._user(obs, info)]

    def messages(self):
        return list(self.msgs)


def letter_episodes(options: dict[str, Any]) -> list[EpisodeSpec]:
    """``n`` episodes cycling through ``letters`` (all three by default; one letter = an easier task)."""
    n, turns, pool = int(options.get("n", 12)), int(options.get("turns", 2)), options.get("letters", LETTERS)
    return [EpisodeSpec(f"L{i}", pool[i % len(pool)], {"letter": pool[i % len(pool)], "turns": turns}, seed=i)
            for i in range(n)]


def summarize(records):
    n = len(records)
    return {"overall": {"success_rate": sum(bool(r["success"]) for r in records) / max(1, n), "episodes": n}}


LETTER_SUITE = TaskSuite(
    name="letters", description="say the asked letter (RL test task)", make_env=lambda o: LetterEnv(),
    make_prompter=lambda o: LetterPrompter(bool(o.get("fresh_prompt", False))),
    episodes=letter_episodes, summarize=summarize, default_options={"n": 12, "turns": 2},
    anchor_field="prev_pose",  # the letter's turn: the state a step-group is keyed on
)


def register() -> TaskSuite:
    """Register the suite as "letters" (the multi-process launcher calls this in every process)."""
    from spatialrl.envs import registry

    registry._SUITES["letters"] = LETTER_SUITE
    return LETTER_SUITE


REPO = Path(__file__).resolve().parents[2]


def read_updates(run_dir: Path, key: str = "charts/env_steps") -> dict[int, dict[str, Any]]:
    """Metric records of a run keyed by update (the last record wins: a resumed run re-logs)."""
    out: dict[int, dict[str, Any]] = {}
    for line in (Path(run_dir) / "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if key in record:
            out[record["step"]] = record
    return out
