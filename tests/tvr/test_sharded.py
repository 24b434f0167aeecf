"""ShardedVectorEnv over TVRVectorEnv shards (worker processes, shared observation array) = one
TVRVectorEnv of all envs: same frames, rewards, flags and infos for the same seeds, actions and reset
options (CPU, llvmpipe, 64x36 frames, 5 envs over shards of 2 and 3). The suite's ``env_workers`` option
gives the same eval run as one vector env."""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import signal
import subprocess
import time

import numpy as np
import pytest
from gymnasium.vector import AutoresetMode

from spatialrl.envs.registry import get_suite
from spatialrl.envs.sharded import ShardedVectorEnv, ShardError, merge_infos
from spatialrl.envs.tvr.tasks import Bench
from spatialrl.envs.tvr.vector import TVRVectorEnv, unbatch_info
from spatialrl.envs.vector import batch_infos
from spatialrl.errors import DataError
from tests.tvr.test_vector import assert_same, pick_actions

N, SIZES = 5, [2, 3]
KW = {"width": 64, "height": 36, "cache_mb": 0, "max_steps_single": 12, "max_steps_multi": 4}


def shard_maker(bench_dir, **kw):
    return functools.partial(TVRVectorEnv, bench=bench_dir, **{**KW, **kw})


def assert_same_outputs(ref, got, where):
    """Whole batches equal, and each env's own info (``unbatch_info``: target image, nested dicts) too."""
    assert_same(ref, got, where)
    for i in range(N):
        assert_same(unbatch_info(ref[-1], i), unbatch_info(got[-1], i), f"{where} env {i} info")


def workers_alive(pids):
    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    return alive + [p.name for p in mp.active_children() if p.name.startswith("ShardedVectorEnv")]


def test_merge_infos_equals_batch_infos_of_all_envs():
    """Keys missing in a shard (or a shard not called) are zeros / None with the mask off, typed like the
    first shard that has them; nested dicts and object arrays merge the same way."""
    infos = [(0, {"a": 1, "s": "x", "img": np.ones((2, 2), np.uint8), "rec": {"p": 1.5}}),
             (1, {"a": 2}),
             (3, {"b": True, "rec": {"p": 2.5, "q": [1]}, "final_obs": np.zeros(2)}),
             (4, {"a": 5, "s": "y", "b": False})]
    whole = batch_infos(infos, 5)
    for sizes in ([2, 3], [1, 1, 1, 2], [3, 2], [5]):
        parts, start = [], 0
        for n in sizes:
            part = [(i - start, info) for i, info in infos if start <= i < start + n]
            parts.append((batch_infos(part, n) if part else None, n))
            start += n
        assert_same(whole, merge_infos(parts), f"sizes {sizes}")


@pytest.mark.parametrize("mode", [AutoresetMode.NEXT_STEP, AutoresetMode.SAME_STEP])
def test_same_as_one_vector_env(bench_dir, mode, capfd):
    ref = TVRVectorEnv(N, bench=bench_dir, autoreset_mode=mode, **KW)
    with ShardedVectorEnv(shard_maker(bench_dir, autoreset_mode=mode), SIZES) as env:
        assert env.num_envs == N and env.autoreset_mode == mode and env.episode_info_keys == ("target_image",)
        assert env.single_observation_space == ref.single_observation_space
        assert env.observation_space == ref.observation_space and env.action_space == ref.action_space
        assert env.direct_writes == [False, False]  # copy=True shards: the workers copy into the shared array
        out_r, out_s = ref.reset(seed=3), env.reset(seed=3)
        assert_same_outputs(out_r, out_s, "reset")
        kept = [(out_s[0], out_s[0].copy())]
        rng, ended = np.random.default_rng(3), 0
        for t in range(16):
            actions = pick_actions(out_r[1] if t == 0 else out_r[4], rng)
            out_r, out_s = ref.step(actions), env.step(actions)
            assert_same_outputs(out_r, out_s, f"step {t}")
            kept.append((out_s[0], out_s[0].copy()))
            ended += int((out_r[2] | out_r[3]).sum())
        assert ended >= 2  # episodes ended (Stop and budget) and were reset by autoreset
        assert not out_s[0].flags.writeable
        for returned, snapshot in kept:  # copy=True: returned observations are never written again
            assert np.array_equal(returned, snapshot)
        pids = env.pids
    ref.close()
    assert env.closed and not workers_alive(pids)
    assert "Traceback" not in capfd.readouterr().err  # the workers closed their shards and exited cleanly


def test_disabled_mode_masks_per_env_options_and_errors(bench_dir):
    """Disabled autoreset with the rollout core's calls: per-env seeds and options, reset masks that leave
    a whole shard out, None actions (a whole shard idle); shards render straight into the shared array
    (copy=False). Then a worker's error, bad arguments, a dead worker and close."""
    ids = [t["task_id"] for t in Bench(bench_dir).tasks("eval")]
    ref = TVRVectorEnv(N, bench=bench_dir, autoreset_mode="Disabled", copy=False, **KW)
    env = ShardedVectorEnv(shard_maker(bench_dir, autoreset_mode="Disabled", copy=False), SIZES, copy=False)
    assert env.direct_writes == [True, True]
    per_env = [None, {"task_id": ids[1]}, None, {"task_id": ids[3]}, {"task_id": ids[0]}]  # the rest seeded
    assert env.shared_info_keys == ("target_image",)
    for mask in ([True, True, False, False, False], [False, False, True, True, True]):  # one shard each
        options = {"per_env": per_env, "reset_mask": np.array(mask)}
        out_r = ref.reset(seed=[10, None, 12, 13, None], options=options)
        out_s = env.reset(seed=[10, None, 12, 13, None], options=options)
        assert_same_outputs(out_r, out_s, f"reset {mask}")
    shared = out_s[0]
    plan = [["Action: RotateLeft"] * N,
            [None, None, "Action: Stop", "Action: MoveAhead", None],  # shard 0 idle
            ["Action: Stop", None, None, "Action: RotateRight", "Action: Stop"]]
    for t, actions in enumerate(plan):
        out_r, out_s = ref.step(actions), env.step(actions)
        assert_same_outputs(out_r, out_s, f"step {t}")
        assert out_s[0] is shared  # copy=False: the shared array itself
    for seed, mask, options in (
            (None, [True, False, True, False, True], {"task_ids": [ids[0], None, ids[1], None, ids[2]]}),
            (None, [False, False, False, True, False], {"per_env": [None, None, None, {"task_id": ids[3]}, None]}),
            (5, [False, True, False, False, False], {})):  # only shard 1, then only shard 0 (env 1 seeded 5 + 1)
        out_r = ref.reset(seed=seed, options={"reset_mask": np.array(mask), **options})
        out_s = env.reset(seed=seed, options={"reset_mask": np.array(mask), **options})
        assert_same_outputs(out_r, out_s, f"reset {mask}")
    targets = None
    for t in range(2):  # every env steps: the target images are the shared array, rendered into by the shards
        out_r, out_s = ref.step(["Action: LookDown"] * N), env.step(["Action: LookDown"] * N)
        assert_same_outputs(out_r, out_s, f"full step {t}")
        assert targets is None or out_s[4]["target_image"] is targets
        targets = out_s[4]["target_image"]

    # a worker's error names the shard and carries its traceback; the workers stay up
    with pytest.raises(ShardError, match=r"shard 1 \(envs 2\.\.4\) failed in reset: DataError: .*unknown task id") as err:
        env.reset(options={"task_ids": [ids[0], ids[1], "nope", ids[2], ids[3]]})
    assert "Traceback" in err.value.worker_traceback and isinstance(err.value.__cause__, DataError)
    assert_same(ref.reset(seed=1), env.reset(seed=1), "reset after an error")
    with pytest.raises(ValueError, match="needs 5 actions"):
        env.step(["Action: Stop"] * 3)
    with pytest.raises(ValueError, match=r"options\['task_ids'\] needs 5 entries"):
        env.reset(options={"task_ids": ids[:2]})
    with pytest.raises(ValueError, match="5 seeds"):
        env.reset(seed=[1, 2])
    # SIGTERM to the process group (`timeout`, Slurm) is the trainer's: it pauses at the end of its update,
    # so the workers must still answer until then
    pids = env.pids
    subprocess.run(["kill", "-s", "TERM", *map(str, pids)], check=True)
    time.sleep(0.5)
    assert_same(ref.step(["Action: RotateRight"] * N), env.step(["Action: RotateRight"] * N), "after SIGTERM")
    # a worker that dies is an error naming it, and closes the env
    os.kill(pids[0], signal.SIGKILL)
    with pytest.raises(ShardError, match=r"shard 0 \(envs 0\.\.1\): its worker process exited"):
        env.step(["Action: RotateLeft"] * N)
    assert env.closed and not workers_alive(pids)
    assert shared.copy().shape == (N, 36, 64, 3)  # arrays handed out stay readable after close
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()
    ref.close()


def test_bad_arguments_and_failing_shards(bench_dir):
    with pytest.raises(ValueError, match="sizes"):
        ShardedVectorEnv(shard_maker(bench_dir), [2, 0])
    with pytest.raises(ValueError, match="context"):
        ShardedVectorEnv(shard_maker(bench_dir), SIZES, context="fork")
    with pytest.raises(ShardError, match=r"shard 0 \(envs 0\.\.1\) failed in make_shard: ValueError: "
                       r"TVRVectorEnv distance[\s\S]*1 more shard\(s\) failed in the same call: 1"):
        ShardedVectorEnv(shard_maker(bench_dir, distance="manhattan"), SIZES)
    assert not workers_alive([])


def test_suite_env_workers_gives_the_same_eval(bench_dir, tmp_path):
    """``--set env_workers=2``: the suite's vector env is sharded, and the eval run (rollout core, random
    agent) writes the same files as with one vector env."""
    from spatialrl.eval.evaluate import evaluate

    suite = get_suite("tvr")
    with pytest.raises(DataError, match="env_workers"):
        suite.make_vector_env({"data": str(bench_dir), "env_workers": 0}, 2)
    assert "env_workers" not in suite.default_options
    base = {"data": str(bench_dir), "width": 64, "height": 36, "memory": "window", "window": 2,
            "max_steps_single": 6, "max_steps_multi": 5}
    env = suite.make_vector_env({**base, "env_workers": 2}, 3)
    try:
        assert isinstance(env, ShardedVectorEnv) and env.sizes == [2, 1] and env.direct_writes == [True, True]
        assert env.autoreset_mode == AutoresetMode.DISABLED and not env.copy
    finally:
        env.close()
    assert isinstance(suite.make_vector_env({**base, "env_workers": 4}, 1), TVRVectorEnv)  # never more shards than envs
    runs = {}
    for k in (1, 2):
        out = tmp_path / f"workers-{k}"
        evaluate("tvr", "random", {**base, "env_workers": k}, out, batch_size=3, seed=3, progress=False)
        runs[k] = {name: (out / name).read_bytes() for name in ("episodes.jsonl", "steps.jsonl", "metrics.json")}
    assert runs[1] == runs[2]
    assert runs[2]["episodes.jsonl"].count(b"\n") == 4
