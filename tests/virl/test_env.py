"""The env: rewards of every verifier branch, retries, the forced failure after the budget, info keys,
the reference-compatible episode stream, both action spaces and both modes."""

from __future__ import annotations

import random
import warnings

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from spatialrl.envs.virl.env import VirlEnv
from spatialrl.envs.virl.rail import build_rail
from spatialrl.envs.virl.validate import load_dataset
from spatialrl.envs.virl.verify import (
    MSG_AT_INTERSECTION,
    MSG_BUDGET,
    MSG_NOT_AT_INTERSECTION,
    MSG_WRONG_ACTION,
    read_field,
)

REFERENCE_KEYS = {"global_instruction", "current_instruction", "instruction_idx", "gt_action", "Verify Info",
                  "current_obs", "obs_act_seq", "is_success"}


def answer(action: str, observation: str = "No landmarks nearby; ") -> str:
    return f'{{\n  "current observation": "{observation}",\n  "current instruction": "x",\n  "action": "{action}",\n}}'


def env_at(data, route: int, point: int, mode="l", **kw) -> tuple[VirlEnv, dict]:
    """An env on ``route`` (all interpolated points kept) advanced by the expert to rail ``point``."""
    env = VirlEnv(data, mode=mode, drop_rate=0.0, grid_size=64, **kw)
    _, info = env.reset(options={"route_idx": route, "start_heading": 197})
    for _ in range(point):
        _, r, _, _, info = env.step(info["expert_response"])
        assert r == 1
    return env, info


def test_reset_info_and_keys(golden_data):
    env = VirlEnv(golden_data, mode="l", drop_rate=0.0)
    obs, info = env.reset(options={"route_idx": 0, "start_heading": 197})
    assert REFERENCE_KEYS <= set(info) and REFERENCE_KEYS <= set(info["record"])
    assert {"expert_response", "candidate_responses", "record"} <= set(info)
    assert info["instruction_idx"] == 0 and info["Verify Info"] is None and info["is_success"] is True
    assert info["gt_action"] == "turn_direction(north)"
    assert info["current_instruction"] == "First, turn left to face north."
    assert obs == info["current_obs"] == "No landmarks nearby; "
    assert info["obs_act_seq"] == "O_1: No landmarks nearby; \nA_1: \n"
    assert len(info["candidate_responses"]) == 10 and info["expert_response"] in info["candidate_responses"]
    _, r, term, trunc, info = env.step(info["expert_response"])
    assert (r, term, trunc) == (1.0, False, False)
    assert info["instruction_idx"] == 2 and info["Verify Info"] == "Correct action."
    assert info["obs_act_seq"] == (
        "O_1: No landmarks nearby; \nA_1: turn_direction(north)\nO_2: No landmarks nearby; \nA_2: \n")
    assert info["record"]["action"] == "turn_direction(north)" and info["record"]["rail_index"] == 0


def test_wrong_action_keeps_state_and_retry_can_still_succeed(golden_data):
    env, info = env_at(golden_data, 3, 0)
    before = dict(info)
    _, r, term, trunc, info = env.step(answer("forward()"))
    assert (r, term, trunc) == (-1.0, False, False)
    assert info["Verify Info"] == MSG_WRONG_ACTION + "."
    assert "{{\n" in info["Verify Info"] and info["Verify Info"].endswith("}}.")
    for key in ("gt_action", "current_obs", "obs_act_seq", "current_instruction"):
        assert info[key] == before[key]
    while True:
        _, r, term, trunc, info = env.step(info["expert_response"])
        assert r == 1
        if term:
            break
    ep = info["episode"]
    assert ep["success"] is True and ep["n_steps"] == 6 and ep["n_correct"] == 5  # 5-point rail + 1 retry
    assert ep["per_step_accuracy"] == pytest.approx(5 / 6)
    assert ep["n_retries"] == 1 and ep["n_retry_correct"] == 1  # the retry after the wrong answer, right
    assert ep["n_destination"] == 1 and ep["n_destination_correct"] == 1  # stopped at the first attempt there
    from spatialrl.envs.virl.metrics import summarize

    failed = {**ep, "category": "in-dist", "n_retries": 3, "n_retry_correct": 0, "success": False,
              "n_destination_correct": 0}
    row = summarize([{**ep, "category": "in-dist"}, failed])["in-dist"]
    assert row["retries"] == 4 and row["retry_accuracy"] == pytest.approx(1 / 4)
    assert row["reached_destination"] == 2 and row["destination_accuracy"] == pytest.approx(1 / 2)
    assert "retries" not in summarize([{k: v for k, v in ep.items() if "retr" not in k}])["overall"]  # older runs


def test_intersection_observation_branches_faithful(golden_data):
    # forward point: claiming an intersection → −1.5 "not at any intersection"
    env, _ = env_at(golden_data, 0, 1)
    _, r, _, _, info = env.step(answer("stop()", "No landmarks nearby; You observe an intersection"))
    assert r == -1.5 and info["Verify Info"] == MSG_NOT_AT_INTERSECTION + "."
    # real intersection (point 5): the reference compares with the landmark text only → same misfire
    env, info = env_at(golden_data, 0, 5)
    assert info["current_obs"].endswith("You observe an intersection")
    _, r, _, _, info = env.step(answer("forward()", info["current_obs"]))
    assert r == -1.5 and info["Verify Info"] == MSG_NOT_AT_INTERSECTION + "."
    # ...and omitting the intersection there is just a wrong action
    _, r, _, _, info = env.step(answer("forward()", "Joe's Pizza is on your right; "))
    assert r == -1.0
    # a landmark whose name contains "intersection" makes the other branch fire (route 1, point 5)
    # (case-sensitive, as in the reference: "Intersection Books" would not count)
    env, info = env_at(golden_data, 1, 5)
    assert info["current_obs"].startswith("Pizza at the intersection is on your left")
    _, r, _, _, info = env.step(answer("forward()", "Pizza on the left"))
    assert r == -1.5 and info["Verify Info"] == MSG_AT_INTERSECTION + "."


def test_intersection_observation_branches_fixed(golden_data):
    env, info = env_at(golden_data, 0, 5, rail_mode="intersection_reward")
    _, r, _, _, info = env.step(answer("forward()", info["current_obs"]))
    assert r == -1.0  # the intersection claim is right, only the action is wrong
    _, r, _, _, info = env.step(answer("forward()", "Joe's Pizza is on your right; "))
    assert r == -1.5 and info["Verify Info"] == MSG_AT_INTERSECTION + "."
    env, _ = env_at(golden_data, 0, 1, rail_mode="intersection_reward")
    _, r, _, _, info = env.step(answer("stop()", "You observe an intersection"))
    assert r == -1.5 and info["Verify Info"] == MSG_NOT_AT_INTERSECTION + "."


def test_forced_failure_after_budget_at_a_non_stop_point(golden_data):
    env, info = env_at(golden_data, 0, 0, mode="vl")
    start_pano = env._view["pano_id"]
    seq = info["obs_act_seq"]
    for _ in range(2):
        _, r, term, trunc, info = env.step(answer("forward()"))
        assert r == -1 and not term and not trunc
    obs, r, term, trunc, info = env.step(answer("turn_direction(north)"))  # the text is not even read
    assert (r, term, trunc) == (-1.0, False, True)
    assert info["Verify Info"] == MSG_BUDGET and info["is_success"] is False
    assert info["episode"]["success"] is False and info["episode"]["n_steps"] == 3
    # info describes the next rail point; the history gains no line
    assert info["gt_action"] == "forward()" and info["instruction_idx"] == 2
    assert info["obs_act_seq"] == seq
    assert info["record"]["action"] is None and info["record"]["evaluated"] is False
    # the image: old position, next point's heading (0°), not the start heading (197°)
    assert np.array_equal(obs, env.renderer.render(start_pano, 0.0))
    assert not np.array_equal(obs, env.renderer.render(start_pano, 197))
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step("forward()")


def test_forced_failure_at_the_stop_point(golden_data):
    env, info = env_at(golden_data, 3, 4)
    assert info["gt_action"] == "stop()"
    assert info["current_obs"] == "The destination Bluebird Books is on your right front; "
    env.step(answer("forward()"))
    env.step(answer("forward()"))
    _, r, term, trunc, info = env.step(answer("stop()"))
    assert (r, term, trunc) == (-1.0, True, True)
    assert info["episode"]["success"] is False and info["episode"]["progress"] == pytest.approx(1.0)


def test_verify_iter_zero_truncates_at_once(golden_data):
    env = VirlEnv(golden_data, mode="l", verify_iter=0)
    _, info = env.reset(seed=0)
    _, r, term, trunc, info = env.step(info["expert_response"])
    assert (r, trunc) == (-1.0, True)


@pytest.mark.parametrize("absolute", [True, False])
def test_expert_solves_every_route_in_both_action_spaces(golden_data, city_data, absolute):
    for data in (golden_data, city_data):
        env = VirlEnv(data, mode="l", absolute_action=absolute)
        for route in range(len(env.dataset.routes)):
            _, info = env.reset(seed=route, options={"route_idx": route})
            term = trunc = False
            while not (term or trunc):
                _, r, term, trunc, info = env.step(info["expert_response"])
                assert r == 1
            assert term and info["episode"]["success"] and info["episode"]["per_step_accuracy"] == 1.0
            actions = {read_field(c, "action") for c in info["candidate_responses"]}
            assert ("turn_direction(north)" in actions) == absolute
            assert ("turn_direction(slightly left)" in actions) == (not absolute)
            assert {"forward()", "stop()"} <= actions and len(actions) == (10 if absolute else 6)


def test_stream_matches_one_sequential_reference_run(city_data):
    ds = load_dataset(city_data, images=False)
    rng = random.Random(12)  # the evaluator: random.seed(12) once, then episode after episode
    expected = []
    for _ in range(6):
        route = rng.choice(ds.routes).index
        expected.append(build_rail(ds, route, rng))
    env = VirlEnv(city_data, mode="l")
    for k in (5, 0, 3):  # any order, each from a fresh replay
        _, info = env.reset(options={"stream": {"seed": 12, "index": k}})
        assert env.rail == expected[k]
    ordered = []
    rng = random.Random(12)
    for k in range(3):
        ordered.append(build_rail(ds, k, rng))
    for k in range(3):
        env.reset(options={"stream": {"seed": 12, "index": k, "ordered": True}})
        assert env.rail.route_index == k and env.rail == ordered[k]


def test_reset_seed_and_options(golden_data, other_city_data):
    env = VirlEnv(golden_data, mode="l")
    env.reset(seed=7)
    a = env.rail
    env.reset(seed=7)
    assert env.rail == a
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"route": 1})
    with pytest.raises(ValueError, match="out of range"):
        env.reset(options={"route_idx": 99})
    env.reset(options={"data": str(other_city_data), "route_idx": 6})
    assert len(env.dataset.routes) == 7


def test_gymnasium_env_checker_passes(golden_data):
    for mode in ("vl", "l"):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            check_env(VirlEnv(golden_data, mode=mode, grid_size=64), skip_render_check=True)


def test_vl_observation_is_the_grid_of_the_current_point(golden_data):
    env = VirlEnv(golden_data, mode="vl", grid_size=64, drop_rate=0.0)
    obs, info = env.reset(options={"route_idx": 0, "start_heading": 197})
    assert obs.shape == (64, 64, 3) and obs.dtype == np.uint8 and obs.flags.writeable
    assert np.array_equal(obs, env.renderer.render(env._view["pano_id"], 197))
    assert "O_1: You observe an image of 4 views; \nA_1: \n" == info["obs_act_seq"]
    obs2, *_ = env.step(info["expert_response"])
    assert not np.array_equal(obs, obs2)
