"""TVRVectorEnv = N TVREnvs: same frames, rewards, terminated/truncated and infos for the same seeds and
actions (CPU, llvmpipe). The reference is gymnasium's own ``SyncVectorEnv`` over N single envs, so
autoreset and the dict-of-arrays infos are checked against gymnasium's semantics, not a re-statement."""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode, SyncVectorEnv

from spatialrl.envs.tvr.env import TVREnv
from spatialrl.envs.tvr.scenes import camera_for, load_house, render_service
from spatialrl.envs.tvr.tasks import Bench, task_poses
from spatialrl.envs.tvr.vector import TVRVectorEnv, unbatch_info

W, H = 96, 54
N = 5
KW = {"width": W, "height": H, "cache_mb": 0, "max_steps_single": 12, "max_steps_multi": 4}


def assert_same(a, b, path="infos"):
    if isinstance(a, dict):
        assert isinstance(b, dict) and set(a) == set(b), f"{path}: keys {sorted(a)} != {sorted(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray), f"{path}: {type(b).__name__} is not an array"
        assert a.shape == b.shape and a.dtype == b.dtype, f"{path}: {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        if a.dtype == object:
            for j, (x, y) in enumerate(zip(a, b, strict=True)):
                assert_same(x, y, f"{path}[{j}]")
        else:
            assert np.array_equal(a, b), f"{path}: arrays differ"
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), f"{path}: {a!r} != {b!r}"
        for j, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{path}[{j}]")
    else:
        assert type(a) is type(b) and a == b, f"{path}: {a!r} != {b!r}"


def pick_actions(infos: dict, rng: np.random.Generator) -> list[str]:
    """A mix that exercises every rule: expert answers (successful Stops), valid moves, blocked or
    disallowed moves, premature Stops and unparsable text."""
    out = []
    for i in range(N):
        r = rng.random()
        if r < 0.7:
            out.append(str(infos["expert_response"][i]))
        elif r < 0.85:
            valid = infos["valid_actions"][i]
            out.append("Action: " + str(valid[int(rng.integers(len(valid)))]))
        elif r < 0.9:
            out.append("Action: " + ("MoveAhead", "LookUp", "RotateLeft")[int(rng.integers(3))])
        elif r < 0.95:
            out.append("Action: Stop")
        else:
            out.append("I am not sure")
    return out


def run_both(bench_dir, mode: AutoresetMode, steps: int, seed: int, split: str = "eval", **kw):
    kwargs = {**KW, **kw}
    ref = SyncVectorEnv([lambda: TVREnv(bench=bench_dir, split=split, **kwargs) for _ in range(N)],
                        autoreset_mode=mode)
    vec = TVRVectorEnv(N, bench=bench_dir, split=split, autoreset_mode=mode, **kwargs)
    obs_r, info_r = ref.reset(seed=seed)
    obs_v, info_v = vec.reset(seed=seed)
    assert_same(obs_r, obs_v, "reset obs")
    assert_same(info_r, info_v, "reset infos")
    rng = np.random.default_rng(seed)
    seen = {"terminated": 0, "truncated": 0, "success": 0, "scenes": set()}
    for t in range(steps):
        actions = pick_actions(info_r, rng)
        out_r, out_v = ref.step(actions), vec.step(actions)
        for name, a, b in zip(("obs", "rewards", "terminated", "truncated", "infos"), out_r, out_v, strict=True):
            assert_same(a, b, f"step {t} {name}")
        info_r = out_r[4]
        seen["terminated"] += int(out_r[2].sum())
        seen["truncated"] += int(out_r[3].sum())
        final = info_r.get("final_info", info_r)
        if "episode" in final:
            seen["success"] += int(sum(bool(s) for s, m in zip(final["episode"]["success"], final["_episode"],
                                                               strict=True) if m))
            seen["scenes"] |= {s for s, m in zip(final["episode"]["scene"], final["_episode"], strict=True) if m}
    ref.close()
    vec.close()
    return seen


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_vector_equals_single_envs(bench_dir, mode):
    seen = run_both(bench_dir, mode, steps=30, seed=3)
    # the run covered autoreset after Stop and after the budget, a success, and both houses
    assert seen["terminated"] > 0 and seen["truncated"] > 0 and seen["success"] > 0
    scenes = {t["scene"] for t in Bench(bench_dir).tasks("eval")}
    assert any(s.startswith("multi-") for s in scenes) and seen["scenes"] == scenes


def test_vector_equals_single_envs_geodesic_diag_and_cache(bench_dir):
    """Diagnostic tasks (restricted action sets), geodesic distance and the frame cache on."""
    run_both(bench_dir, AutoresetMode.NEXT_STEP, steps=6, seed=5, split="diag_move", distance="geodesic",
             cache_mb=4)


def test_disabled_autoreset_with_reset_mask(bench_dir):
    ref = SyncVectorEnv([lambda: TVREnv(bench=bench_dir, **KW) for _ in range(N)],
                        autoreset_mode=AutoresetMode.DISABLED)
    vec = TVRVectorEnv(N, bench=bench_dir, autoreset_mode="Disabled", **KW)
    assert_same(ref.reset(seed=11), vec.reset(seed=11))
    for _ in range(3):  # ends some envs with Stop, keeps others going
        actions = ["Action: Stop" if i % 2 else "Action: RotateLeft" for i in range(N)]
        out_r, out_v = ref.step(actions), vec.step(actions)
        assert_same(out_r, out_v)
        done = out_r[2] | out_r[3]
        if done.any():
            mask = done.copy()
            assert_same(ref.reset(options={"reset_mask": mask.copy()}),
                        vec.reset(options={"reset_mask": mask.copy()}))
    with pytest.raises(RuntimeError):  # an ended env must be reset first, as a single env
        vec.step(["Action: Stop"] * N)
        vec.step(["Action: Stop"] * N)


def test_per_env_task_ids_and_frames(bench_dir):
    tasks = Bench(bench_dir).tasks("eval")
    ids = [tasks[i % len(tasks)]["task_id"] for i in range(N)]
    vec = TVRVectorEnv(N, bench=bench_dir, copy=False, **KW)
    obs, infos = vec.reset(options={"task_ids": ids})
    assert list(infos["task_id"]) == ids
    single = TVREnv(bench=bench_dir, **KW)
    for i, tid in enumerate(ids):
        o, info = single.reset(options={"task_id": tid})
        assert np.array_equal(obs[i], o)
        assert_same(info, unbatch_info(infos, i), f"env {i} info")
    # per-env option dicts (as a runner's episode specs carry them) pick the same tasks
    _, again = vec.reset(options={"per_env": [{"task_id": tid} for tid in ids]})
    assert list(again["task_id"]) == ids
    # each step's unbatched info is the single env's (with record, and episode after the Stop)
    singles = [TVREnv(bench=bench_dir, **KW) for _ in range(N)]
    for s, tid in zip(singles, ids, strict=True):
        s.reset(options={"task_id": tid})
    for text in ("Action: MoveAhead", "Action: RotateLeft", "Action: Stop"):
        out = vec.step([text] * N)
        for i, s in enumerate(singles):
            ref = s.step(text)
            assert_same(ref[4], unbatch_info(out[4], i), f"env {i} info after {text}")
    assert "episode" in unbatch_info(out[4], 0)
    single.close()


def test_render_batch_over_scenes_equals_single_renders(bench_dir):
    """Cameras of both houses interleaved in one batch: each frame equals its own single render."""
    tasks = Bench(bench_dir).tasks("eval") + Bench(bench_dir).tasks("diag_rotate")
    backend = render_service(W, H, cache_mb=0).backend
    items = []
    for t in tasks:
        up = backend.scene(t["scene"])
        items += [(up.scene, camera_for(load_house(t["scene"]), pose)) for pose in task_poses(t)]
    order = np.random.default_rng(0).permutation(len(items))
    items = [items[k] for k in order]
    assert len({id(sc) for sc, _ in items}) == 2
    batch = backend.renderer.render_batch(items)
    for (scene, cam), frame in zip(items, batch, strict=True):
        assert np.array_equal(backend.renderer.render(scene, [cam])[0], frame)
    with pytest.raises(ValueError, match="frames for"):
        backend.renderer.render_batch(items, np.zeros((1, H, W, 3), np.uint8))


@pytest.mark.parametrize(("size", "mode"), [((W, H), "pbo"), ((64, 36), "pbo"), ((W, H), "pbo_rgb")])
def test_pbo_readback_gives_the_same_frames(bench_dir, size, mode, monkeypatch):
    """``readback="pbo"`` (and ``"pbo_rgb"``) vs ``"sync"``: same observations, target images and infos, step by step, with
    chunks of 2 frames, so a step's 5 frames (and a reset's 10) take several chunks, the last partial."""
    from spatialrl.render import layers
    from spatialrl.render import renderer as renderer_module

    w, h = size
    monkeypatch.setattr(renderer_module, "MAX_BATCH_PIXELS", w * h * 2)
    reads: list[int] = []
    read_async = layers.LayerTarget.read_async
    monkeypatch.setattr(layers.LayerTarget, "read_async",
                        lambda self, n, channels=4: reads.append(n) or read_async(self, n, channels))
    kw = {**KW, "width": w, "height": h}
    sync = TVRVectorEnv(N, bench=bench_dir, readback="sync", **kw)
    pbo = TVRVectorEnv(N, bench=bench_dir, readback=mode, **kw)
    assert_same(sync.reset(seed=7), pbo.reset(seed=7), "reset")
    assert reads == [2] * 5  # the reset's 10 frames: target and start view per env
    rng = np.random.default_rng(7)
    infos = sync.reset(seed=8)[1]
    pbo.reset(seed=8)
    for t in range(8):
        actions = pick_actions(infos, rng)
        out_s, out_p = sync.step(actions), pbo.step(actions)
        assert_same(out_s, out_p, f"step {t}")
        infos = out_s[4]
    assert 1 in reads and len(reads) >= 3 * 10  # 2 resets + 8 steps of >= 5 frames: >= 3 chunks each
    sync.close()
    pbo.close()


def test_errors(bench_dir):
    vec = TVRVectorEnv(N, bench=bench_dir, **KW)
    ids = [t["task_id"] for t in Bench(bench_dir).tasks("eval")]
    vec.reset(seed=0)
    with pytest.raises(ValueError, match="5 actions"):
        vec.step(["Action: Stop"])
    with pytest.raises(ValueError, match="entries"):
        vec.reset(options={"task_ids": ids[:2]})
    with pytest.raises(ValueError, match="num_envs"):
        TVRVectorEnv(0, bench=bench_dir, **KW)
    with pytest.raises(ValueError, match="autoreset_mode"):
        TVRVectorEnv(2, bench=bench_dir, autoreset_mode="Sometimes", **KW)
    with pytest.raises(ValueError, match="TVRVectorEnv readback must be one of 'auto', 'sync', 'pbo', 'pbo_rgb', got 'async'"):
        TVRVectorEnv(2, bench=bench_dir, readback="async", **KW)
    with pytest.raises(RuntimeError, match="never reset"):
        TVRVectorEnv(2, bench=bench_dir, **KW).step(["Action: Stop"] * 2)


def test_returned_frames_are_never_overwritten(bench_dir):
    """copy=True: observations and target images handed out stay as they were (copy on write)."""
    vec = TVRVectorEnv(N, bench=bench_dir, **KW)
    obs, infos = vec.reset(seed=1)
    kept = [(obs, obs.copy()), (infos["target_image"], infos["target_image"].copy())]
    for _ in range(4):  # Stop ends every episode; the next step resets them all (new targets)
        obs, _, _, _, infos = vec.step(["Action: Stop"] * N)
        kept += [(obs, obs.copy()), (infos["target_image"], infos["target_image"].copy())]
    assert not obs.flags.writeable and not infos["target_image"].flags.writeable
    assert not np.array_equal(kept[1][1], kept[-1][1])  # the targets did change
    for returned, snapshot in kept:
        assert np.array_equal(returned, snapshot)
    own = TVRVectorEnv(N, bench=bench_dir, copy=False, **KW)
    first, _ = own.reset(seed=1)
    again, _, _, _, _ = own.step(["Action: RotateLeft"] * N)
    assert again is first  # copy=False: the env's own buffer, overwritten in place


def test_disabled_mode_skips_envs_with_none_actions(bench_dir):
    """DISABLED mode: None leaves an env untouched; the stepped envs equal single envs."""
    tasks = [t["task_id"] for t in Bench(bench_dir).tasks("eval")]
    ids = [tasks[i % len(tasks)] for i in range(N)]
    vec = TVRVectorEnv(N, bench=bench_dir, autoreset_mode="Disabled", **KW)
    singles = [TVREnv(bench=bench_dir, **KW) for _ in range(N)]
    obs, _ = vec.reset(options={"task_ids": ids})
    last = [s.reset(options={"task_id": tid})[0] for s, tid in zip(singles, ids, strict=True)]
    for t in range(3):
        actions = [None if (i + t) % 3 == 0 else "Action: RotateRight" for i in range(N)]
        obs, rew, term, trunc, infos = vec.step(actions)
        for i, a in enumerate(actions):
            if a is None:
                assert rew[i] == 0 and not term[i] and not trunc[i] and not infos["_step"][i]
            else:
                last[i], r, te, tr, info = singles[i].step(a)
                assert rew[i] == r and infos["step"][i] == info["step"] and infos["_step"][i]
                assert infos["record"]["pose"][i] == info["record"]["pose"]
            assert np.array_equal(obs[i], last[i])
    with pytest.raises(ValueError, match="Disabled"):
        TVRVectorEnv(N, bench=bench_dir, **KW).step([None] * N)


def test_batched_spaces_are_gymnasiums(bench_dir):
    """The batched spaces (built on first use) are what gymnasium's batch_space makes of the single ones."""
    from gymnasium.vector.utils import batch_space

    vec = TVRVectorEnv(N, bench=bench_dir, **KW)
    single = TVREnv(bench=bench_dir, **KW)
    assert vec.observation_space == batch_space(single.observation_space, N)
    assert vec.observation_space.shape == (N, H, W, 3) and vec.observation_space is vec.observation_space
    assert vec.action_space == batch_space(single.action_space, N)
    obs, _ = vec.reset(seed=0)
    assert vec.observation_space.contains(obs)


def test_step_infos_without_target_image(bench_dir):
    """``step_target_image=False`` (the rollout core's setting): resets still carry the target image,
    steps leave it out (it is the reset's for the whole episode); only with Disabled autoreset."""
    vec = TVRVectorEnv(N, bench=bench_dir, autoreset_mode="Disabled", step_target_image=False, **KW)
    _, infos = vec.reset(seed=2)
    assert infos["target_image"].shape == (N, H, W, 3) and infos["_target_image"].all()
    _, _, _, _, infos = vec.step(["Action: RotateLeft"] * N)
    assert "target_image" not in infos and "_target_image" not in infos and infos["_step"].all()
    assert vec.episode_info_keys == ("target_image",)
    with pytest.raises(ValueError, match="step_target_image"):
        TVRVectorEnv(N, bench=bench_dir, step_target_image=False, **KW)
