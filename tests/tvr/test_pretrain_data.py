"""TVR visual pretraining data (envs/tvr/pretrain.py, `spatialrl tvr pretrain-data`): labels, pixels, format."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from spatialrl.envs.tvr.bench import BenchConfig, make_bench
from spatialrl.envs.tvr.cli import app
from spatialrl.envs.tvr.episode import CANDIDATE_RESPONSES, parse_action
from spatialrl.envs.tvr.lattice import ACTIONS, STOP, Pose
from spatialrl.envs.tvr.pretrain import (
    IMAGE_BLOCK,
    PAIR_ACTIONS,
    plan_pairs,
    pretrain_meta,
    pretrain_samples,
    split_scenes,
)
from spatialrl.envs.tvr.prompts import user_text
from spatialrl.envs.tvr.scenes import render_service, scene_lattice
from spatialrl.errors import DataError
from spatialrl.io import write_sft_samples
from spatialrl.train.data import SFTDataset

SIZE = {"width": 112, "height": 64}


@pytest.fixture(scope="module")
def bench(tmp_path_factory) -> Path:
    """One single-room and one multi-room scene per split for sft and eval; no rl split."""
    out = tmp_path_factory.mktemp("tvr_pretrain") / "bench"
    make_bench(out, BenchConfig.preset(seed=11, sizes={"eval": 4, "sft": 4, "rl": 0, "diag_rotate": 2, "diag_move": 0},
                                       scenes={"sft": 1, "eval": 1, "rl": 0}), progress=False)
    return out


def build(bench: Path, out: Path, pairs: int = 24, seed: int = 0, **options) -> dict:
    opts = {**SIZE, **options}
    kinds = ("same_view", "which_action")
    return write_sft_samples(out, pretrain_samples(bench, "sft", pairs, seed, kinds, opts),
                             pretrain_meta(bench, "sft", pairs, seed, kinds, opts))


@pytest.fixture(scope="module")
def data(bench, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pretrain") / "data"
    build(bench, out, pairs=32, seed=5)
    return out


@pytest.fixture(scope="module")
def plain(bench, tmp_path_factory) -> Path:
    """The same plan without the CURRENT/TARGET badges: equal poses give byte-equal frames."""
    out = tmp_path_factory.mktemp("pretrain") / "plain"
    build(bench, out, pairs=32, seed=5, badges=False)
    return out


def image_paths(row: dict) -> list[str]:
    return [p["image"] for m in row["messages"] for p in m["content"] if p["type"] == "image"]


def answer(row: dict) -> str:
    return row["messages"][-1]["content"][0]["text"]


def pose(values: list[int]) -> Pose:
    return Pose(*values)


def test_layout_is_tvrs_and_answers_are_tvrs(data):
    rows = SFTDataset.rows_of(data)
    for row in rows:
        system, user, assistant = row["messages"]
        assert [system["role"], user["role"], assistant["role"]] == ["system", "user", "assistant"]
        assert system["content"][0]["text"].startswith("You are a navigation agent in an indoor environment. ")
        text = "<image>".join(p["text"] for p in user["content"] if p["type"] == "text")
        assert [p["type"] for p in user["content"]] == ["text", "image", "text", "image", "text"]
        assert text.startswith(IMAGE_BLOCK)
        kind = row["category"].split("-")[0]
        if kind == "same_view":
            assert answer(row) in ("yes", "no")
        else:
            assert answer(row) in CANDIDATE_RESPONSES and answer(row) != f"Action: {STOP}"
    # TVR's own user turn opens with the very same image block
    assert user_text(list(ACTIONS)).startswith(IMAGE_BLOCK)


def test_same_view_pairs(plain, data):
    rows = SFTDataset.rows_of(plain)
    by_class = Counter(r["category"] for r in rows if r["category"].startswith("same_view"))
    assert by_class == {"same_view-same": 8, "same_view-one_action": 4, "same_view-random": 4}
    seen_near_kinds = set()
    for row in rows:
        if not row["category"].startswith("same_view"):
            continue
        first, second = pose(row["pair"]["first"]), pose(row["pair"]["second"])
        a, b = image_paths(row)
        lattice = scene_lattice(row["pair"]["scene"])
        if row["category"] == "same_view-same":
            assert answer(row) == "yes" and first == second and a == b  # the same content-addressed file
            continue
        assert answer(row) == "no" and first != second and a != b
        one_step = [act for act in PAIR_ACTIONS if lattice.step(first, act) == (second, True)]
        if row["category"] == "same_view-one_action":
            assert one_step == [row["pair"]["action"]]  # exactly one lattice action apart
            seen_near_kinds.add(row["pair"]["action"])
    assert len(seen_near_kinds) >= 2
    # with badges, a yes pair differs only inside the CURRENT / TARGET badge box (top-right corner)
    badged = SFTDataset(data)
    for i, row in enumerate(badged.rows):
        if row["category"] == "same_view-same":
            cur, tgt = (p["image"] for p in badged[i]["messages"][1]["content"] if p["type"] == "image")
            assert not np.array_equal(cur, tgt) and np.array_equal(cur[20:], tgt[20:])


def test_which_action_labels_move_the_first_pose_to_the_second(data):
    rows = [r for r in SFTDataset.rows_of(data) if r["category"].startswith("which_action")]
    counts = Counter(parse_action(answer(r)) for r in rows)
    assert set(counts) == set(PAIR_ACTIONS) and max(counts.values()) - min(counts.values()) <= 1  # balanced
    for row in rows:
        action = parse_action(answer(row))
        assert answer(row) == f"Action: {action}" and row["category"] == f"which_action-{action}"
        lattice = scene_lattice(row["pair"]["scene"])
        assert lattice.step(pose(row["pair"]["first"]), action) == (pose(row["pair"]["second"]), True)


def test_frames_are_the_envs_frames(data):
    """Each image is the env's frame of that pose (same renderer, size and badge)."""
    dataset = SFTDataset(data)
    service = render_service(SIZE["width"], SIZE["height"], 0)
    for i in (0, 7, len(dataset) - 1):
        row = dataset.rows[i]
        cur, tgt = (p["image"] for p in dataset[i]["messages"][1]["content"] if p["type"] == "image")
        scene = row["pair"]["scene"]
        assert np.array_equal(cur, service.frame(scene, pose(row["pair"]["first"]), "CURRENT"))
        assert np.array_equal(tgt, service.frame(scene, pose(row["pair"]["second"]), "TARGET"))


def test_deterministic_by_seed(bench, data, tmp_path):
    again = tmp_path / "again"
    build(bench, again, pairs=32, seed=5)
    assert (again / "samples.jsonl").read_bytes() == (data / "samples.jsonl").read_bytes()
    assert sorted(p.name for p in (again / "images").iterdir()) == sorted(p.name for p in (data / "images").iterdir())
    scenes = split_scenes(bench, "sft")
    assert plan_pairs(scenes, 32, 6) != plan_pairs(scenes, 32, 5)
    assert plan_pairs(scenes, 32, 5) == plan_pairs(scenes, 32, 5)


def test_scenes_come_from_the_split_never_from_eval(bench):
    sft = split_scenes(bench, "sft")
    tasks = json.loads((bench / "tasks" / "sft.json").read_text())
    assert sft == sorted({t["scene"] for t in tasks}) and len(sft) == 2
    assert {p.scene for p in plan_pairs(sft, 40, 1)} == set(sft)
    for split in ("eval", "diag_rotate"):  # the diagnostics are cut from the eval scenes
        with pytest.raises(DataError, match="evaluation scenes"):
            split_scenes(bench, split)


def test_clear_errors(bench, tmp_path):
    with pytest.raises(DataError, match=r"rl\.json.*split 'rl' has no tasks"):
        list(pretrain_samples(bench, "rl", 4, 0))
    with pytest.raises(DataError, match="unknown option.*memory"):
        list(pretrain_samples(bench, "sft", 4, 0, options={"memory": "ao"}))
    with pytest.raises(DataError, match="width"):
        list(pretrain_samples(bench, "sft", 4, 0, options={"width": 4}))
    with pytest.raises(DataError, match="--pairs"):
        list(pretrain_samples(bench, "sft", 0, 0))
    assert not (tmp_path / "x").exists()
    res = CliRunner().invoke(app, ["pretrain-data", "--data", str(bench), "--split", "eval", "--out",
                                   str(tmp_path / "x"), "--pairs", "4"])
    assert res.exit_code == 2 and "evaluation scenes" in " ".join(res.output.split())
    assert not (tmp_path / "x").exists()


def test_cli_writes_the_dataset(bench, tmp_path):
    out = tmp_path / "cli"
    res = CliRunner().invoke(app, ["pretrain-data", "--data", str(bench), "--out", str(out), "--pairs", "9",
                                   "--seed", "2", "--kinds", "which_action", "--set", "width=96", "--set", "height=54"])
    assert res.exit_code == 0, res.output
    meta = json.loads((out / "meta.json").read_text())
    assert meta["format"] == "spatialrl-sft/1" and meta["task"] == "tvr" and meta["samples"] == 9
    assert meta["options"]["width"] == 96 and meta["pretrain"]["kinds"] == ["which_action"]
    assert SFTDataset(out)[0]["messages"][1]["content"][1]["image"].shape == (54, 96, 3)
    res = CliRunner().invoke(app, ["pretrain-data", "--data", str(bench), "--out", str(out), "--pairs", "9"])
    assert res.exit_code == 2 and "not empty" in res.output


# ------------------------------------------------------------------------------------------- training
@pytest.fixture(scope="module")
def tiny_builtin(tmp_path_factory) -> Path:
    from spatialrl.models.builtin import init_model

    out = tmp_path_factory.mktemp("models") / "tiny"
    init_model("tiny", out, seed=0)
    return out


@pytest.mark.parametrize("engine", ["collator", "tensor"])
def test_trains_two_updates_through_both_engines(data, tiny_builtin, tmp_path, engine):
    from safetensors.torch import load_file

    from spatialrl.train.common import reset_accelerate_state
    from spatialrl.train.config import SFTConfig, load_config
    from spatialrl.train.sft import train

    cfg = load_config(SFTConfig, None, {
        "output_dir": str(tmp_path / "run"), "data.train": str(data), "data.engine": engine,
        "model.path": str(tiny_builtin), "max_steps": 2, "per_device_batch_size": 4, "grad_accum": 1,
        "optim.lr": 3e-3, "optim.warmup_ratio": 0.0, "logging.every": 1, "logging.report_to": "none",
        "checkpoint.resume": "never"})
    try:
        summary = train(cfg)
    finally:
        reset_accelerate_state()  # accelerate's state is a process-wide singleton
    assert summary["finished"] and summary["step"] == 2
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["train/loss"] for r in logged if "train/loss" in r] and all(
        np.isfinite(r["train/loss"]) for r in logged if "train/loss" in r)
    before, after = load_file(str(tiny_builtin / "model.safetensors")), load_file(str(tmp_path / "run" / "final" / "model.safetensors"))
    assert any(not np.array_equal(before[k].float().numpy(), after[k].float().numpy()) for k in before)


def test_merges_with_expert_data(bench, data, tmp_path):
    """`spatialrl data merge` joins pretraining pairs with TVR expert SFT data (same task, same format)."""
    from spatialrl.envs.registry import get_suite
    from spatialrl.train.data import build_sft_dataset, merge_sft_datasets

    suite = get_suite("tvr")
    expert = tmp_path / "expert"
    build_sft_dataset(suite, {**suite.default_options, "data": str(bench), "split": "sft", **SIZE, "memory": "ao",
                              "cache_mb": 16}, expert, episodes=1, progress=False)
    meta = merge_sft_datasets([data, expert], tmp_path / "merged")
    merged = SFTDataset(tmp_path / "merged")
    assert len(merged) == meta["samples"] == len(SFTDataset(data)) + len(SFTDataset(expert))
    assert merged[0]["messages"][1]["content"][1]["image"].shape == (SIZE["height"], SIZE["width"], 3)
