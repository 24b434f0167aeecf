"""The tried-actions memory of greedy evaluation (``agents/tried_actions.py``), on a real TVR bench and a real
tiny model: the model scores the candidates, and a looping greedy answer is what it has to break."""

from __future__ import annotations

import json
import math
from collections import Counter

import numpy as np
import pytest

from spatialrl.agents.base import Generation, SamplingParams
from spatialrl.agents.hf import HFPolicy
from spatialrl.agents.tried_actions import TriedActionsPolicy, choose, parse_penalty, view_key
from spatialrl.errors import SpatialRLError
from spatialrl.eval.evaluate import evaluate
from spatialrl.models.builtin import build_model

OPTIONS = {"width": 112, "height": 64, "memory": "ao", "frames": "joined", "split": "eval", "limit": 4}


@pytest.fixture(scope="module")
def bench(one_scene_tvr_bench):
    return one_scene_tvr_bench


class AlwaysRotateLeft(HFPolicy):
    """A real tiny model whose greedy answer is fixed: turning left forever, the simplest loop a memoryless
    greedy policy falls into (the model still scores the candidates when the memory asks)."""

    def generate(self, conversations, sampling, infos=None):
        return [Generation(text="Action: RotateLeft", completion_tokens=4) for _ in conversations]


@pytest.fixture(scope="module")
def looping():
    model, processor, _ = build_model("tiny", seed=1)
    return AlwaysRotateLeft(model, processor, name="looping", device="cpu")


def _steps(run):
    by_episode: dict[str, list[dict]] = {}
    for line in (run / "steps.jsonl").read_text().splitlines():
        step = json.loads(line)
        by_episode.setdefault(step["episode_id"], []).append(step)
    return by_episode


def test_choose_takes_the_most_likely_of_the_least_given_answers():
    logp = np.log([0.6, 0.3, 0.1])
    assert choose(logp, [0, 0, 0], math.inf) == 0
    assert choose(logp, [1, 0, 0], math.inf) == 1
    assert choose(logp, [1, 1, 0], math.inf) == 2
    assert choose(logp, [2, 1, 1], math.inf) == 1  # all given: the least-given, most likely first
    assert choose(logp, [1, 0, 0], 0.1) == 0  # a small penalty keeps a confident first choice
    assert choose(logp, [1, 0, 0], 1.0) == 1
    assert choose(logp, [1, 0, 0], 0.0) == 0


def test_parse_penalty_names_what_it_wants():
    assert parse_penalty("inf") == math.inf and parse_penalty("0.5") == 0.5 and parse_penalty(2) == 2.0
    for bad in ("-1", "nan", "lots", None):
        with pytest.raises(SpatialRLError, match="a number >= 0 or 'inf'"):
            parse_penalty(bad)


def test_view_key_is_the_last_image_of_the_last_user_turn():
    a, b = np.zeros((4, 6, 3), np.uint8), np.ones((4, 6, 3), np.uint8)

    def conv(*images):
        return [{"role": "user", "content": [{"type": "image", "image": im} for im in images]}]
    assert view_key(conv(b, a)) == view_key(conv(a)) != view_key(conv(a, b))
    assert view_key([{"role": "user", "content": [{"type": "text", "text": "no image"}]}]) is None


def test_the_memory_breaks_a_greedy_loop_and_plain_greedy_does_not(bench, looping, tmp_path):
    plain_run, memory_run = tmp_path / "plain", tmp_path / "memory"
    options = {**OPTIONS, "data": str(bench)}
    evaluate("tvr", "looping", options, plain_run, policy=looping, batch_size=4, progress=False,
             sampling=SamplingParams(max_new_tokens=16))
    evaluate("tvr", "looping", options, memory_run, policy=looping, batch_size=4, progress=False,
             sampling=SamplingParams(max_new_tokens=16), tried_penalty=math.inf)
    assert json.loads((memory_run / "run.json").read_text())["tried_penalty"] == "inf"
    assert "tried_penalty" not in json.loads((plain_run / "run.json").read_text())

    plain = _steps(plain_run)
    assert not any("greedy_response" in s for steps in plain.values() for s in steps)
    for steps in plain.values():  # the loop: every pose comes back and RotateLeft is given there again
        assert {s["action"] for s in steps} == {"RotateLeft"}
        assert max(Counter((tuple(s["prev_pose"]), s["action"]) for s in steps).values()) > 1
    memory = _steps(memory_run)
    assert memory.keys() == plain.keys()
    changed = 0
    for steps in memory.values():
        pairs = Counter((tuple(s["prev_pose"]), s["action"]) for s in steps)
        assert max(pairs.values()) == 1  # never the same answer twice at the same view
        changed += sum(s["action"] != "RotateLeft" for s in steps)
        # a changed step keeps the model's own answer; an unchanged one has no such field
        assert all((s.get("greedy_response") == "Action: RotateLeft") == (s["action"] != "RotateLeft") for s in steps)
    assert changed >= len(memory)  # each episode left its loop at least once


def test_off_at_penalty_zero_and_refused_where_it_cannot_work(looping, bench):
    from spatialrl.eval.image_probe import probe_states

    states = probe_states(bench, "eval", {"width": 112, "height": 64, "memory": "ao", "frames": "joined"}, n=2)
    infos = [{"task_id": f"t{i}", "step": 0, "candidate_responses": ["Action: RotateLeft", "Action: Stop"]}
             for i in range(2)]
    greedy = SamplingParams(max_new_tokens=16)
    off = TriedActionsPolicy(looping, 0.0)
    for _ in range(3):
        assert [g.text for g in off.generate(states, greedy, infos)] == ["Action: RotateLeft"] * 2
    on = TriedActionsPolicy(looping, math.inf)
    before = on.usage["tried_overrides"]  # the count lives in the wrapped policy's usage, shared by runs
    first = on.generate(states, greedy, infos)
    again = on.generate(states, greedy, [{**info, "step": 1} for info in infos])
    assert [g.text for g in first] == ["Action: RotateLeft"] * 2
    assert [g.text for g in again] == ["Action: Stop"] * 2  # the only answer not yet given at these views
    assert on.usage["tried_overrides"] - before == 2
    restart = on.generate(states, greedy, infos)  # step 0: a new episode, a fresh memory
    assert [g.text for g in restart] == ["Action: RotateLeft"] * 2

    with pytest.raises(SpatialRLError, match="greedy decoding"):
        on.generate(states, SamplingParams(temperature=1.0, max_new_tokens=16), infos)
    with pytest.raises(SpatialRLError, match="two conversations of one task"):
        on.generate(states, greedy, [infos[0], infos[0]])
    from spatialrl.agents.expert import ExpertPolicy

    with pytest.raises(SpatialRLError, match="local model agent"):
        TriedActionsPolicy(ExpertPolicy(), math.inf)


def test_the_eval_flag_is_checked_before_anything_runs(tmp_path):
    from typer.testing import CliRunner

    from spatialrl.cli import app

    result = CliRunner().invoke(app, ["eval", "--task", "tvr", "--agent", "expert", "--tried-penalty", "inf",
                                      "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "only applies to hf:PATH and builtin:NAME" in result.output
    result = CliRunner().invoke(app, ["eval", "--task", "tvr", "--agent", "builtin:tvr-ao-sft", "--tried-penalty",
                                      "-2", "--out", str(tmp_path / "run")])
    assert result.exit_code == 2 and "a number >= 0 or 'inf'" in result.output
    assert not (tmp_path / "run").exists()
