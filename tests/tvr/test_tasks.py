"""Task schema: scene ids, validation errors that name file, index and field, bench loading."""

import copy
import json

import pytest

from spatialrl.envs.tvr.lattice import Pose
from spatialrl.envs.tvr.tasks import Bench, SceneRef, load_tasks, pose_from_record, task_poses, validate_tasks
from spatialrl.errors import DataError

GOOD = {
    "task_id": "single-kitchen-000042_easy_t00_s00",
    "dataset": "single",
    "scene": "single-kitchen-000042",
    "difficulty": "easy",
    "seg_count": 12,
    "bfs_distance": 5,
    "target": {"position": {"x": 1.25, "y": 1.5, "z": -0.5}, "rotation_y": 135.0, "horizon": -30.0},
    "start": {"position": {"x": 0.0, "y": 1.5, "z": 0.75}, "rotation_y": 0.0, "horizon": 30.0},
    "optimal_steps": 9,
    "category": "single-easy",
    "mode": "navigation",
}


def test_scene_ids_round_trip():
    ref = SceneRef.parse("multi-living_room-000731")
    assert (ref.kind, ref.room_type, ref.seed) == ("multi", "living_room", 731)
    assert ref.scene_id == "multi-living_room-000731"
    for bad in ("kitchen-1", "single-kitchen-42", "house-kitchen-000001", "single-garage-000001", None):
        with pytest.raises(DataError, match="unknown scene id"):
            SceneRef.parse(bad)


def test_poses_from_records():
    start, target = task_poses(GOOD)
    assert target == Pose(5, -2, 135, -30)
    assert start == Pose(0, 3, 0, 30)
    assert pose_from_record(Pose(5, -2, 135, -30).to_dict(1.5)) == Pose(5, -2, 135, -30)


@pytest.mark.parametrize(
    "path,value,field",
    [
        (("dataset",), "ithor", "dataset"),
        (("difficulty",), "medium", "difficulty"),
        (("category",), "multi-easy", "category"),
        (("mode",), "fly", "mode"),
        (("scene",), "FloorPlan1", "scene"),
        (("scene",), "multi-kitchen-000001", "scene"),
        (("seg_count",), -1, "seg_count"),
        (("bfs_distance",), 2.5, "bfs_distance"),
        (("optimal_steps",), 0, "optimal_steps"),
        (("optimal_steps",), True, "optimal_steps"),
        (("target", "position", "x"), 0.3, "target.position.x"),
        (("start", "position", "z"), "1", "start.position.z"),
        (("target", "rotation_y"), 30.0, "target.rotation_y"),
        (("target", "rotation_y"), 360.0, "target.rotation_y"),
        (("start", "horizon"), 60.0, "start.horizon"),
        (("task_id",), "", "task_id"),
    ],
)
def test_each_bad_field_is_named(path, value, field):
    bad = copy.deepcopy(GOOD)
    node = bad
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(DataError) as e:
        validate_tasks([GOOD | {"task_id": "other"}, bad], "tasks/eval.json")
    msg = str(e.value)
    assert msg.startswith("tasks/eval.json: task [1]") and f"field '{field}'" in msg


def test_missing_fields_and_duplicates_and_non_lists():
    bad = {k: v for k, v in GOOD.items() if k != "optimal_steps"}
    with pytest.raises(DataError, match=r"task \[0\] \(single-kitchen-000042_easy_t00_s00\) field 'optimal_steps': missing"):
        validate_tasks([bad], "f.json")
    no_pos = copy.deepcopy(GOOD)
    del no_pos["start"]["position"]["y"]
    with pytest.raises(DataError, match="field 'start.position.y': missing"):
        validate_tasks([no_pos], "f.json")
    with pytest.raises(DataError, match="duplicate id"):
        validate_tasks([GOOD, GOOD], "f.json")
    with pytest.raises(DataError, match="expected a JSON list"):
        validate_tasks({"tasks": []}, "f.json")
    with pytest.raises(DataError, match=r"task \[0\] field '<record>'"):
        validate_tasks([3], "f.json")


def test_load_tasks_and_bench_errors(tmp_path):
    with pytest.raises(DataError, match="task file not found"):
        load_tasks(tmp_path / "nope.json")
    broken = tmp_path / "broken.json"
    broken.write_text("[{", encoding="utf-8")
    with pytest.raises(DataError, match="broken.json: malformed JSON"):
        load_tasks(broken)
    with pytest.raises(DataError, match="not a TVR bench folder"):
        Bench(tmp_path)
    (tmp_path / "bench.json").write_text("{}", encoding="utf-8")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "eval.json").write_text(json.dumps([GOOD]), encoding="utf-8")
    bench = Bench(tmp_path)
    assert bench.splits() == ["eval"]
    assert bench.task(GOOD["task_id"]) == GOOD
    with pytest.raises(DataError, match="unknown task id 'nope'"):
        bench.task("nope")
    with pytest.raises(DataError, match="unknown split 'rl'; this bench has eval"):
        bench.tasks("rl")
