"""model.compile: regional torch.compile (train/common.py ``compile_blocks``) trains the same numbers.

The compiled blocks must give the eager model's loss and gradients on real batches of two widths (the
second shape is where dynamo recompiles for dynamic shapes), and leave parameter names alone (checkpoints,
``save_hf_model`` and the optimizer's parameter names read them)."""

from __future__ import annotations

import copy

import pytest
import torch

from spatialrl.models.family import model_family
from spatialrl.models.processor import load_processor
from spatialrl.train.common import compile_blocks
from spatialrl.train.sft import token_loss
from spatialrl.train.tensor_data import TensorBatcher, compile_dataset


def _loss_and_grads(model, batch):
    model.zero_grad(set_to_none=True)
    loss_sum, count, _ = token_loss(model, batch)
    loss = loss_sum / count
    loss.backward()
    return float(loss), {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_compiled_blocks_train_like_the_eager_model(tvr_ao_data, tiny_builtin, lora):
    """With LoRA (the RL trainers' fast rows, ``rl_speed.py --compile on``) the blocks hold peft's wrapped
    projections, compiled with them; only the adapters get gradients."""
    from transformers import AutoModelForImageTextToText

    torch._dynamo.reset()
    processor = load_processor(tiny_builtin)
    eager = AutoModelForImageTextToText.from_pretrained(tiny_builtin)
    model_family(eager).prepare_model(eager)
    blocks = len(eager.model.language_model.layers) + len(eager.model.visual.blocks)
    if lora:
        from peft import LoraConfig, get_peft_model

        torch.manual_seed(0)
        eager = get_peft_model(eager, LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0,
                                                 target_modules=["q_proj", "v_proj", "down_proj"]))
        for name, p in eager.named_parameters():  # B starts at zero: make the adapters' output count
            if "lora_B" in name:
                torch.nn.init.normal_(p, std=0.02)
    eager.train()
    compiled = copy.deepcopy(eager)
    names = [n for n, _ in compiled.named_parameters()]
    n = compile_blocks(compiled)
    assert n == blocks
    assert [n for n, _ in compiled.named_parameters()] == names  # in place: no _orig_mod in any name
    assert compiled.state_dict().keys() == eager.state_dict().keys()
    batcher = TensorBatcher(compile_dataset(tvr_ao_data, processor, "qwen2_5_vl"), processor.tokenizer.pad_token_id)
    widths = set()
    for indices in ([0, 1, 2, 3], [4, 5]):
        batch = batcher.batch(indices)
        widths.add(batch["input_ids"].shape[1])
        want_loss, want = _loss_and_grads(eager, batch)
        got_loss, got = _loss_and_grads(compiled, batch)
        assert got_loss == pytest.approx(want_loss, rel=1e-4)
        assert got.keys() == want.keys()
        assert not lora or all("lora_" in key for key in want)
        for key in want:
            torch.testing.assert_close(got[key], want[key], atol=1e-4, rtol=1e-3, msg=key)
    assert len(widths) == 2, widths  # two shapes: the recompile for dynamic shapes is exercised


def _answer_logprobs(model, batch):
    logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits.float()
    mask = batch["labels"][:, 1:] != -100
    logp = torch.log_softmax(logits[:, :-1], dim=-1).gather(-1, batch["input_ids"][:, 1:, None])[..., 0]
    return logp[mask]


@pytest.mark.slow
@pytest.mark.parametrize(("scoring", "dynamic", "agree", "one_graph"),
                         [("no_grad", True, False, False), ("grad-eval", False, False, False),
                          ("grad-eval", True, True, False), ("trainers", True, True, True)],
                         ids=["inference-graph", "static-first-shape", "eval-mode-graph", "trainers"])
def test_compiled_bf16_scoring_and_training_passes_agree(tvr_ao_data, tiny_builtin, scoring, dynamic, agree,
                                                         one_graph):
    """PPO's ratio at lr 0 is exp(training-pass log-prob − scoring-pass log-prob): two forwards of one
    model. As in the trainers, every micro-batch is scored (the model in eval mode after its rollout) before
    any is trained (train mode, in another order: PPO shuffles), here at two sequence widths. Compiled, the
    two passes agree bit for bit only if they run the same kernels. ``inference-graph``: scored without
    grad, a different graph (inference, not joint), fused and rounded differently in bf16. ``static-first-
    shape``: the joint graph, compiled by default: each mode's first width gets a static graph and later
    widths a dynamic one, and the passes' first widths differ, so a batch can be scored by static kernels
    and trained by dynamic ones (PPO on the CPU: approx. KL 3e-4). ``eval-mode-graph``: agrees on the CPU,
    but eval and train mode are two compiled graphs (dynamo guards on ``self.training``), and on a GPU
    inductor times each graph's reduction configs on its own (the 8.3B on an H100: approx. KL 1.65 per
    sequence; docs/rl.md). ``trainers``: ``scoring_mode`` (enable_grad, train mode) and
    ``compile_blocks(dynamic=True)`` (``prepare_trainable(ratio_exact=True)``): the training pass compiles
    nothing and runs the scoring pass's graph."""
    from torch._dynamo.utils import counters
    from transformers import AutoModelForImageTextToText

    from spatialrl.train.common import scoring_mode

    torch._dynamo.reset()
    try:
        processor = load_processor(tiny_builtin)
        model = AutoModelForImageTextToText.from_pretrained(tiny_builtin, dtype=torch.bfloat16)
        model_family(model).prepare_model(model)
        assert isinstance(scoring_mode(model), torch.no_grad)  # eager: no graph to match
        compile_blocks(model, **({"dynamic": True} if dynamic else {}))
        batcher = TensorBatcher(compile_dataset(tvr_ao_data, processor, "qwen2_5_vl"),
                                processor.tokenizer.pad_token_id)
        batches = [batcher.batch(indices) for indices in ([0, 1, 2, 3], [4, 5])]
        assert batches[0]["input_ids"].shape[1] != batches[1]["input_ids"].shape[1]
        model.eval()
        contexts = {"no_grad": torch.no_grad, "grad-eval": torch.enable_grad, "trainers": lambda: scoring_mode(model)}
        scored = []
        for batch in batches:
            with contexts[scoring]():
                scored.append(_answer_logprobs(model, batch).detach())
        assert not model.training  # scoring_mode gives the model back in the mode it found it
        graphs = counters["stats"]["unique_graphs"]
        model.train()
        same = []
        for batch, old in reversed(list(zip(batches, scored, strict=True))):
            trained = _answer_logprobs(model, batch)
            trained.sum().backward()  # the training graph: activations saved for a backward
            same.append(torch.equal(trained.detach(), old))
        assert all(same) if agree else not all(same), same
        assert (counters["stats"]["unique_graphs"] == graphs) == one_graph
    finally:
        torch._dynamo.reset()
