"""The env: gymnasium contract, determinism, variants, episode budget, and the expert solving everything."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from spatialrl.envs.gp import ENV_ID
from spatialrl.envs.gp.card_images import TABLE_COLOR
from spatialrl.envs.gp.env import GeneralPointsEnv
from spatialrl.envs.gp.rewards import Outcome
from spatialrl.envs.gp.variants import SPLITS
from spatialrl.errors import DataError

RES = 160  # small tables keep the tests fast; layout is resolution-independent


def test_gymnasium_contract_in_both_modes():
    for mode in ("vl", "l"):
        env = GeneralPointsEnv(mode=mode, resolution=RES)
        check_env(env, skip_render_check=True)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
    made = gym.make(ENV_ID, mode="vl", resolution=RES)
    obs, info = made.reset(seed=1)
    assert obs.shape == (RES, RES, 3) and obs.dtype == np.uint8
    assert tuple(obs[0, 0]) == TABLE_COLOR
    assert {"expert_response", "candidate_responses", "record"} <= set(info)


def _rollout(env, seed, answers):
    obs, info = env.reset(seed=seed, options={"split": "in-dist"})
    trace = [(obs.tobytes() if isinstance(obs, np.ndarray) else obs, info["cards"], info["expert_response"],
              tuple(info["candidate_responses"]))]
    for a in answers:
        obs, reward, terminated, truncated, info = env.step(a)
        trace.append((reward, terminated, truncated, info["record"]["outcome"], tuple(info["candidate_responses"])))
        if terminated or truncated:
            break
    return trace


def test_same_seed_same_episode_different_seed_different_hand():
    answers = ["nonsense", '"formula": "1+2"', '"formula": "(1+2"']
    a = _rollout(GeneralPointsEnv(resolution=RES), 11, answers)
    b = _rollout(GeneralPointsEnv(resolution=RES), 11, answers)
    assert a == b
    hands = {tuple(GeneralPointsEnv(mode="l").reset(seed=s)[1]["cards"]) for s in range(12)}
    assert len(hands) >= 10


def test_budget_and_termination():
    env = GeneralPointsEnv(mode="l")
    _, info = env.reset(seed=5)
    assert info["remaining_steps"] == 5 and info["verify_info"] is None
    for k in range(1, 6):
        _, reward, terminated, truncated, info = env.step("no answer here")
        assert reward == -3 and not terminated and truncated == (k == 5)
        assert info["record"]["attempt"] == k and info["remaining_steps"] == 5 - k
    episode = info["episode"]
    assert episode["success"] is False and episode["attempts"] == 5
    assert episode["outcome_counts"][Outcome.ILLEGAL_FORMULA] == 5 and sum(episode["outcome_counts"].values()) == 5
    with pytest.raises(RuntimeError, match="reset"):
        env.step("again")

    _, info = env.reset(seed=5, options={"split": "recognition"})
    _, _, terminated, truncated, info = env.step(info["expert_response"])
    assert terminated and not truncated and info["episode"]["success"]
    _, info = env.reset(seed=5, options={"verify_iter": 2})
    env.step("x")
    assert env.step("x")[3]  # truncated after the second answer


def test_variants_deal_what_they_promise():
    env = GeneralPointsEnv(mode="l")
    for seed in range(30):
        _, info = env.reset(seed=seed, options={"split": "rule-ood"})
        ranks = [c[1:] for c in info["cards"]]
        assert any(r in ("J", "Q", "K") for r in ranks)
        assert all(c[0] in "SC" for c in info["cards"]) and not info["face_cards_as_10"]
        assert info["numbers"] == [{"A": 1, "J": 11, "Q": 12, "K": 13}.get(r) or int(r) for r in ranks]
        _, info = env.reset(seed=seed, options={"split": "visual-ood"})
        assert all(c[0] in "HD" for c in info["cards"]) and max(info["numbers"]) <= 10
        _, info = env.reset(seed=seed, options={"split": "in-dist"})
        assert all(c[0] in "SC" for c in info["cards"]) and max(info["numbers"]) <= 10
        assert info["solutions"]  # always solvable


def test_fixed_cards_and_bad_options():
    env = GeneralPointsEnv(mode="l")
    _, info = env.reset(seed=0, options={"cards": "HA S5 D5 C5"})
    assert info["numbers"] == [1, 5, 5, 5] and info["plain_cards"] == ["A", "5", "5", "5"]
    with pytest.raises(DataError, match="cannot make 24"):
        env.reset(options={"cards": ["HA", "SA", "DA", "CA"]})
    with pytest.raises(DataError, match="card 'ZZ'"):
        env.reset(options={"cards": ["HA", "SA", "DA", "ZZ"]})
    with pytest.raises(DataError, match="unknown split"):
        env.reset(options={"split": "nope"})
    with pytest.raises(DataError, match="unknown key"):
        env.reset(options={"splitt": "in-dist"})
    with pytest.raises(DataError, match="mode"):
        GeneralPointsEnv(mode="text")


def test_vl_vision_penalty_and_recognition_record():
    env = GeneralPointsEnv(mode="vl", resolution=RES)
    _, info = env.reset(seed=0, options={"cards": "HA S5 D5 C5"})
    _, reward, _, _, info = env.step('{"cards": ["A", "5", "5", "4"], "formula": "5*(5-1/5)"}')
    assert reward == -1.5 and info["record"]["outcome"] == "INCORRECT_VISION"
    assert info["record"]["recognition_correct"] is False and info["verify_info"] == "you recognized wrong cards"
    _, reward, terminated, _, info = env.step('{"cards": ["5", "5", "A", "5"], "formula": "5*(5-1/5)=24"}')
    assert reward == 5 and terminated
    ep = info["episode"]
    assert (ep["recognition_steps"], ep["recognition_correct_steps"], ep["recognition_correct"]) == (2, 1, False)


@pytest.mark.parametrize("mode", ["vl", "l"])
@pytest.mark.parametrize("split", list(SPLITS))
def test_expert_solves_every_hand(split, mode):
    env = GeneralPointsEnv(mode=mode, resolution=RES)
    for seed in range(25):
        _, info = env.reset(seed=seed, options={"split": split})
        _, reward, terminated, truncated, info = env.step(info["expert_response"])
        assert terminated and not truncated and reward == 5, (split, mode, seed, info["record"])
        assert info["episode"]["success"] and info["episode"]["recognition_correct"]


def test_candidates_are_well_formed_and_sometimes_right():
    env = GeneralPointsEnv(mode="vl", resolution=RES, n_candidates=8)
    outcomes = []
    for seed in range(40):
        _, info = env.reset(seed=seed)
        assert len(info["candidate_responses"]) == 8
        for text in info["candidate_responses"]:
            _, _, terminated, truncated, step_info = env.step(text)
            outcomes.append(step_info["record"]["outcome"])
            assert step_info["record"]["recognition_correct"]
            if terminated or truncated:
                break
    assert set(outcomes) <= {"CORRECT_SOLUTION", "NO_SOLUTION"}  # right cards and numbers, random formula
    assert "CORRECT_SOLUTION" in outcomes and "NO_SOLUTION" in outcomes
