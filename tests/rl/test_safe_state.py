"""Issue 23, fault 10: PPO's rollout state is read with ``torch.load(weights_only=True)``, so a copied run
folder cannot run code on resume; the safe form round-trips every type a rollout snapshot holds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from spatialrl.envs.registry import EpisodeSpec
from spatialrl.errors import DataError
from spatialrl.rollout.trajectory import Segment, Trajectory, VisionGroup
from spatialrl.train.ppo import train
from spatialrl.train.safe_state import TAG, load_state, state_bytes

from .test_ppo import ppo_config


class RunsCode:
    """Unpickling this object calls ``open(marker, "w")``: proof that loading ran code from the file."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def test_resume_refuses_a_rollout_state_that_runs_code(tmp_path, tiny_model_dir, letter_suite):
    cfg = ppo_config(tmp_path, tiny_model_dir, **{"updates": 2, "num_envs": 2, "num_steps": 4, "micro_batch_size": 2,
                                                  "checkpoint.every": 1, "task.options": {"letters": "e", "turns": 3}})
    train(cfg, stop_after=1)
    state = tmp_path / "run/rollout_state/update-000001-rank-0.pt"
    assert load_state(state)["counters"]["env_steps"] == 4  # the honest file loads
    marker = tmp_path / "pwned"
    torch.save({"slots": [RunsCode(marker), None], "counters": {"episodes_started": 0}}, state)
    with pytest.raises(DataError, match="refused to load.*cannot run code"):
        train(cfg)
    assert not marker.exists()


def test_round_trip_of_every_stored_type(tmp_path):
    image = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    segment = Segment([1, 2], [3], [1], [-0.25], [0], {"mm_token_type_ids": [0, 0, 0]},
                      [VisionGroup(0, {"pixel_values": torch.randn(2, 4)})],
                      [{"role": "user", "content": [{"type": "image", "image": image}, {"type": "text", "text": "hi"}]}])
    trajectory = Trajectory("ep0", "g", "cat", [segment, segment.fork()], [0, 1], [0.5, np.float32(1.5)],
                            [{"pos": (1, 2), 3: np.int64(7), TAG: "a dict that holds the tag key"}], ["a", "b"],
                            {"success": np.bool_(True)}, done=False, cut=None)
    spec = EpisodeSpec("ep0", "cat", {"stream": {"seed": 1}, "pano": Image.new("RGB", (3, 2), (9, 8, 7))}, seed=4)
    blob = {"slots": [(spec, ["Action: go"], trajectory), None], "counters": {"env_steps": 3}}
    path = tmp_path / "s.pt"
    path.write_bytes(state_bytes(blob))
    back = load_state(path)
    spec2, answers, traj2 = back["slots"][0]
    assert back["slots"][1] is None and back["counters"] == {"env_steps": 3} and answers == ["Action: go"]
    assert spec2.episode_id == "ep0" and spec2.seed == 4 and spec2.reset_options["stream"] == {"seed": 1}
    assert spec2.reset_options["pano"].tobytes() == spec.reset_options["pano"].tobytes()
    assert isinstance(traj2, Trajectory) and traj2.segments[0].prompt_ids == [1, 2]
    assert type(traj2.turn_rewards[1]) is np.float32 and traj2.turn_records[0][3] == np.int64(7)
    assert traj2.turn_records[0][TAG] == "a dict that holds the tag key" and traj2.turn_records[0]["pos"] == (1, 2)
    assert type(traj2.episode["success"]) is np.bool_
    assert torch.equal(traj2.segments[0].vision[0].tensors["pixel_values"], segment.vision[0].tensors["pixel_values"])
    img0 = traj2.segments[0].messages[0]["content"][0]["image"]
    assert img0.dtype == np.uint8 and np.array_equal(img0, image)
    assert img0 is traj2.segments[1].messages[0]["content"][0]["image"]  # one image stored once


def test_unsupported_types_fail_at_save_time():
    class Opaque:
        pass

    with pytest.raises(TypeError, match="Opaque has no safe stored form"):
        state_bytes({"x": Opaque()})
    with pytest.raises(TypeError, match="objects"):
        state_bytes({"x": np.array([object()])})


def test_plain_files_that_are_not_state_files_are_refused(tmp_path):
    path = tmp_path / "other.pt"
    torch.save({"slots": []}, path)
    with pytest.raises(DataError, match="not a spatialrl state file"):
        load_state(path)
    path.write_bytes(b"not a torch file")
    with pytest.raises(DataError, match="refused to load"):
        load_state(path)


def test_virl_rollout_state_with_images_resumes(tmp_path, tiny_model_dir):
    """A real task's in-flight episodes (street-view grids in the conversations, vision tensors in the
    segments) go through the safe form and the run resumes from them."""
    from spatialrl.envs.virl.testdata import golden_routes, write_dataset
    from spatialrl.train.config import load_config
    from spatialrl.train.rl_config import PPOConfig

    from .letters import REPO

    virl = write_dataset(tmp_path / "virl", golden_routes(), seed=0)
    cfg = load_config(PPOConfig, REPO / "configs/ppo/tiny_cpu.yaml", {
        "model.path": str(tiny_model_dir), "output_dir": str(tmp_path / "ppo"), "updates": 2, "num_envs": 2,
        "num_steps": 4, "micro_batch_size": 2, "epochs": 1, "checkpoint.every": 1, "task.data": str(virl),
        "sampling.max_new_tokens": 8, "task.options": {"grid_size": 224, "episodes": 4, "seed": 42}})
    train(cfg, stop_after=1)
    saved = load_state(tmp_path / "ppo/rollout_state/update-000001-rank-0.pt")
    in_flight = [s for s in saved["slots"] if s is not None]
    assert in_flight, "the checkpoint should cut through an episode"
    images = [p["image"] for _, _, t in in_flight for seg in t.segments for m in seg.messages
              if isinstance(m["content"], list) for p in m["content"] if p.get("type") == "image"]
    assert images and all(isinstance(i, np.ndarray) and i.dtype == np.uint8 for i in images)
    assert train(cfg)["finished"]
