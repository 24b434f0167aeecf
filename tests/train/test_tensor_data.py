"""The GPU-speed data engine (train/tensor_data.py) gives the collator's exact batches, and trains alike."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from spatialrl.errors import DataError
from spatialrl.models.processor import load_processor
from spatialrl.train.data import SFTDataset
from spatialrl.train.sft import Collator, train
from spatialrl.train.tensor_data import TensorBatcher, compile_dataset

from .test_sft_train import make_cfg, weights


@pytest.mark.parametrize("name", ["tvr_ao_data", "tvr_va_data", "virl_data", "virl_retry_data"])
def test_batches_equal_the_collators(request, name, tiny_builtin):
    from transformers import AutoModelForImageTextToText

    data = request.getfixturevalue(name)
    if name == "virl_retry_data":  # context-only answers reach the engine's labels too
        assert any(m.get("train") is False for r in SFTDataset.rows_of(data) for m in r["messages"])
    processor = load_processor(tiny_builtin)
    model = AutoModelForImageTextToText.from_pretrained(tiny_builtin)
    folder = compile_dataset(data, processor, "qwen2_5_vl")
    batcher = TensorBatcher(folder, processor.tokenizer.pad_token_id)
    dataset = SFTDataset(data)
    assert len(batcher) == len(dataset)
    collate = Collator(processor, "qwen2_5_vl", None)
    for indices in ([0, 1, 2], [len(dataset) - 1, 0], [1]):
        want = collate([dataset[i] for i in indices])
        got = batcher.batch(indices)
        assert set(got) == set(want) | {"position_ids"}, (set(got), set(want))
        # the model's own rope positions (transformers' get_rope_index) of the collator's batch
        rope, _ = model.model.get_rope_index(want["input_ids"], want["mm_token_type_ids"],
                                             image_grid_thw=want.get("image_grid_thw"),
                                             attention_mask=want["attention_mask"])
        real = want["attention_mask"].bool()
        assert torch.equal(got["position_ids"][:, real], rope[:, real])
        for key in set(want) - {"pixel_values"}:
            assert torch.equal(got[key], want[key].to(got[key].dtype)), key
        assert got["pixel_values"].shape == want["pixel_values"].shape
        torch.testing.assert_close(got["pixel_values"], want["pixel_values"].float(), atol=1e-5, rtol=1e-5)


def test_frames_on_the_host_give_the_same_batches(tvr_ao_data, tiny_builtin):
    """data.images_on_device=false: frames memory-mapped and copied per batch, the batches unchanged."""
    processor = load_processor(tiny_builtin)
    folder = compile_dataset(tvr_ao_data, processor, "qwen2_5_vl")
    resident = TensorBatcher(folder, processor.tokenizer.pad_token_id)
    mapped = TensorBatcher(folder, processor.tokenizer.pad_token_id, images_on_device=False)
    assert mapped.host_images is not None and len(mapped.images) == 0 and mapped.image_grid == resident.image_grid
    for indices in ([0, 1, 2], [len(resident) - 1, 0], [1]):
        want, got = resident.batch(indices), mapped.batch(indices)
        assert set(got) == set(want)
        for key in want:
            assert torch.equal(got[key], want[key]), key


def test_stop_samples_pair_the_current_frame_with_the_target(tvr_ao_data, tiny_builtin):
    """At Stop-labelled states the current and target frames are the same pixels (the pairing is right)."""
    processor = load_processor(tiny_builtin)
    batcher = TensorBatcher(compile_dataset(tvr_ao_data, processor, "qwen2_5_vl"), processor.tokenizer.pad_token_id)
    rows = SFTDataset.rows_of(tvr_ao_data)
    stops = [i for i, r in enumerate(rows) if r["messages"][-1]["content"][0]["text"] == "Action: Stop"]
    moves = [i for i, r in enumerate(rows) if r["messages"][-1]["content"][0]["text"] != "Action: Stop"]
    assert stops and moves
    for i in stops:
        refs = batcher.image_ref[batcher.image_offsets[i]:batcher.image_offsets[i + 1]]
        frames = batcher.images[refs.long()]
        # TVR badges each frame ("CURRENT" / "TARGET"), so compare away from the badge corner
        assert torch.equal(frames[0, 20:], frames[1, 20:])
    assert any(not torch.equal(batcher.images[batcher.image_ref[batcher.image_offsets[i]:batcher.image_offsets[i + 1]].long()][0, 20:],
                               batcher.images[batcher.image_ref[batcher.image_offsets[i]:batcher.image_offsets[i + 1]].long()][1, 20:])
               for i in moves)


def test_compiled_once_and_keyed_by_processor(tvr_ao_data, tiny_builtin):
    processor = load_processor(tiny_builtin)
    a = compile_dataset(tvr_ao_data, processor, "qwen2_5_vl")
    mtime = (a / "ids.npy").stat().st_mtime_ns
    assert compile_dataset(tvr_ao_data, processor, "qwen2_5_vl") == a
    assert (a / "ids.npy").stat().st_mtime_ns == mtime
    with pytest.raises(DataError, match="collator"):
        compile_dataset(tvr_ao_data, processor, "mllama")


def test_parallel_compile_equals_serial(tmp_path, tvr_ao_data, tiny_builtin):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(tvr_ao_data, copy, ignore=shutil.ignore_patterns("tensors-*"))
    processor = load_processor(tiny_builtin)
    serial = compile_dataset(tvr_ao_data, processor, "qwen2_5_vl")
    parallel = compile_dataset(copy, processor, "qwen2_5_vl", workers=2, chunk=7)
    for name in ("ids", "labels", "offsets", "images", "image_ref", "image_offsets"):
        assert np.array_equal(np.load(serial / f"{name}.npy"), np.load(parallel / f"{name}.npy")), name


def test_training_on_the_engine_equals_the_collator(tmp_path, tvr_ao_data, tiny_builtin):
    train(make_cfg(tmp_path / "a", tvr_ao_data, tiny_builtin, max_steps=3))
    train(make_cfg(tmp_path / "b", tvr_ao_data, tiny_builtin, max_steps=3, **{"data.engine": "tensor"}))
    wa, wb = weights(tmp_path / "a" / "final"), weights(tmp_path / "b" / "final")
    for key in wa:
        torch.testing.assert_close(wa[key], wb[key], atol=1e-4, rtol=1e-3)


def test_merge_joins_shards(tmp_path, tvr_ao_data, tvr_va_data):
    from spatialrl.train.data import merge_sft_datasets

    merged = tmp_path / "merged"
    meta = merge_sft_datasets([tvr_ao_data, tvr_ao_data], merged)
    one = SFTDataset(tvr_ao_data)
    both = SFTDataset(merged)
    assert len(both) == 2 * len(one) == meta["samples"]
    assert len({r["id"] for r in both.rows}) == len(both)

    def first_image(sample):
        return next(p["image"] for m in sample["messages"] for p in m["content"] if p["type"] == "image")

    assert np.array_equal(first_image(both[len(one)]), first_image(one[0]))
    with pytest.raises(DataError, match="not empty"):
        merge_sft_datasets([tvr_ao_data], merged)


def test_text_only_data_gets_plain_positions(gp_data, tiny_builtin):
    """No images (GeneralPoints in language mode): the rope positions count the real tokens of each row."""
    processor = load_processor(tiny_builtin)
    batch = TensorBatcher(compile_dataset(gp_data, processor, "qwen2_5_vl"), processor.tokenizer.pad_token_id).batch([0, 1])
    valid = batch["attention_mask"].bool()
    want = (torch.cumsum(valid.long(), 1) - 1).masked_fill(~valid, 0)
    assert all(torch.equal(axis, want) for axis in batch["position_ids"])
