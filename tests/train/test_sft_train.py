"""The SFT trainer on CPU with the built-in tiny model and real expert data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from typer.testing import CliRunner

from spatialrl.errors import ConfigError, DataError
from spatialrl.train.config import SFTConfig, load_config
from spatialrl.train.data import SFTDataset
from spatialrl.train.sft import Collator, token_loss, train


def make_cfg(out: Path, data: Path, model: Path, **overrides) -> SFTConfig:
    base = {"output_dir": str(out), "data.train": str(data), "model.path": str(model), "max_steps": 4,
            "per_device_batch_size": 2, "grad_accum": 1, "optim.lr": 3e-3, "optim.warmup_ratio": 0.0,
            "logging.every": 1, "logging.report_to": "none", "checkpoint.resume": "never"}
    return load_config(SFTConfig, None, {**base, **overrides})


def mean_loss(model_dir: Path, data: Path) -> float:
    """Token-mean loss of a saved model on every sample (independent of the trainer's own logging)."""
    from transformers import AutoModelForImageTextToText

    from spatialrl.models.processor import load_processor

    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    collate = Collator(load_processor(model_dir), model.config.model_type, None)
    dataset = SFTDataset(data)
    total = count = 0.0
    with torch.no_grad():
        for i in range(0, min(len(dataset), 16), 8):
            loss_sum, n, _ = token_loss(model, collate([dataset[j] for j in range(i, min(i + 8, len(dataset)))]))
            total, count = total + loss_sum.item(), count + n.item()
    return total / count


def losses(out: Path) -> list[float]:
    return [r["train/loss"] for r in map(json.loads, (out / "metrics.jsonl").read_text().splitlines())
            if "train/loss" in r]


def weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def test_a_few_steps_lower_the_loss_on_expert_data(tmp_path, tvr_ao_data, tiny_builtin):
    before = mean_loss(tiny_builtin, tvr_ao_data)
    summary = train(make_cfg(tmp_path / "run", tvr_ao_data, tiny_builtin, max_steps=8, per_device_batch_size=4))
    after = mean_loss(tmp_path / "run" / "final", tvr_ao_data)
    assert summary["finished"] and summary["step"] == 8
    assert after < before - 1.0, (before, after)  # from ~ln(vocab) towards the answers' few tokens
    assert losses(tmp_path / "run")[-1] < losses(tmp_path / "run")[0]


def test_resume_continues_bit_exactly(tmp_path, gp_vl_data, tiny_builtin):
    """Kill after 3 updates (last checkpoint at 2), resume: same losses and weights as one straight run."""
    common = {"grad_accum": 2, "checkpoint.every": 2, "checkpoint.resume": "auto", "max_steps": 4}
    straight = tmp_path / "straight"
    train(make_cfg(straight, gp_vl_data, tiny_builtin, **common))
    resumed = tmp_path / "resumed"
    train(make_cfg(resumed, gp_vl_data, tiny_builtin, **common), stop_after=3)
    assert not (resumed / "final").exists()
    train(make_cfg(resumed, gp_vl_data, tiny_builtin, **common))
    straight_losses, resumed_losses = losses(straight), losses(resumed)
    assert resumed_losses == straight_losses[:3] + straight_losses[2:]  # update 3 ran twice, identically
    a, b = weights(straight / "final"), weights(resumed / "final")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    state = json.loads((resumed / "checkpoints" / "step-000004" / "trainer_state.json").read_text())
    assert state["step"] == 4 and state["config"]["grad_accum"] == 2


def test_sigterm_pauses_with_a_checkpoint_and_resume_finishes_bit_exactly(tmp_path, gp_vl_data, tiny_builtin,
                                                                            monkeypatch):
    """SIGTERM in update 2 (a preemption, `timeout`): checkpoint at 2, no final model; resumed = straight."""
    import os
    import signal

    from spatialrl.train.run import Run

    common = {"checkpoint.resume": "auto", "max_steps": 4}
    straight = tmp_path / "straight"
    train(make_cfg(straight, gp_vl_data, tiny_builtin, **common))
    original = Run.after_update

    def after_update(self, step, ending, save, stop_after):
        if step == 2:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler sets the flag before the next line runs
        return original(self, step, ending, save, stop_after)

    paused = tmp_path / "paused"
    with monkeypatch.context() as m:
        m.setattr(Run, "after_update", after_update)
        summary = train(make_cfg(paused, gp_vl_data, tiny_builtin, **common))
    assert summary["paused"] and not summary["finished"] and summary["step"] == 2
    assert not (paused / "final").exists() and (paused / "checkpoints" / "step-000002").is_dir()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # the handler is released after the run
    summary = train(make_cfg(paused, gp_vl_data, tiny_builtin, **common))
    assert summary["finished"] and not summary["paused"] and summary["step"] == 4
    assert losses(paused) == losses(straight)
    a, b = weights(straight / "final"), weights(paused / "final")
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_sigterm_to_the_process_group_pauses_a_run_with_dataloader_workers(tmp_path, gp_vl_data, tiny_builtin,
                                                                           monkeypatch):
    """`timeout` and Slurm signal the whole process group, so the DataLoader workers get SIGTERM too, from a
    process that is not their parent (torch's workers exit quietly only on their parent's SIGTERM). They must
    leave it to the trainer: a dead worker made the trainer raise before its pause (GPU run, 2026-12-06)."""
    import multiprocessing
    import os
    import subprocess
    import time

    from spatialrl.train.run import Run

    original = Run.after_update
    signalled = []

    def after_update(self, step, ending, save, stop_after):
        if step == 2:
            signalled.extend(str(w.pid) for w in multiprocessing.active_children())
            subprocess.run(["kill", "-s", "TERM", *signalled, str(os.getpid())], check=True)  # like `timeout`
            time.sleep(1.0)  # the worker's death (SIGCHLD) arrives, as it did during a GPU update
        return original(self, step, ending, save, stop_after)

    run = tmp_path / "run"
    with monkeypatch.context() as m:
        m.setattr(Run, "after_update", after_update)
        summary = train(make_cfg(run, gp_vl_data, tiny_builtin, max_steps=6, **{
            "checkpoint.resume": "auto", "data.num_workers": 1}))
    assert signalled  # the worker was there and got the signal
    assert summary["paused"] and summary["step"] == 2 and (run / "checkpoints" / "step-000002").is_dir()


def test_gradient_accumulation_equals_the_bigger_batch(tmp_path, virl_data, tiny_builtin):
    """Every assistant token weighs the same, however the update's samples are split into micro-batches."""
    train(make_cfg(tmp_path / "big", virl_data, tiny_builtin, max_steps=1, per_device_batch_size=4))
    train(make_cfg(tmp_path / "acc", virl_data, tiny_builtin, max_steps=1, per_device_batch_size=2, grad_accum=2))
    a, b = weights(tmp_path / "big" / "final"), weights(tmp_path / "acc" / "final")
    assert max((a[k] - b[k]).abs().max().item() for k in a) < 1e-5
    assert any(not torch.equal(a[k], weights(tiny_builtin)[k]) for k in a)  # and the update did something


def test_lora_with_a_frozen_vision_tower(tmp_path, tvr_ao_data, tiny_builtin):
    cfg = make_cfg(tmp_path / "lora", tvr_ao_data, tiny_builtin, max_steps=3, **{
        "model.freeze_vision": True, "model.lora.enabled": True, "model.lora.r": 4,
        "model.gradient_checkpointing": True, "optim.lr": 1e-2})
    train(cfg)
    init, merged = weights(tiny_builtin), weights(tmp_path / "lora" / "final")
    changed = {k for k in init if not torch.equal(init[k], merged[k])}
    assert changed and all(k.startswith("model.layers.") and k.endswith("proj.weight") for k in changed)
    assert not any(k.startswith("visual.") for k in init if not torch.equal(init[k], merged[k]))
    metrics = [json.loads(x) for x in (tmp_path / "lora" / "metrics.jsonl").read_text().splitlines()]
    setup = metrics[0]
    assert 0 < setup["setup/params_trainable"] < setup["setup/params_total"] / 5
    windows = [m for m in metrics if "train/samples_per_s" in m]  # what bounds a run: the input or the model
    assert windows and all(0.0 < m["train/data_wait_share"] < 1.0 for m in windows)


def test_closed_loop_eval_during_training(tmp_path, gp_data, tiny_builtin):
    out = tmp_path / "run"
    summary = train(make_cfg(out, gp_data, tiny_builtin, max_steps=2, **{
        "eval.task": "gp", "eval.every": 1, "eval.episodes": 2, "eval.max_new_tokens": 8,
        "eval.options": {"mode": "l", "episodes": 3, "split": "in-dist,rule-ood"}, "data.eval": str(gp_data),
        "model.save_dtype": "bfloat16"}))
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    evals = [r for r in records if "eval/overall/success_rate" in r]
    assert [r["step"] for r in evals] == [1, 2]  # periodic + final
    assert all(r["eval/in-dist/episodes"] == 2 and r["eval/rule-ood/episodes"] == 2 for r in evals)  # N per split
    episodes = (out / "eval" / "step-000001" / "episodes.jsonl").read_text().splitlines()
    assert len(episodes) == 4 and json.loads(episodes[0])["agent"] == "sft-step1"
    assert "heldout/loss" in summary["final"] and summary["final"]["heldout/tokens"] > 0
    final = load_file(str(out / "final" / "model.safetensors"))
    assert {t.dtype for t in final.values()} == {torch.bfloat16}
    meta = json.loads((out / "final" / "spatialrl_model.json").read_text())
    assert meta["trained_by"] == "spatialrl train sft" and meta["updates"] == 2
    assert meta["dataset"]["task"] == "gp" and meta["recipe"]["max_steps"] == 2


def test_an_eval_without_its_data_fails_before_training(tmp_path, gp_data, tiny_builtin):
    """A V-IRL eval needs a city: the run stops at once naming eval.data, not after its budget at the final
    eval, and leaves no run folder behind."""
    out = tmp_path / "run"
    with pytest.raises(DataError, match=r"eval \(the in-training evaluation: eval.task=virl.*dataset folder"):
        train(make_cfg(out, gp_data, tiny_builtin, **{"eval.task": "virl"}))
    assert not out.exists()
    with pytest.raises(DataError, match=r"(?s)eval.task=virl.*route_infos.json: missing"):
        train(make_cfg(out, gp_data, tiny_builtin, **{"eval.task": "virl", "eval.data": str(gp_data)}))
    assert not out.exists()


def test_preset_overrides_build_a_smaller_model(tmp_path, gp_data):
    cfg = make_cfg(tmp_path / "p", gp_data, "x", max_steps=1, **{
        "model.path": "preset:tiny", "model.preset_overrides": {"num_layers": 1, "intermediate_size": 64}})
    train(cfg)
    meta = json.loads((tmp_path / "p" / "final" / "spatialrl_model.json").read_text())
    assert meta["preset"] == "tiny" and meta["preset_overrides"] == {"num_layers": 1, "intermediate_size": 64}
    assert meta["preset_sizes"]["num_layers"] == 1
    with pytest.raises(DataError, match="unknown field"):
        train(make_cfg(tmp_path / "q", gp_data, "x", **{"model.path": "preset:tiny",
                                                        "model.preset_overrides": {"layers": 1}}))


def test_resume_refuses_a_changed_batch_layout(tmp_path, gp_data, tiny_builtin):
    out = tmp_path / "run"
    train(make_cfg(out, gp_data, tiny_builtin, max_steps=2, **{"checkpoint.every": 1}), stop_after=1)
    with pytest.raises(DataError, match="per_device_batch_size was 2 and is now 1"):
        train(make_cfg(out, gp_data, tiny_builtin, max_steps=2, per_device_batch_size=1,
                       **{"checkpoint.resume": "auto"}))


def test_train_cli(tmp_path, gp_data, tiny_builtin):
    from spatialrl.cli import app

    recipe = tmp_path / "r.yaml"
    recipe.write_text(f"data: {{train: {gp_data}}}\nmodel: {{path: {tiny_builtin}}}\nlogging: {{report_to: none}}\n")
    runner = CliRunner()
    ok = runner.invoke(app, ["train", "sft", str(recipe), f"--output_dir={tmp_path / 'o'}", "--max_steps=1",
                             "--per_device_batch_size=2"])
    assert ok.exit_code == 0, ok.output
    assert json.loads((tmp_path / "o" / "summary.json").read_text())["step"] == 1
    bad = runner.invoke(app, ["train", "sft", str(recipe), "--optim.lrr=1"])
    assert bad.exit_code == 2 and "did you mean 'lr'" in bad.output
    listing = runner.invoke(app, ["train", "sft", "--help-config"])
    assert listing.exit_code == 0 and "optim.warmup_ratio" in listing.output


def test_tensorboard_through_accelerate_trackers(tmp_path, gp_data, tiny_builtin):
    """logging.report_to=tensorboard: accelerate's tracker writes the run's scalars under OUTPUT/tensorboard."""
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    out = tmp_path / "run"
    train(make_cfg(out, gp_data, tiny_builtin, max_steps=2, **{"logging.report_to": "tensorboard"}))
    events = list((out / "tensorboard").rglob("events.out.tfevents.*"))
    assert events, sorted(p.name for p in out.rglob("*"))
    scalars = set()
    for path in events:
        acc = EventAccumulator(str(path))
        acc.Reload()
        scalars |= set(acc.Tags()["scalars"])
    assert "train/loss" in scalars


def test_image_swap_check(tvr_ao_data, tiny_builtin):
    """heldout/image_swap_gap: the held-out loss with each sample's images swapped for another's, minus the
    true loss. The swap keeps the text and moves whole image sets; identical images give a gap of exactly 0."""
    from accelerate import Accelerator
    from transformers import AutoModelForImageTextToText

    from spatialrl.models.processor import load_processor
    from spatialrl.train.sft import heldout_loss, swap_images

    dataset = SFTDataset(tvr_ao_data)
    samples = [dataset[i] for i in range(6)]
    originals, swapped = swap_images(samples)
    assert len(originals) == len(swapped) == 6

    def images(s):
        return [p["image"] for m in s["messages"] for p in m["content"] if p["type"] == "image"]

    def text(s):
        return [p.get("text") for m in s["messages"] for p in m["content"]]

    for k, (a, b) in enumerate(zip(originals, swapped, strict=True)):  # AO: the next sample's two frames
        assert text(a) == text(b)
        donor = samples[(k + 1) % 6]
        assert all(np.array_equal(x, y) for x, y in zip(images(b), images(donor), strict=True))
    assert swap_images(samples[:1]) == ([], [])  # alone: nothing to swap with
    # samples of different image counts (visual-action trajectories): a shorter donor is cycled through
    short = {**samples[1], "messages": [{**m, "content": [p for p in m["content"] if p["type"] != "image"][:1]
                                         + [p for p in m["content"] if p["type"] == "image"][:1]}
                                        for m in samples[1]["messages"]]}
    assert len(images(short)) == 1
    _, (first, second) = swap_images([samples[0], short])
    assert all(np.array_equal(x, images(short)[0]) for x in images(first))  # both frames from the 1-image donor
    assert np.array_equal(images(second)[0], images(samples[0])[0])

    model = AutoModelForImageTextToText.from_pretrained(tiny_builtin, dtype=torch.float32)
    collate = Collator(load_processor(tiny_builtin), model.config.model_type, None)
    acc = Accelerator(cpu=True)
    got = heldout_loss(acc, model, dataset, collate, limit=6, batch_size=3)
    assert got["heldout/image_swap_gap"] != 0.0  # a random model still reacts to pixels

    class Gone:  # a later evaluation must not read (decode, collate) the samples again
        def __len__(self):
            return 6

        def __getitem__(self, i):
            raise AssertionError("held-out samples collated again")

    cache: dict = {}
    assert heldout_loss(acc, model, dataset, collate, limit=6, batch_size=3, cache=cache) == got
    assert heldout_loss(acc, model, Gone(), collate, limit=6, batch_size=3, cache=cache) == got

    # kept in the run folder: a resumed run loads them; other held-out settings collate again
    from spatialrl.train.sft import stored_heldout_batches

    folder = tvr_ao_data.parent / "run-heldout"
    first = stored_heldout_batches(acc, dataset, collate, 6, 3, folder)
    assert (folder / "heldout-batches-rank0.pt").is_file()
    class GoneHere(Gone):  # the same folder and size as the real held-out data, unreadable
        root = dataset.root

        def __len__(self):
            return len(dataset)

    gone = GoneHere()
    again = stored_heldout_batches(acc, gone, collate, 6, 3, folder)
    assert heldout_loss(acc, model, gone, collate, 6, 3, cache={"batches": again}) == got
    assert all(torch.equal(a[k], b[k]) for a, b in zip(first["true"], again["true"], strict=True) for k in a)
    with pytest.raises(AssertionError, match="collated again"):
        stored_heldout_batches(acc, gone, collate, 4, 3, folder)  # another limit: not the stored ones

    class SameImages:  # every sample shows the first sample's frames: swapping changes nothing
        def __len__(self):
            return 6

        def __getitem__(self, i):
            first = iter(images(samples[0]))
            s = samples[i]
            return {**s, "messages": [{**m, "content": [{**p, "image": next(first)} if p["type"] == "image" else p
                                                        for p in m["content"]]} for m in s["messages"]]}

    same = heldout_loss(acc, model, SameImages(), collate, limit=6, batch_size=3)
    assert same["heldout/image_swap_gap"] == 0.0


def test_max_pixels_sets_the_processor_bound_and_ships_it(tmp_path, gp_vl_data, tiny_builtin):
    """model.max_pixels: the tiny preset's bound is 112*112, so a 224-px image reaches it at 112 (16 tokens);
    raised to 224*224 it keeps its pixels (64 tokens), and the trained model's processor says so."""
    from spatialrl.models.processor import load_processor
    from spatialrl.train.common import load_model_and_processor
    from spatialrl.train.config import ModelConfig
    from spatialrl.train.tensor_data import image_settings, resized_shape

    _, default, _ = load_model_and_processor(ModelConfig(path=str(tiny_builtin)), 0)
    assert resized_shape(224, 224, image_settings(default)) == (112, 112)
    _, raised, meta = load_model_and_processor(ModelConfig(path=str(tiny_builtin), max_pixels=224 * 224), 0)
    assert resized_shape(224, 224, image_settings(raised)) == (224, 224) and meta["max_pixels"] == 224 * 224
    train(make_cfg(tmp_path / "run", gp_vl_data, tiny_builtin, max_steps=1, **{"model.max_pixels": 224 * 224}))
    shipped = load_processor(tmp_path / "run" / "final")
    assert image_settings(shipped)["max_pixels"] == 224 * 224
    with pytest.raises(ConfigError, match="model.max_pixels"):
        load_model_and_processor(ModelConfig(path=str(tiny_builtin), max_pixels=0), 0)
