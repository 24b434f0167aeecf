"""The `virl` suite end to end through the batched runner: splits, expert 100%, random baseline, the
reference JSONL layout and the report fragment."""

from __future__ import annotations

import json

import pytest

from spatialrl.agents.expert import ExpertPolicy
from spatialrl.agents.random import RandomPolicy
from spatialrl.envs.registry import get_suite
from spatialrl.errors import DataError, SpatialRLError
from spatialrl.io import read_jsonl
from spatialrl.rollout.runner import run_episodes


@pytest.fixture(scope="module")
def suite():
    return get_suite("virl")


def _opts(city, other, **kw):
    return {**get_suite("virl").default_options, "data": str(city), "visual_data": str(other), **kw}


def test_splits_and_options(suite, city_data, other_city_data):
    eps = suite.episodes(_opts(city_data, other_city_data, split="all", mode="l"))
    cats = [e.category for e in eps]
    assert cats.count("in-dist") == 48 and cats.count("rule-ood") == 48
    assert cats.count("visual-ood") == 7  # the first 18 routes in file order; this city has 7
    ind = [e for e in eps if e.category == "in-dist"]
    rule = [e for e in eps if e.category == "rule-ood"]
    assert [e.reset_options["stream"] for e in ind] == [e.reset_options["stream"] for e in rule]
    assert ind[5].reset_options["stream"] == {"seed": 12, "index": 5, "ordered": False}
    assert ind[0].reset_options["absolute_action"] and not rule[0].reset_options["absolute_action"]
    vis = [e for e in eps if e.category == "visual-ood"]
    assert vis[3].reset_options["stream"]["ordered"] and vis[3].reset_options["data"] == str(other_city_data)
    assert len(suite.episodes(_opts(city_data, other_city_data, split="in-dist,visual-ood", limit=2))) == 4
    with pytest.raises(SpatialRLError, match="unknown option"):
        suite.episodes(_opts(city_data, other_city_data, splitt="x"))
    with pytest.raises(SpatialRLError, match="unknown split"):
        suite.episodes(_opts(city_data, other_city_data, split="ood"))
    with pytest.raises(SpatialRLError, match="rail_mode"):
        suite.episodes(_opts(city_data, other_city_data, rail_mode="fixd"))
    with pytest.raises(SpatialRLError, match="dataset folder is required"):
        suite.episodes({"split": "in-dist"})
    with pytest.raises(DataError, match="not a folder"):
        suite.episodes(_opts(city_data / "nope", other_city_data))


def test_expert_is_perfect_and_random_is_not_on_every_split_language(suite, city_data, other_city_data, tmp_path):
    opts = _opts(city_data, other_city_data, split="all", mode="l")
    eps = suite.episodes(opts)
    res = run_episodes(suite, opts, ExpertPolicy(), eps, batch_size=8, out_dir=tmp_path / "expert", progress=False)
    metrics = suite.summarize(res.episodes)
    for split in ("in-dist", "rule-ood", "visual-ood", "overall"):
        assert metrics[split]["success_rate"] == 1.0 and metrics[split]["per_step_accuracy"] == 1.0
    rnd = run_episodes(suite, opts, RandomPolicy(seed=0), eps, batch_size=8, out_dir=tmp_path / "random",
                       progress=False)
    rm = suite.summarize(rnd.episodes)
    assert 0.0 < rm["overall"]["per_step_accuracy"] < 0.5 and rm["overall"]["success_rate"] < 0.2
    # the random agent's accuracy follows the action-space size: 1/10 vs 1/6 per attempt
    assert rm["in-dist"]["per_step_accuracy"] < rm["rule-ood"]["per_step_accuracy"]


def test_expert_vision_language_small_grid_and_reference_logs(suite, city_data, other_city_data, tmp_path):
    opts = _opts(city_data, other_city_data, split="all", mode="vl", grid_size=64)
    eps = suite.episodes(opts)
    out = tmp_path / "vl"
    res = run_episodes(suite, opts, ExpertPolicy(), eps, batch_size=8, out_dir=out, progress=False)
    metrics = suite.summarize(res.episodes)
    for split in ("in-dist", "rule-ood", "visual-ood"):
        assert metrics[split]["success_rate"] == 1.0 and metrics[split]["per_step_accuracy"] == 1.0
    suite.after_run(out, opts)
    logs = sorted(p.name for p in (out / "reference_logs").iterdir())
    assert logs == ["virl_vl_indist.jsonl", "virl_vl_rule_ood.jsonl", "virl_vl_visual_ood.jsonl"]
    lines = list(read_jsonl(out / "reference_logs" / "virl_vl_rule_ood.jsonl"))
    steps = [x for x in lines if "veri_step" in x]
    assert set(steps[0]) == {"sample_id", "veri_step", "output", "reward", "info"}
    assert set(steps[0]["info"]) == {"global_instruction", "current_instruction", "instruction_idx", "gt_action",
                                     "Verify Info", "current_obs", "obs_act_seq", "is_success"}
    assert [x["veri_step"] for x in steps if x["sample_id"] == 0] == list(range(len([s for s in steps if s["sample_id"] == 0])))
    first_end = next(i for i, x in enumerate(lines) if "Success" in x)
    assert lines[first_end] == {"Success": True}
    summary = lines[first_end + 1]
    assert summary["sample_id"] == 0 and "veri_step" not in summary
    assert summary["reward"] == float(len([s for s in steps if s["sample_id"] == 0]))
    assert lines[first_end + 2] == {"Split": "===================="}
    final = lines[-1]
    assert final["Trajectory Number"] == 48 and final["Step Number"] == len(steps)
    assert final["Rates"] == {"CORRECT_ACTION": 1.0, "INCORRECT_ACTION": 0.0, "INCORRECT_OBS": 0.0,
                              "CORRECT_SOLUTION": 1.0}
    assert all("turn_direction(" not in x["info"]["gt_action"] or x["info"]["gt_action"].split("(")[1][:-1]
               in ("left", "right", "slightly left", "slightly right") for x in steps)


def test_reference_rates_count_retries_and_forced_steps(suite, golden_data, tmp_path):
    from spatialrl.envs.virl.metrics import reference_lines

    eps = [{"episode_id": "in-dist-000", "success": False, "return": -3.5},
           {"episode_id": "in-dist-001", "success": True, "return": 1.0}]
    steps = [{"episode_id": "in-dist-000", "t": t, "response": "x", "reward": r} for t, r in enumerate([-1.0, -1.5, -1.0])]
    steps.append({"episode_id": "in-dist-001", "t": 0, "response": "y", "reward": 1.0})
    lines = reference_lines(eps, steps)
    assert lines[-1] == {"Step Number": 4, "Trajectory Number": 2, "Rates": {
        "CORRECT_ACTION": 0.25, "INCORRECT_ACTION": 0.5, "INCORRECT_OBS": 0.25, "CORRECT_SOLUTION": 0.5}}
    assert suite.summarize([{**e, "category": "in-dist", "n_steps": n, "n_correct": c}
                            for e, n, c in zip(eps, (3, 1), (0, 1), strict=True)])["in-dist"]["per_step_accuracy"] == 0.25


def test_render_episode_shows_grids_outputs_and_verifier(suite, golden_data, tmp_path):
    opts = {"data": str(golden_data), "split": "in-dist", "mode": "vl", "grid_size": 64, "limit": 1}
    eps = suite.episodes(opts)
    res = run_episodes(suite, opts, RandomPolicy(seed=1), eps, batch_size=1, out_dir=tmp_path / "run", progress=False)
    steps = list(read_jsonl(tmp_path / "run" / "steps.jsonl"))
    html = suite.render_episode(res.episodes[0], steps, opts, tmp_path / "assets")
    images = sorted((tmp_path / "assets").glob("*.jpg"))
    assert len(images) == len(steps) and html.count("<img") == len(steps)
    assert "you make incorrect action" in html or "Correct action" in html
    assert json.dumps(steps[0]["view"])  # the view the model saw is logged per step
