"""Shared fixtures: a small real counting task used to test generic machinery (runner, report, web).

Count from 0 to a target with "+1" answers, then say "stop". It meets the whole env/suite contract of
docs/architecture.md, so the generic code paths are exercised exactly as with TVR or V-IRL.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from spatialrl.envs.registry import EpisodeSpec, TaskSuite


class CountEnv(gym.Env):
    """Count from 0 to `target` with '+1', then say 'stop'. Budget: target + 2 turns."""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.target, self.n, self.t = int(options["target"]), 0, 0
        return np.zeros((2, 2, 3), np.uint8), self._info()

    def _info(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        info = {
            "expert_response": "stop" if self.n == self.target else "+1",
            "candidate_responses": ["+1", "stop"],
            "record": {"n": self.n, "action": None},
        }
        info.update(extra or {})
        return info

    def step(self, action: str):
        self.t += 1
        act = action.strip()
        if act == "+1":
            self.n += 1
        done = act == "stop"
        success = done and self.n == self.target
        truncated = not done and self.t >= self.target + 2
        info = self._info()
        info["record"]["action"] = act if act in ("+1", "stop") else None
        if done or truncated:
            info["episode"] = {"success": success, "final": self.n}
        return np.zeros((2, 2, 3), np.uint8), float(success), done, truncated, info


class CountPrompter:
    def reset(self, obs, info):
        self.msgs = [{"role": "user", "content": [{"type": "text", "text": f"n={info['record']['n']}"}]}]

    def update(self, response, obs, info):
        self.msgs += [{"role": "assistant", "content": [{"type": "text", "text": response}]},
                      {"role": "user", "content": [{"type": "text", "text": f"n={info['record']['n']}"}]}]

    def messages(self):
        return list(self.msgs)


def summarize(records):
    n = len(records)
    return {"overall": {"success_rate": sum(bool(r["success"]) for r in records) / max(1, n), "episodes": n}}


def count_view(obs, info):
    return {
        "images": [{"label": "counter", "image": np.full((8, 8, 3), 40 * info["record"]["n"] % 256, np.uint8)}],
        "texts": [{"label": "state", "text": f"n={info['record']['n']}"}],
        "actions": [{"label": "+1", "response": "+1", "key": "w"}, {"label": "stop", "response": "stop", "key": " "}],
    }


SUITE = TaskSuite(
    name="count", description="toy counting task", make_env=lambda o: CountEnv(),
    human_view=count_view,
    make_prompter=lambda o: CountPrompter(),
    episodes=lambda o: [EpisodeSpec(f"ep{i}", "even" if i % 2 == 0 else "odd", {"target": i % 4}) for i in range(o["n"])],
    summarize=summarize,
)




@pytest.fixture
def count_suite(monkeypatch):
    """The toy suite, registered under the name "count" for the duration of a test."""
    from spatialrl.envs import registry

    monkeypatch.setitem(registry._SUITES, "count", SUITE)
    return SUITE


@pytest.fixture(scope="session")
def one_scene_tvr_bench(tmp_path_factory):
    """A real TVR bench of one generated eval scene and 8 eval tasks (seed 5), made once per session: for
    tests that need genuine TVR states and episodes but no training data (image probe, tried actions)."""
    from spatialrl.envs.tvr.bench import BenchConfig, make_bench

    out = tmp_path_factory.mktemp("one-scene") / "bench"
    sizes = {"eval": 8, "sft": 0, "rl": 0, "diag_rotate": 0, "diag_move": 0}
    make_bench(out, BenchConfig.preset(seed=5, sizes=sizes, scenes={"sft": 0, "eval": 1, "rl": 0}), progress=False)
    return out
