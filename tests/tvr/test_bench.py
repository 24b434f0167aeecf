"""Benchmark generation: category filters, scene pools, diagnostics, determinism, atomic writes, CLI."""

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from spatialrl.envs.tvr import oracle
from spatialrl.envs.tvr.bench import (
    PATH_RANGES,
    SEG_RULES,
    BenchConfig,
    make_bench,
    parse_counts,
    plan_scenes,
)
from spatialrl.envs.tvr.cli import app
from spatialrl.envs.tvr.env import TVREnv
from spatialrl.envs.tvr.lattice import Lattice, heading_towards
from spatialrl.envs.tvr.scenes import SEG_MIN_PIXELS, SEG_SIZE, camera_for, load_house, render_service
from spatialrl.envs.tvr.tasks import Bench, SceneRef, load_tasks, task_poses
from spatialrl.errors import DataError
from spatialrl.render import Renderer
from spatialrl.worlds.houses import count_visible_objects, generate_house


def all_tasks(bench_dir):
    b = Bench(bench_dir)
    return {s: b.tasks(s) for s in b.splits()}


def test_navigation_tasks_pass_the_category_filters(bench_dir):
    tasks = all_tasks(bench_dir)["eval"]
    assert sorted(t["category"] for t in tasks) == ["multi-easy", "multi-hard", "single-easy", "single-hard"]
    for t in tasks:
        house = load_house(t["scene"])
        lat = Lattice(house.reachable)
        start, target = task_poses(t)
        lo, hi = SEG_RULES[t["difficulty"]]
        assert t["seg_count"] >= lo and (hi is None or t["seg_count"] <= hi)
        lo, hi = PATH_RANGES[t["dataset"]]
        assert lo <= t["bfs_distance"] <= hi
        assert oracle.grid_bfs_distance(lat.cell_set, target.cell)[start.cell] == t["bfs_distance"]
        assert oracle.optimal_steps(lat, start, target) == t["optimal_steps"]
        assert t["target"]["position"]["y"] == house.eye_height
        # target yaw: toward its room's centroid, +-45 deg, snapped to 45 deg -> within 67.5 deg
        room = house.room_of(target.cell)
        aim = heading_towards((target.ix * 0.25, target.iz * 0.25), room.centroid)
        err = abs((target.yaw - aim + 180) % 360 - 180)
        assert err <= 67.5 + 1e-6
        assert SceneRef.parse(t["scene"]).kind == t["dataset"]
        assert len(house.rooms) == (1 if t["dataset"] == "single" else len(house.rooms)) and (
            t["dataset"] == "single" or 2 <= len(house.rooms) <= 3)


def test_seg_count_is_the_documented_instance_render(bench_dir):
    t = all_tasks(bench_dir)["eval"][0]
    house = generate_house(SceneRef.parse(t["scene"]).seed, "single", SceneRef.parse(t["scene"]).room_type)
    with Renderer(*SEG_SIZE) as r:
        ids = r.render_ids(r.upload(house.meshes, house.textures), [camera_for(house, task_poses(t)[1])])[0]
    assert count_visible_objects(ids, SEG_MIN_PIXELS) == t["seg_count"]


def test_diagnostic_sets(bench_dir):
    tasks = all_tasks(bench_dir)
    eval_single = {t["scene"] for t in tasks["eval"] if t["dataset"] == "single"}
    for t in tasks["diag_rotate"]:
        start, target = task_poses(t)
        assert t["mode"] == "rotate_only" and t["scene"] in eval_single and t["bfs_distance"] == 0
        assert start.cell == target.cell and start.yaw != target.yaw and start.pitch != target.pitch
        assert oracle.optimal_steps(Lattice(load_house(t["scene"]).reachable, "rotate_only"), start, target) == \
            t["optimal_steps"]
    for t in tasks["diag_move"]:
        start, target = task_poses(t)
        assert t["mode"] == "move_only" and t["scene"] in eval_single
        assert (start.yaw, start.pitch) == (target.yaw, target.pitch) and start.cell != target.cell
        assert 2 <= t["bfs_distance"] <= 8
    assert sorted(t["difficulty"] for t in tasks["diag_move"]) == ["easy", "hard"]


def test_scene_pools_are_disjoint_and_seeded():
    cfg = BenchConfig.preset()  # the default sizes: 20/40/60 scenes per family
    pools = plan_scenes(cfg)
    assert {k: len(v) for k, v in pools.items()} == {"sft": 40, "eval": 80, "rl": 120}
    ids = [r.scene_id for refs in pools.values() for r in refs]
    assert len(ids) == len(set(ids)) == 240
    seeds = [r.seed for refs in pools.values() for r in refs]
    assert len(set(seeds)) == 240
    assert sum(r.kind == "single" for r in pools["eval"]) == 40
    assert {r.room_type for r in pools["eval"]} == {"kitchen", "living_room", "bedroom", "bathroom"}
    assert plan_scenes(BenchConfig.preset()) == pools
    assert plan_scenes(BenchConfig.preset(seed=1)) != pools
    assert cfg.sizes == {"eval": 500, "sft": 1600, "rl": 4800, "diag_rotate": 100, "diag_move": 100}


def test_same_seed_gives_identical_files_and_images(bench_dir, small_bench_config, tmp_path):
    again = tmp_path / "again"
    make_bench(again, small_bench_config(), progress=False)
    for name in ("scenes.json", "tasks/eval.json", "tasks/diag_rotate.json", "tasks/diag_move.json"):
        assert (bench_dir / name).read_bytes() == (again / name).read_bytes(), name
    manifest = json.loads((again / "bench.json").read_text())
    assert manifest["seed"] == 7 and manifest["counts"]["eval"]["multi-hard"] == 1
    # images: the env's frame of a task equals a render of a freshly generated copy of the house
    t = load_tasks(again / "tasks" / "eval.json")[-1]
    ref = SceneRef.parse(t["scene"])
    house = generate_house(ref.seed, ref.kind, ref.room_type)
    with Renderer(96, 54) as r:
        fresh = r.render(r.upload(house.meshes, house.textures), [camera_for(house, task_poses(t)[1])])[0]
    env_frame = render_service(96, 54, cache_mb=0).frame(t["scene"], task_poses(t)[1], None)
    assert np.array_equal(fresh, env_frame)


def test_different_seed_gives_different_tasks(bench_dir, tmp_path):
    other = tmp_path / "other"
    make_bench(other, BenchConfig.preset(seed=8, sizes={"eval": 4, "sft": 0, "rl": 0, "diag_rotate": 0,
                                                        "diag_move": 0}, scenes={"sft": 0, "eval": 1, "rl": 0}),
               progress=False)
    assert (bench_dir / "tasks/eval.json").read_bytes() != (other / "tasks/eval.json").read_bytes()


def test_refuses_to_overwrite_and_replaces_atomically_with_force(tmp_path):
    out = tmp_path / "b"
    out.mkdir()
    (out / "keep.txt").write_text("x")
    cfg = BenchConfig.preset(sizes={"eval": 0, "sft": 0, "rl": 0, "diag_rotate": 0, "diag_move": 0},
                             scenes={"sft": 0, "eval": 1, "rl": 0})
    with pytest.raises(DataError, match="already exists"):
        make_bench(out, cfg, progress=False)
    assert (out / "keep.txt").exists()
    make_bench(out, cfg, force=True, progress=False)
    assert not (out / "keep.txt").exists() and (out / "bench.json").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b"]  # no temp folders left behind


def test_changed_houses_are_detected(bench_dir, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(bench_dir, copy)
    scenes = json.loads((copy / "scenes.json").read_text())
    scenes["eval"][0]["fingerprint"] = "0" * 16
    (copy / "scenes.json").write_text(json.dumps(scenes))
    # a self-consistent bench (file hashes updated) made by an older house generator
    from spatialrl.envs.tvr.bench import bench_file_hashes

    manifest = json.loads((copy / "bench.json").read_text())
    (copy / "bench.json").write_text(json.dumps(manifest | {"files": bench_file_hashes(copy)}))
    env = TVREnv(bench=copy, width=32, height=18)
    task = next(t for t in Bench(copy).tasks("eval") if t["scene"] == scenes["eval"][0]["scene"])
    with pytest.raises(DataError, match="regenerate the bench"):
        env.reset(options={"task_id": task["task_id"]})


def test_config_parsing_errors():
    assert parse_counts("eval=5, sft=0") == {"eval": 5, "sft": 0}
    with pytest.raises(ValueError, match="NAME=INTEGER"):
        parse_counts("eval:5")
    with pytest.raises(ValueError, match="unknown split"):
        BenchConfig.preset(sizes={"test": 3})
    with pytest.raises(ValueError, match=">= 0"):
        BenchConfig.preset(sizes={"eval": -1})
    with pytest.raises(ValueError, match="has no scenes"):
        BenchConfig.preset(scenes={"eval": 0})


def test_cli_make_bench_and_show(tmp_path):
    runner = CliRunner()
    out = tmp_path / "cli_bench"
    args = ["make-bench", "--out", str(out), "--sizes", "eval=4,sft=0,rl=0,diag_rotate=0,diag_move=0",
            "--scenes", "sft=0,eval=1,rl=0", "--seed", "3"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "4 tasks" in res.output
    res = runner.invoke(app, args)
    assert res.exit_code == 2 and "already exists" in res.output
    tid = Bench(out).tasks("eval")[0]["task_id"]
    png = tmp_path / "show.png"
    res = runner.invoke(app, ["show", tid, "--bench", str(out), "--out", str(png), "--width", "96", "--height", "54"])
    assert res.exit_code == 0, res.output
    from PIL import Image

    img = Image.open(png)
    assert img.width >= 2 * 96 and img.height > 54
    res = runner.invoke(app, ["show", "nope", "--bench", str(out), "--out", str(png)])
    assert res.exit_code == 2 and "unknown task id" in res.output
    res = runner.invoke(app, ["show", tid, "--bench", str(out), "--out", str(png), "--width", "0"])
    assert res.exit_code == 2 and "positive" in res.output
    assert math.isfinite(json.loads((out / "bench.json").read_text())["timings_s"]["total"])
