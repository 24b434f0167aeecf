"""The TVR env on a real generated bench: success rule, budgets, rewards, invalid answers, caching."""

import math

import gymnasium as gym
import numpy as np
import pytest

from spatialrl.envs.tvr import ENV_ID, oracle
from spatialrl.envs.tvr.env import CANDIDATE_RESPONSES, TVREnv, parse_action
from spatialrl.envs.tvr.lattice import ACTIONS, Pose
from spatialrl.envs.tvr.metrics import summarize
from spatialrl.envs.tvr.scenes import badge_patch, render_service
from spatialrl.envs.tvr.tasks import Bench, task_poses
from spatialrl.errors import DataError

W, H = 64, 36


@pytest.fixture()
def env(bench_dir):
    e = TVREnv(bench=bench_dir, split="eval", width=W, height=H)
    yield e
    e.close()


def run_expert(env, task_id):
    obs, info = env.reset(options={"task_id": task_id})
    while True:
        obs, reward, term, trunc, info = env.step(info["expert_response"])
        if term or trunc:
            return info["episode"], term, trunc


def test_parse_action():
    assert parse_action("Action: MoveAhead") == "MoveAhead"
    assert parse_action("<think>hmm</think>\n\naction : lookdown.") == "LookDown"
    assert parse_action("ACTION:stop") == "Stop"
    assert parse_action("MoveAhead") is None
    assert parse_action("Action: Jump") is None
    assert parse_action("Action: Move Ahead") is None
    assert list(CANDIDATE_RESPONSES) == [f"Action: {a}" for a in ACTIONS]


def test_expert_succeeds_with_spl_one_on_every_split(bench_dir):
    bench = Bench(bench_dir)
    records = []
    for split in ("eval", "diag_rotate", "diag_move"):
        env = TVREnv(bench=bench_dir, split=split, width=W, height=H)
        for task in bench.tasks(split):
            ep, term, trunc = run_expert(env, task["task_id"])
            assert term and not trunc
            assert ep["success"] and ep["steps"] == ep["optimal_steps"] == task["optimal_steps"]
            records.append(ep)
    m = summarize(records)["overall"]
    assert m["success_rate"] == 1.0 and m["spl"] == 1.0 and m["fstop_all"] == 0.0


def test_out_of_budget_at_the_target_is_a_failure(env, bench_dir):
    task = Bench(bench_dir).tasks("eval")[0]
    obs, info = env.reset(options={"task_id": task["task_id"]})
    assert info["max_steps"] == (30 if task["dataset"] == "single" else 40)
    while info["expert_response"] != "Action: Stop":
        obs, r, term, trunc, info = env.step(info["expert_response"])
    assert env.pose == env.target
    while True:  # never say Stop: idle on unparsable answers until the budget runs out
        obs, r, term, trunc, info = env.step("I am here")
        if term or trunc:
            break
    ep = info["episode"]
    assert trunc and not term
    assert not ep["success"] and not ep["stopped"] and ep["final_pos_error"] == 0.0
    assert ep["steps"] == info["max_steps"]
    with pytest.raises(RuntimeError, match="reset"):
        env.step("Action: Stop")


def test_stop_away_from_the_target_fails_with_the_false_stop_penalty(env, bench_dir):
    task = Bench(bench_dir).tasks("eval")[1]
    env.reset(options={"task_id": task["task_id"]})
    obs, reward, term, trunc, info = env.step("Action: Stop")
    rec, ep = info["record"], info["episode"]
    assert term and not trunc and ep["stopped"] and not ep["success"]
    assert rec["reward_terminal"] == -0.5 and rec["reward_progress"] == 0.0
    assert reward == pytest.approx(-0.01 + 0.005 - 0.5)
    assert ep["final_pos_error"] > 0 or ep["final_yaw_error"] > 0 or ep["final_pitch_error"] > 0


def test_invalid_answers_are_counted_and_leave_the_pose(env, bench_dir):
    task = Bench(bench_dir).tasks("eval")[0]
    obs0, info0 = env.reset(options={"task_id": task["task_id"]})
    obs, reward, term, trunc, info = env.step("Action: Teleport")
    rec = info["record"]
    assert rec["action"] is None and not rec["valid"] and rec["failure"] == "unparsable"
    assert rec["pose"] == rec["prev_pose"] and np.array_equal(obs, obs0)
    assert reward == pytest.approx(-0.01 - 0.01)
    assert info["step"] == 1
    with pytest.raises(TypeError, match="str"):
        env.step(3)


def test_blocked_moves_and_look_limits_fail_without_moving(env, bench_dir):
    task = Bench(bench_dir).tasks("eval")[0]
    env.reset(options={"task_id": task["task_id"]})
    lat = env.lattice
    # find a reachable pose whose MoveAhead is blocked and put the agent there via a task record
    blocked = next(Pose(ix, iz, yaw, -30) for ix, iz in lat.cells for yaw in range(0, 360, 45)
                   if not lat.step(Pose(ix, iz, yaw, -30), "MoveAhead")[1])
    custom = dict(task, task_id="custom", start=blocked.to_dict(1.5))
    obs, info = env.reset(options={"task": custom})
    assert "MoveAhead" not in info["valid_actions"] and "LookUp" not in info["valid_actions"]
    assert info["valid_actions"] == lat.valid_actions(blocked)
    for answer, failure in (("Action: MoveAhead", "blocked"), ("Action: LookUp", "tilt_limit")):
        obs, r, term, trunc, info = env.step(answer)
        assert info["record"]["move_failed"] and info["record"]["failure"] == failure
        assert env.pose == blocked
        assert r == pytest.approx(-0.01 + 0.005)  # parsed (format ok), no progress


def pose_distance(p, t):
    dyaw = abs(p.yaw - t.yaw) % 360
    dyaw = min(dyaw, 360 - dyaw)
    return math.hypot((p.ix - t.ix) * 0.25, (p.iz - t.iz) * 0.25) + 0.25 * dyaw / 45 + 0.25 * abs(p.pitch - t.pitch) / 30


def test_progress_reward_only_on_a_new_minimum(env, bench_dir):
    task = Bench(bench_dir).tasks("eval")[2]
    obs, info = env.reset(options={"task_id": task["task_id"]})
    start, target = task_poses(task)
    rng = np.random.default_rng(0)
    d_min = pose_distance(start, target)
    for _ in range(12):
        answer = f"Action: {info['valid_actions'][int(rng.integers(len(info['valid_actions']) - 1))]}"  # no Stop
        obs, reward, term, trunc, info = env.step(answer)
        rec = info["record"]
        d = pose_distance(Pose(*rec["pose"]), target)
        expected = d_min - d if d < d_min else 0.0
        d_min = min(d_min, d)
        assert rec["distance"] == pytest.approx(d)
        assert rec["reward_progress"] == pytest.approx(expected)
        assert reward == pytest.approx(rec["reward_step"] + rec["reward_format"] + rec["reward_progress"])


def test_expert_response_stays_optimal_after_deviation(env, bench_dir):
    task = Bench(bench_dir).tasks("eval")[0]
    obs, info = env.reset(options={"task_id": task["task_id"]})
    rng = np.random.default_rng(3)
    for _ in range(3):
        obs, r, term, trunc, info = env.step(f"Action: {info['valid_actions'][int(rng.integers(8)) % (len(info['valid_actions']) - 1)]}")
    remaining = int(oracle.distances_to(env.lattice, env.target)[env.lattice.state_id(env.pose)])
    steps_before = info["step"]
    while True:
        obs, r, term, trunc, info = env.step(info["expert_response"])
        if term or trunc:
            break
    assert info["episode"]["success"] and info["episode"]["steps"] == steps_before + remaining + 1


def test_task_selection_and_bad_input(bench_dir):
    with pytest.raises(ValueError, match="width"):
        TVREnv(bench=bench_dir, width=0, height=36)
    with pytest.raises(ValueError, match="height"):
        TVREnv(bench=bench_dir, width=64, height=-5)
    env = TVREnv(bench=bench_dir, width=W, height=H)
    with pytest.raises(DataError, match="unknown task id 'nope'"):
        env.reset(options={"task_id": "nope"})
    task = Bench(bench_dir).tasks("eval")[0]
    bad = dict(task, start={"position": {"x": 0.1, "y": 1.5, "z": 0.0}, "rotation_y": 0, "horizon": 0})
    with pytest.raises(DataError, match="start.position.x"):
        env.reset(options={"task": bad})
    with pytest.raises(DataError, match="unknown scene id"):
        env.reset(options={"task": dict(task, scene="single-garage-000001")})
    off_grid = dict(task, task_id="x", start=Pose(999, 999, 0, 0).to_dict(1.5))
    with pytest.raises(DataError, match="not reachable"):
        env.reset(options={"task": off_grid})
    obs, info = env.reset(seed=5)  # no options: a task drawn from the split with the seeded RNG
    obs2, info2 = env.reset(seed=5)
    assert info["task_id"] == info2["task_id"] and np.array_equal(obs, obs2)
    assert obs.shape == (H, W, 3) and obs.dtype == np.uint8
    assert sorted(info) == sorted(["target_image", "valid_actions", "pose", "step", "max_steps", "task_id",
                                   "expert_response", "expert_responses", "candidate_responses"])


def test_gym_registration_and_env_checker(bench_dir):
    from gymnasium.utils.env_checker import check_env

    env = gym.make(ENV_ID, bench=bench_dir, split="eval", width=W, height=H, copy_frames=True)
    check_env(env.unwrapped, skip_render_check=True)
    obs, info = env.reset(seed=1)
    assert env.observation_space.contains(obs)
    env.close()


def test_badges_and_frame_cache(bench_dir):
    task = Bench(bench_dir).tasks("eval")[0]
    env = TVREnv(bench=bench_dir, width=128, height=72)
    plain = TVREnv(bench=bench_dir, width=128, height=72, badges=False)
    obs, info = env.reset(options={"task_id": task["task_id"]})
    obs_plain, info_plain = plain.reset(options={"task_id": task["task_id"]})
    patch, x0, y0 = badge_patch("CURRENT", 128)
    assert np.array_equal(obs[y0:y0 + patch.shape[0], x0:x0 + patch.shape[1]], patch)
    differs = np.any(obs != obs_plain, axis=2)
    ys, xs = np.nonzero(differs)
    assert ys.size and ys.min() >= y0 and xs.min() >= x0  # only the badge differs
    tpatch, tx0, ty0 = badge_patch("TARGET", 128)
    assert np.array_equal(info["target_image"][ty0:ty0 + tpatch.shape[0], tx0:tx0 + tpatch.shape[1]], tpatch)
    # default: the cache's read-only frames are handed out (no per-step copy); they cannot be corrupted
    assert not obs.flags.writeable and not info["target_image"].flags.writeable
    with pytest.raises(ValueError):
        obs[0, 0] = 0
    service = env.renderer
    hits = service.hits
    env.reset(options={"task_id": task["task_id"]})
    assert service.hits >= hits + 2  # start and target frames came from the cache
    fresh = render_service(128, 72, cache_mb=0).frame(task["scene"], env.start, "CURRENT")
    assert np.array_equal(fresh, obs)


def test_diagnostic_modes_restrict_actions(bench_dir):
    rot = Bench(bench_dir).tasks("diag_rotate")[0]
    env = TVREnv(bench=bench_dir, split="diag_rotate", width=W, height=H)
    obs, info = env.reset(options={"task_id": rot["task_id"]})
    assert not {"MoveAhead", "MoveBack", "MoveLeft", "MoveRight"} & set(info["valid_actions"])
    obs, r, term, trunc, info = env.step("Action: MoveAhead")
    assert info["record"]["failure"] == "not_allowed" and env.pose == env.start
    mv = Bench(bench_dir).tasks("diag_move")[0]
    obs, info = env.reset(options={"task_id": mv["task_id"]})
    assert not {"RotateLeft", "RotateRight", "LookUp", "LookDown"} & set(info["valid_actions"])


def test_geodesic_distance_option(bench_dir):
    task = next(t for t in Bench(bench_dir).tasks("eval") if t["dataset"] == "multi")
    euc = TVREnv(bench=bench_dir, width=W, height=H)
    geo = TVREnv(bench=bench_dir, width=W, height=H, distance="geodesic")
    euc.reset(options={"task_id": task["task_id"]})
    geo.reset(options={"task_id": task["task_id"]})
    d_e, d_g = euc.pose_distance(euc.start), geo.pose_distance(geo.start)
    assert d_g >= d_e - 1e-9
    assert geo.pose_distance(geo.target) == 0.0
    with pytest.raises(ValueError, match="distance"):
        TVREnv(bench=bench_dir, distance="manhattan")


def test_imitation_diagnostics_count_oracle_agreement_and_repeats(env, bench_dir):
    """The episode counts answers equal to the oracle's, answers repeating the previous one, and how often
    the oracle would have repeated it — by hand against the step records."""
    task = Bench(bench_dir).tasks("eval")[0]
    obs, info = env.reset(options={"task_id": task["task_id"]})
    answers = ["Action: RotateLeft", "Action: RotateLeft", "nonsense", info["expert_response"], "Action: RotateLeft"]
    records = []
    for a in answers:
        obs, reward, term, trunc, info = env.step(a)
        records.append(info["record"])
        if term or trunc:
            break
    # the episode runs on (truncated at the budget) so its summary is read off the running episode
    summary = env.episode.summary() if not (term or trunc) else info["episode"]
    actions = [r["action"] for r in records]
    experts = [r["expert_action"] for r in records]
    assert summary["oracle_agreements"] == sum(a == e for a, e in zip(actions, experts, strict=True))
    # a repeat needs a previous parsed action: the step after the unparsable answer has none
    pairs = [(a, b, e) for a, b, e in zip(actions, actions[1:], experts[1:]) if a is not None]
    assert actions[2] is None and summary["repeat_chances"] == len(pairs) == len(records) - 2
    assert summary["repeats"] == sum(b == a for a, b, _ in pairs) >= 1  # the two RotateLefts
    assert summary["oracle_repeats"] == sum(e == a for a, _, e in pairs)
    m = summarize([{**summary, "category": "x"}])["overall"]
    assert m["oracle_agreement"] == summary["oracle_agreements"] / summary["steps"]
    assert m["repeat_rate"] == summary["repeats"] / summary["repeat_chances"]
    assert m["oracle_repeat_rate"] == summary["oracle_repeats"] / summary["repeat_chances"]
