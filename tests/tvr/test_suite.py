"""The TVR task suite through the generic runner and report (expert and random agents), plus options."""

import json

import numpy as np
import pytest

from spatialrl.agents.expert import ExpertPolicy
from spatialrl.agents.random import RandomPolicy
from spatialrl.envs.registry import get_suite
from spatialrl.envs.tvr.tasks import Bench
from spatialrl.errors import DataError
from spatialrl.rollout.runner import run_episodes


def opts(bench_dir, **kw):
    return {"data": str(bench_dir), "width": 48, "height": 27, **kw}


def test_episodes_limit_categories_and_options(bench_dir):
    suite = get_suite("tvr")
    eps = suite.episodes(opts(bench_dir))
    tasks = Bench(bench_dir).tasks("eval")
    assert [e.episode_id for e in eps] == [t["task_id"] for t in tasks]
    assert [e.category for e in eps] == [t["category"] for t in tasks]
    assert {e.category for e in suite.episodes(opts(bench_dir, limit=4))} == {
        "single-easy", "single-hard", "multi-easy", "multi-hard"}
    only = suite.episodes(opts(bench_dir, categories="multi-hard,single-easy"))
    assert sorted(e.category for e in only) == ["multi-hard", "single-easy"]
    assert len(suite.episodes(opts(bench_dir, split="diag_move"))) == 2
    with pytest.raises(DataError, match="unknown TVR option"):
        suite.episodes(opts(bench_dir, memry="va"))
    with pytest.raises(DataError, match="categories"):
        suite.episodes(opts(bench_dir, categories=["single-medium"]))
    with pytest.raises(DataError, match="bench folder"):
        suite.episodes({"data": None})
    with pytest.raises(DataError, match="unknown split"):
        suite.episodes(opts(bench_dir, split="test"))
    with pytest.raises(DataError, match="frames='stacked': expected one of separate, joined"):
        suite.episodes(opts(bench_dir, frames="stacked"))
    with pytest.raises(DataError, match="frames=joined needs target_once=false"):
        suite.episodes(opts(bench_dir, frames="joined", target_once=True))


def test_joined_frames_reach_the_policy_as_one_image_and_change_nothing_else(bench_dir):
    from spatialrl.agents.base import images_of

    suite = get_suite("tvr")
    seen: dict[str, list] = {}

    class Recording(ExpertPolicy):  # the expert's actions, with every turn's images kept
        def __init__(self, key):
            super().__init__()
            self.key = key

        def generate(self, conversations, sampling, infos=None):
            seen.setdefault(self.key, []).extend(images_of(c) for c in conversations)
            return super().generate(conversations, sampling, infos)

    results = {}
    for frames in ("separate", "joined"):
        options = opts(bench_dir, memory="ao", frames=frames, limit=4)
        res = run_episodes(suite, options, Recording(frames), suite.episodes(options), batch_size=4, progress=False)
        results[frames] = [(e["episode_id"], e["success"], e["steps"]) for e in res.episodes]
    assert results["joined"] == results["separate"]
    assert len(seen["joined"]) == len(seen["separate"]) > 0
    for two, (one,) in zip(seen["separate"], seen["joined"], strict=True):
        assert one.shape == (27, 96, 3) and (one == np.concatenate(two, axis=1)).all()


def test_expert_run_and_report_through_the_generic_runner(bench_dir, tmp_path):
    from spatialrl.eval.report import write_report

    suite = get_suite("tvr")
    options = opts(bench_dir, memory="ao")
    out = tmp_path / "run"
    out.mkdir()
    (out / "run.json").write_text(json.dumps({"task": "tvr", "agent": "expert", "options": options,
                                              "label": "expert"}))
    res = run_episodes(suite, options, ExpertPolicy(), suite.episodes(options), batch_size=3, out_dir=out,
                       progress=False)
    m = suite.summarize(res.episodes)
    assert m["overall"]["success_rate"] == 1.0 and m["overall"]["spl"] == 1.0
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert all(s["action"] is not None and "reward_progress" in s for s in steps)
    md, html = write_report([out], tmp_path / "report")
    page = html.read_text()
    assert page.count("_plan.png") >= 1 and "_frames.png" in page
    assets = list((tmp_path / "report" / "assets").rglob("*_plan.png"))
    assert assets and all(p.stat().st_size > 1000 for p in assets)


def test_random_agent_gets_counted_failures(bench_dir):
    suite = get_suite("tvr")
    options = opts(bench_dir, memory="window", window=2)
    res = run_episodes(suite, options, RandomPolicy(seed=0), suite.episodes(options), batch_size=4, progress=False)
    m = suite.summarize(res.episodes)["overall"]
    assert m["n"] == 4 and 0.0 <= m["success_rate"] < 1.0
    assert m["share_stop"] > 0 and m["mean_steps"] >= 1
    assert abs(sum(m[f"share_{k}"] for k in ("translation", "rotation", "look", "stop", "invalid")) - 1) < 1e-9


def test_render_episode_from_step_records_only(bench_dir, tmp_path):
    """An episode record cut short by a policy error has no poses: the plan comes from the bench task."""
    suite = get_suite("tvr")
    task = Bench(bench_dir).tasks("eval")[0]
    episode = {"episode_id": task["task_id"], "success": False, "n_steps": 0, "error": "boom"}
    html = suite.render_episode(episode, [], opts(bench_dir), tmp_path)
    assert 'src="' in html and (tmp_path / f"{task['task_id']}_plan.png").exists()
