"""Stepping envs in threads must not change a single record (V-IRL, whose envs are thread-safe)."""

from __future__ import annotations

from spatialrl.agents.random import RandomPolicy
from spatialrl.envs.registry import get_suite
from spatialrl.envs.virl.testdata import random_routes, write_dataset
from spatialrl.io import read_jsonl
from spatialrl.rollout.runner import run_episodes


def test_threaded_env_steps_give_identical_records(tmp_path):
    data = write_dataset(tmp_path / "toy", random_routes(4, 1))
    suite = get_suite("virl")
    options = {**suite.default_options, "data": str(data), "grid_size": 224, "episodes": 6, "split": "all",
               "visual_data": str(data), "cache_mb": 0}
    eps = suite.episodes(options)
    for name, threads in (("seq", 1), ("thr", 4)):
        run_episodes(suite, options, RandomPolicy(5), eps, batch_size=6, out_dir=tmp_path / name,
                     progress=False, env_threads=threads)
    for f in ("steps.jsonl", "episodes.jsonl"):
        assert list(read_jsonl(tmp_path / "seq" / f)) == list(read_jsonl(tmp_path / "thr" / f))
