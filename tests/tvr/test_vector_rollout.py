"""The eval runner on TVR's batch path (``TaskSuite.make_vector_env``: one ``TVRVectorEnv`` for all slots)
gives the same run as one ``TVREnv`` per slot (``vector_env=false``): same episodes.jsonl, steps.jsonl and
metrics.json byte for byte, for the expert, the seeded random agent and an agent whose answers depend on
every pixel it is shown (CPU, llvmpipe)."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from spatialrl.agents.base import Generation, images_of
from spatialrl.envs import vector as vector_module
from spatialrl.envs.registry import get_suite
from spatialrl.eval.evaluate import evaluate
from spatialrl.rollout.core import SlotPool
from spatialrl.rollout.runner import run_episodes

FILES = ("episodes.jsonl", "steps.jsonl", "metrics.json")


@pytest.fixture
def batched_calls(monkeypatch):
    """How many slots each batched step call carried (proves the vector path ran, with several slots)."""
    sizes: list[int] = []
    step = vector_module.VectorSlots.step

    def counting(self, jobs):
        sizes.append(len(jobs))
        return step(self, jobs)

    monkeypatch.setattr(vector_module.VectorSlots, "step", counting)
    return sizes


class PixelPolicy:
    """Answers with a valid action (or Stop) picked by a hash of every image and text of the conversation,
    so a single different pixel anywhere changes the episode; it also keeps each turn's image digest."""

    name = "pixels"

    def __init__(self):
        self.seen: dict[tuple[str, int], str] = {}

    def generate(self, conversations, sampling, infos=None):
        out = []
        for conv, info in zip(conversations, infos, strict=True):
            h = hashlib.sha256()
            for image in images_of(conv):
                h.update(np.ascontiguousarray(image).tobytes())
            h.update(repr([m["content"] for m in conv if m["role"] != "user"]).encode())
            digest = h.hexdigest()
            self.seen[(info["task_id"], info["step"])] = digest
            choices = info["valid_actions"]  # Stop among them
            out.append(Generation(text=f"Action: {choices[int(digest[:8], 16) % len(choices)]}"))
        return out


def run_dir_bytes(path):
    return {name: (path / name).read_bytes() for name in FILES}


@pytest.mark.parametrize("agent", ["expert", "random"])
def test_eval_is_the_same_with_and_without_the_vector_env(bench_dir, tmp_path, agent, batched_calls):
    base = {"data": str(bench_dir), "width": 64, "height": 36, "memory": "window", "window": 2,
            "max_steps_single": 6, "max_steps_multi": 5}
    runs = {}
    for on in (False, True):
        out = tmp_path / f"{agent}-{on}"
        evaluate("tvr", agent, {**base, "vector_env": on}, out, batch_size=3, seed=3, progress=False)
        runs[on] = run_dir_bytes(out)
        if not on:
            assert batched_calls == []  # vector_env=false: one TVREnv per slot
    assert runs[False] == runs[True]
    assert max(batched_calls) == 3  # three slots stepped in one call
    # 4 episodes over 3 slots: a slot was refilled, and episodes ended at different turns
    assert runs[True]["episodes.jsonl"].count(b"\n") == 4


def test_pixel_dependent_agent_and_turn_cap_are_the_same(bench_dir, tmp_path, batched_calls):
    """Frames rendered on both paths (cache off), VA memory (every past frame is in the prompt), both
    houses, the runner's turn cap; the policy saw the same pixels at every turn."""
    suite = get_suite("tvr")
    seen = {}
    for on in (False, True):
        options = {"data": str(bench_dir), "width": 96, "height": 54, "cache_mb": 0, "memory": "va",
                   "vector_env": on}
        policy = PixelPolicy()
        out = tmp_path / f"pixels-{on}"
        res = run_episodes(suite, options, policy, suite.episodes(options), batch_size=2, out_dir=out,
                           max_turns=6, progress=False)
        seen[on] = ({n: (out / n).read_bytes() for n in FILES[:2]}, policy.seen, res.env_steps)
    assert seen[False] == seen[True]
    records = seen[True][0]["episodes.jsonl"]
    assert b"runner safety cap" in records and b'"stopped": true' in records  # capped and stopped episodes
    assert len(seen[True][1]) == seen[True][2] > 4


def test_replay_restores_a_slot_on_the_vector_path(bench_dir):
    """RL's resume path (``SlotPool.replay``: reset, then the saved answers) on one slot of the vector env
    leaves that slot as a single env would, and the other slots as they were."""
    suite = get_suite("tvr")
    infos = {}
    for on in (False, True):
        options = {"data": str(bench_dir), "width": 48, "height": 27, "cache_mb": 0, "vector_env": on}
        specs = suite.episodes(options)[:3]
        pool = SlotPool(suite, options, n_slots=3, max_turns=20)
        try:
            assert (pool.vector is not None) == on
            pool.start(list(enumerate(specs)))
            pool.turn(lambda slots: [Generation(text="Action: RotateLeft") for _ in slots])
            slot = pool.replay(1, specs[2], ["Action: RotateRight", "Action: LookDown"])
            after = pool.turn(lambda slots: [Generation(text="Action: RotateLeft") for _ in slots])
            infos[on] = [(o.step[1:4], o.step[4]["record"], np.asarray(o.step[0]).tobytes()) for o in after]
            assert slot.t == 3 and slot.history[:2] == ["Action: RotateRight", "Action: LookDown"]
        finally:
            pool.close()
    assert infos[False] == infos[True]


def test_vector_env_option_is_checked(bench_dir):
    from spatialrl.errors import DataError

    suite = get_suite("tvr")
    with pytest.raises(DataError, match="vector_env"):
        suite.make_vector_env({"data": str(bench_dir), "vector_env": "no"}, 2)
    assert suite.make_vector_env({"data": str(bench_dir), "vector_env": False}, 2) is None
    assert "vector_env" not in suite.default_options  # runs recorded before it resume unchanged
