"""Issue 23 fault 7: a bench whose files changed after make-bench is refused with an error naming the file
and the field: a scene swapped to another seed, a scenes.json of nulls, an empty or truncated task list;
an empty split is an error, not a 0-episode run."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from spatialrl.cli import app
from spatialrl.envs.registry import get_suite
from spatialrl.envs.tvr.tasks import Bench
from spatialrl.errors import DataError


@pytest.fixture
def copy(bench_dir, tmp_path):
    out = tmp_path / "bench"
    shutil.copytree(bench_dir, out)
    return out


def _episodes(bench, split="eval"):
    return get_suite("tvr").episodes({"data": str(bench), "split": split})


def _unlock(bench):
    """Drop the file hashes from bench.json: what the checks below the fingerprint still catch."""
    manifest = json.loads((bench / "bench.json").read_text())
    del manifest["files"]
    (bench / "bench.json").write_text(json.dumps(manifest))


def test_manifest_fingerprints_scenes_and_every_task_file(bench_dir):
    files = json.loads((bench_dir / "bench.json").read_text())["files"]
    assert set(files) == {"scenes.json", "tasks/eval.json", "tasks/sft.json", "tasks/rl.json",
                          "tasks/diag_rotate.json", "tasks/diag_move.json"}
    assert len(_episodes(bench_dir)) == 4  # the untouched bench loads


def _swap_seed(bench):
    """Move every task of the first eval scene to the same room type with another seed."""
    tasks = json.loads((bench / "tasks/eval.json").read_text())
    old = tasks[0]["scene"]
    kind, room, seed = old.rsplit("-", 2)
    new = f"{kind}-{room}-{(int(seed) + 1) % 1_000_000:06d}"
    for t in tasks:
        if t["scene"] == old:
            t["scene"] = new
            t["task_id"] = t["task_id"].replace(old, new)
    (bench / "tasks/eval.json").write_text(json.dumps(tasks))
    return new


def test_task_scene_swapped_to_another_seed(copy):
    _swap_seed(copy)
    with pytest.raises(DataError, match=r"tasks/eval.json: does not match its fingerprint in .*bench.json"):
        _episodes(copy)
    _unlock(copy)  # even without the file hashes: the scene is not one the bench was made with
    with pytest.raises(DataError, match=r"tasks/eval.json: task \[0\] .* field 'scene': '.*' has no fingerprinted "
                                        r"entry in .*scenes.json"):
        _episodes(copy)


def test_scenes_json_entry_swapped_to_another_seed(copy):
    scenes = json.loads((copy / "scenes.json").read_text())
    scenes["eval"][0]["seed"] += 1
    (copy / "scenes.json").write_text(json.dumps(scenes))
    with pytest.raises(DataError, match=r"scenes.json: does not match its fingerprint"):
        _episodes(copy)
    _unlock(copy)
    with pytest.raises(DataError, match=r"scenes.json: eval\[0\] field 'seed': .* disagrees with scene id"):
        _episodes(copy)


def test_scenes_json_of_nulls(copy):
    scenes = json.loads((copy / "scenes.json").read_text())
    (copy / "scenes.json").write_text(json.dumps({k: [None] * len(v) for k, v in scenes.items()}))
    _unlock(copy)
    with pytest.raises(DataError, match=r"scenes.json: sft\[0\]: expected an object with scene, kind, room_type, "
                                        r"seed, got null|scenes.json: eval\[0\]: expected an object"):
        _episodes(copy)
    (copy / "scenes.json").write_text("null")
    with pytest.raises(DataError, match=r"scenes.json: expected an object of split -> scene list, got NoneType"):
        _episodes(copy)


def test_empty_task_list_and_empty_split(copy):
    (copy / "tasks/eval.json").write_text("[]")
    with pytest.raises(DataError, match=r"tasks/eval.json: does not match its fingerprint"):
        _episodes(copy)
    _unlock(copy)
    with pytest.raises(DataError, match=r"tasks/eval.json: split 'eval' has no tasks \(made with eval=4\)"):
        _episodes(copy)
    # a split the bench was made without (sft=0) is an error too, not a run of 0 episodes
    with pytest.raises(DataError, match=r"tasks/sft.json: split 'sft' has no tasks \(made with sft=0\)"):
        _episodes(copy, "sft")


def test_eval_cli_refuses_an_empty_split_and_leaves_nothing(bench_dir, tmp_path):
    out = tmp_path / "run"
    res = CliRunner().invoke(app, ["eval", "--task", "tvr", "--data", str(bench_dir), "--split", "sft",
                                   "--out", str(out)])
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "error:" in text and "split 'sft' has no tasks" in text, res.output
    assert not out.exists()


def test_truncated_task_file(copy):
    data = (copy / "tasks/eval.json").read_text()
    (copy / "tasks/eval.json").write_text(data[: len(data) // 2])
    with pytest.raises(DataError, match=r"tasks/eval.json: does not match its fingerprint"):
        Bench(copy).tasks("eval")
