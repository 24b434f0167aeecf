"""Sample weights of all-optimal label data (`--labels all_optimal`): each of a state's k samples weighs 1/k.

The state then counts once in the SFT loss, and its loss is the cross-entropy against the uniform
distribution over its k optimal answers. Expert-label data has no weights and keeps the unweighted path.
"""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict

import pytest
import torch
import torch.nn.functional as F

from spatialrl.envs.registry import get_suite
from spatialrl.errors import DataError
from spatialrl.models.encode import IGNORE_INDEX
from spatialrl.models.processor import load_processor
from spatialrl.train.data import SFTDataset, build_sft_dataset, merge_sft_datasets
from spatialrl.train.sft import Collator, supervised_tokens, token_loss
from spatialrl.train.tensor_data import TensorBatcher, compile_dataset

from .conftest import tvr_options


@pytest.fixture(scope="module")
def all_optimal_data(tmp_path_factory, tvr_bench):
    out = tmp_path_factory.mktemp("weights") / "all"
    build_sft_dataset(get_suite("tvr"), tvr_options(tvr_bench, memory="ao"), out, labels="all_optimal",
                      progress=False)
    return out


@pytest.fixture(scope="module")
def tiny(tiny_builtin):
    from transformers import AutoModelForImageTextToText

    model = AutoModelForImageTextToText.from_pretrained(tiny_builtin, dtype=torch.float32).eval()
    return model, Collator(load_processor(tiny_builtin), model.config.model_type, None)


def _rows(folder):
    return [json.loads(line) for line in (folder / "samples.jsonl").read_text().splitlines()]


def _states(rows):
    states = defaultdict(list)
    for i, row in enumerate(rows):
        states[(row["episode_id"], row["turns"][0])].append(i)
    return states


def test_rows_weigh_one_over_k_and_sum_to_one_per_state(all_optimal_data, tvr_ao_data):
    rows = _rows(all_optimal_data)
    states = _states(rows)
    assert any(len(group) > 1 for group in states.values())  # some states have several optimal actions
    for group in states.values():
        assert all(rows[i]["weight"] == 1.0 / len(group) == 1.0 / rows[i]["n_labels"] for i in group)
        assert math.isclose(sum(rows[i]["weight"] for i in group), 1.0, rel_tol=1e-12)
    dataset = SFTDataset(all_optimal_data)
    assert dataset.weights == [r["weight"] for r in rows] and dataset[0]["weight"] == rows[0]["weight"]
    # expert labels: no weight anywhere, so the trainer's unweighted path
    assert not any("weight" in r for r in _rows(tvr_ao_data))
    expert = SFTDataset(tvr_ao_data)
    assert expert.weights is None and "weight" not in expert[0]


def test_merge_keeps_weights_and_unweighted_rows_read_as_one(tmp_path, all_optimal_data, tvr_ao_data):
    merge_sft_datasets([all_optimal_data, tvr_ao_data], tmp_path / "m")
    merged = SFTDataset(tmp_path / "m")
    n = len(SFTDataset(all_optimal_data))
    assert merged.weights[:n] == SFTDataset(all_optimal_data).weights
    assert merged.weights[n:] == [1.0] * (len(merged) - n) and merged[n]["weight"] == 1.0


def test_weighted_token_loss_is_the_weighted_cross_entropy_sum(all_optimal_data, tiny):
    model, collate = tiny
    dataset = SFTDataset(all_optimal_data)
    samples = [{k: v for k, v in dataset[i].items() if k != "weight"} for i in range(3)]
    plain = collate(samples)
    assert "sample_weight" not in plain
    w = torch.tensor([0.5, 2.0, 0.25])
    weighted = {**plain, "sample_weight": w}
    with torch.no_grad():
        loss_sum, count, correct = token_loss(model, weighted)
        base_sum, base_count, base_correct = token_loss(model, plain)
        ones = token_loss(model, {**plain, "sample_weight": torch.ones(3)})
        logits = model(**{k: v for k, v in plain.items() if k != "labels"}, use_cache=False).logits
    # by hand, sample by sample
    want_sum, want_count, want_correct = 0.0, 0.0, 0.0
    for i in range(3):
        targets = plain["labels"][i, 1:]
        mask = targets != IGNORE_INDEX
        row_logits, gold = logits[i, :-1][mask], targets[mask]
        want_sum += w[i].item() * F.cross_entropy(row_logits, gold, reduction="sum").item()
        want_count += w[i].item() * int(mask.sum())
        want_correct += w[i].item() * int((row_logits.argmax(-1) == gold).sum())
    assert loss_sum.item() == pytest.approx(want_sum, rel=1e-5)
    assert count.item() == pytest.approx(want_count, rel=1e-12)
    assert correct.item() == pytest.approx(want_correct, rel=1e-12)
    assert supervised_tokens(weighted) == (pytest.approx(want_count, rel=1e-12), int(base_count))
    assert supervised_tokens(plain) == (float(base_count), int(base_count))
    # all weights 1: the unweighted result
    assert torch.equal(ones[0], base_sum), (ones[0].item(), base_sum.item())
    assert ones[1].item() == base_count.item() and ones[2].item() == base_correct.item()


def test_a_state_weighted_one_over_k_is_cross_entropy_to_the_uniform_answer(all_optimal_data, tiny):
    """k samples of one state at weight 1/k: the loss is -(1/k) Σ_j log p(answer_j | state), each
    sequence's log-probability computed separately from the model's logits."""
    model, collate = tiny
    dataset = SFTDataset(all_optimal_data)
    group = max(_states(dataset.rows).values(), key=len)
    k = len(group)
    assert k > 1
    samples = [dataset[i] for i in group]
    answers = [s["messages"][-1]["content"][0]["text"] for s in samples]
    assert len(set(answers)) == k and all(s["weight"] == 1.0 / k for s in samples)
    batch = collate(samples)
    assert torch.allclose(batch["sample_weight"], torch.full((k,), 1.0 / k))
    with torch.no_grad():
        loss_sum, count, _ = token_loss(model, batch)
        log_p = []  # log p(answer_j's assistant tokens | state), one sequence at a time, no padding
        for s in samples:
            one = collate([{k_: v for k_, v in s.items() if k_ != "weight"}])
            logp = torch.log_softmax(model(**{k_: v for k_, v in one.items() if k_ != "labels"},
                                           use_cache=False).logits[0, :-1].double(), dim=-1)
            targets = one["labels"][0, 1:]
            log_p.append(sum(logp[t, int(targets[t])].item() for t in range(len(targets))
                             if targets[t] != IGNORE_INDEX))
    uniform_ce = -sum(log_p) / k  # H(uniform over the k answers, p_model)
    assert loss_sum.item() == pytest.approx(uniform_ce, rel=1e-4)
    tokens = [int((collate([s])["labels"][0, 1:] != IGNORE_INDEX).sum()) for s in samples]
    assert count.item() == pytest.approx(sum(tokens) / k, rel=1e-12)


def test_tensor_engine_gives_the_collators_sample_weights(all_optimal_data, tiny_builtin):
    processor = load_processor(tiny_builtin)
    folder = compile_dataset(all_optimal_data, processor, "qwen2_5_vl")
    batcher = TensorBatcher(folder, processor.tokenizer.pad_token_id)
    dataset = SFTDataset(all_optimal_data)
    collate = Collator(processor, "qwen2_5_vl", None)
    for indices in ([0, 1, 2], [len(dataset) - 1, 0], [1]):
        want, got = collate([dataset[i] for i in indices]), batcher.batch(indices)
        assert set(got) == set(want) | {"position_ids"} and "sample_weight" in got
        assert got["sample_weight"].dtype == want["sample_weight"].dtype == torch.float32
        assert torch.equal(got["sample_weight"], want["sample_weight"])
        for key in set(want) - {"pixel_values"}:
            assert torch.equal(got[key], want[key].to(got[key].dtype)), key


def test_unweighted_data_has_no_sample_weight_on_either_engine(tvr_ao_data, tiny_builtin):
    processor = load_processor(tiny_builtin)
    folder = compile_dataset(tvr_ao_data, processor, "qwen2_5_vl")
    assert not (folder / "weights.npy").exists()
    assert "sample_weight" not in TensorBatcher(folder, processor.tokenizer.pad_token_id).batch([0, 1])
    assert "sample_weight" not in Collator(processor, "qwen2_5_vl", None)([SFTDataset(tvr_ao_data)[0]])


@pytest.mark.parametrize("bad", [0, -0.5, "0.5", None, True, float("nan"), float("inf")])
def test_a_bad_weight_is_refused_naming_file_line_and_field(tmp_path, all_optimal_data, tiny_builtin, bad):
    copy = tmp_path / "copy"
    shutil.copytree(all_optimal_data, copy, ignore=shutil.ignore_patterns("tensors-*"))
    rows = _rows(copy)
    rows[1]["weight"] = bad
    (copy / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match=r"samples\.jsonl:2: field 'weight'"):
        SFTDataset(copy)
    with pytest.raises(DataError, match=r"samples\.jsonl:2: field 'weight'"):
        compile_dataset(copy, load_processor(tiny_builtin), "qwen2_5_vl")


def _subset(src, out, rows):
    shutil.copytree(src, out, ignore=shutil.ignore_patterns("tensors-*"))
    (out / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return out


@pytest.mark.parametrize("engine", ["collator", "tensor"])
def test_rows_twice_at_half_weight_train_like_the_rows_once(tmp_path, tvr_ao_data, tiny_builtin, engine):
    """The loop normalises by the weighted token count: every row twice at weight 0.5 (one update over all
    of them) gives the same loss, gradient norm and weights as every row once, unweighted."""
    from .test_sft_train import make_cfg, weights

    rows = _rows(tvr_ao_data)[:4]
    once = _subset(tvr_ao_data, tmp_path / "once", rows)
    twice = _subset(tvr_ao_data, tmp_path / "twice", [{**r, "id": f"{r['id']}/{c}", "weight": 0.5}
                                                       for r in rows for c in "ab"])
    train_a = make_cfg(tmp_path / "a", once, tiny_builtin, max_steps=1, per_device_batch_size=4)
    train_b = make_cfg(tmp_path / "b", twice, tiny_builtin, max_steps=1, per_device_batch_size=4, grad_accum=2,
                       **{"data.engine": engine})
    from spatialrl.train.sft import train

    a, b = train(train_a)["train"], train(train_b)["train"]
    assert b["train/loss"] == pytest.approx(a["train/loss"], rel=1e-5)
    assert b["train/grad_norm"] == pytest.approx(a["train/grad_norm"], rel=1e-4)
    assert b["train/token_accuracy"] == pytest.approx(a["train/token_accuracy"], rel=1e-9)
    wa, wb = weights(tmp_path / "a" / "final"), weights(tmp_path / "b" / "final")
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5
