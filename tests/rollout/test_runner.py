"""The batched runner on a small real task: reach a target count by answering "+1"/"stop"."""

from __future__ import annotations

import json

import pytest

from spatialrl.agents.base import Generation, SamplingParams
from spatialrl.agents.expert import ExpertPolicy
from spatialrl.agents.random import RandomPolicy
from spatialrl.eval.report import write_report
from spatialrl.eval.runs import open_run_dir
from spatialrl.io import read_jsonl
from spatialrl.rollout.runner import run_episodes


class CountingPolicy(ExpertPolicy):
    """The expert, recording how many conversations each generate call got."""

    def __init__(self):
        self.batches: list[int] = []

    def generate(self, conversations, sampling, infos=None):
        self.batches.append(len(conversations))
        return super().generate(conversations, sampling, infos)


def test_expert_solves_all_in_batches(tmp_path, count_suite):
    policy = CountingPolicy()
    eps = count_suite.episodes({"n": 10})
    res = run_episodes(count_suite, {}, policy, eps, batch_size=4, out_dir=tmp_path, progress=False)
    assert [r["episode_id"] for r in res.episodes] == [e.episode_id for e in eps]
    assert all(r["success"] for r in res.episodes)
    assert max(policy.batches) == 4  # lock-step batches, slots refilled as episodes finish
    steps = list(read_jsonl(tmp_path / "steps.jsonl"))
    assert len(steps) == res.env_steps == sum(r["n_steps"] for r in res.episodes)
    # episode i needs target i%4 increments then stop
    assert res.env_steps == sum(i % 4 + 1 for i in range(10))


def test_resume_after_kill_has_no_duplicates(tmp_path, count_suite):
    eps = count_suite.episodes({"n": 8})
    run_episodes(count_suite, {}, ExpertPolicy(), eps[:3], batch_size=2, out_dir=tmp_path, progress=False)
    # Simulate a crash: steps of an unfinished episode and a torn last line are on disk.
    with open(tmp_path / "steps.jsonl", "a") as f:
        f.write(json.dumps({"episode_id": "ep5", "t": 0}) + "\n")
    with open(tmp_path / "episodes.jsonl", "a") as f:
        f.write('{"episode_id": "ep7", "succ')
    res = run_episodes(count_suite, {}, ExpertPolicy(), eps, batch_size=3, out_dir=tmp_path, progress=False)
    assert res.new_episodes == 5
    ids = [r["episode_id"] for r in read_jsonl(tmp_path / "episodes.jsonl")]
    assert sorted(ids) == sorted(e.episode_id for e in eps)
    steps = list(read_jsonl(tmp_path / "steps.jsonl"))
    assert len(steps) == sum(i % 4 + 1 for i in range(8))
    assert len({(s["episode_id"], s["t"]) for s in steps}) == len(steps)


class FlakyPolicy:
    name = "flaky"

    def generate(self, conversations, sampling, infos=None):
        return [Generation(text="", error="server error 500 after 3 retries") if "n=2" in c[-1]["content"][0]["text"]
                and len(c) > 1 else Generation(text=i["expert_response"]) for c, i in zip(conversations, infos)]


def test_policy_error_is_recorded_and_run_continues(tmp_path, count_suite):
    eps = count_suite.episodes({"n": 6})
    res = run_episodes(count_suite, {}, FlakyPolicy(), eps, batch_size=6, out_dir=tmp_path, progress=False)
    by_id = {r["episode_id"]: r for r in res.episodes}
    # targets 2 and 3 reach n=2 -> error; targets 0 and 1 finish
    assert by_id["ep2"]["error"] and not by_id["ep2"]["success"]
    assert by_id["ep0"]["success"] and by_id["ep1"]["success"] and by_id["ep4"]["success"] and by_id["ep3"]["error"]
    assert len(res.episodes) == 6


def test_random_policy_is_seeded(tmp_path, count_suite):
    eps = count_suite.episodes({"n": 12})
    a = run_episodes(count_suite, {}, RandomPolicy(3), eps, batch_size=5, progress=False)
    b = run_episodes(count_suite, {}, RandomPolicy(3), eps, batch_size=5, progress=False)
    assert [r["n_steps"] for r in a.episodes] == [r["n_steps"] for r in b.episodes]
    assert 0 < sum(r["success"] for r in a.episodes) < 12


def test_run_dir_refuses_a_different_run(tmp_path, count_suite):
    cfg = {"task": "count", "agent": "expert", "options": {}, "sampling": {}}
    open_run_dir(tmp_path / "r", cfg)
    open_run_dir(tmp_path / "r", cfg)  # same run: resume is fine
    from spatialrl.errors import SpatialRLError

    with pytest.raises(SpatialRLError, match="different run"):
        open_run_dir(tmp_path / "r", {**cfg, "agent": "random"})


def test_report_lists_runs(tmp_path, count_suite):
    eps = count_suite.episodes({"n": 4})
    for agent, policy in (("expert", ExpertPolicy()), ("random", RandomPolicy(0))):
        d = tmp_path / agent
        open_run_dir(d, {"task": "count", "agent": agent, "options": {}, "sampling": {}, "label": agent})
        run_episodes(count_suite, {}, policy, eps, batch_size=2, out_dir=d, sampling=SamplingParams(), progress=False)
    md, html = write_report([tmp_path / "expert", tmp_path / "random"], tmp_path / "rep")
    text = md.read_text()
    assert "| expert | 1.000 |" in text and "| random |" in text
    assert (tmp_path / "rep" / "assets" / "count_success.png").exists()
    assert "<table>" in html.read_text()
