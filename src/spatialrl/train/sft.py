"""Supervised fine-tuning on expert conversations, readable top to bottom (CleanRL style).

    spatialrl train sft configs/sft/tiny_cpu.yaml                       # one process
    accelerate launch --config_file configs/accelerate/zero2.yaml \\
        -m spatialrl.cli train sft configs/sft/tvr_va_small.yaml         # DeepSpeed ZeRO-2, N GPUs

What one optimiser update does:

1. take ``grad_accum`` micro-batches of ``per_device_batch_size`` samples on every process (a fixed
   permutation per epoch, so the data position follows from the update count alone);
2. tokenise them with :func:`spatialrl.train.chat_tokens.encode_conversations` — labels are the
   assistant tokens only (content + end-of-turn), everything else is -100;
3. loss = Σ token cross-entropy / (assistant tokens in the *whole* update, all processes): every
   supervised token weighs the same whether it sits in a short V-IRL answer or a 30-turn TVR chat
   (a per-micro-batch mean would over-weight short samples). The ``× processes × grad_accum`` factor
   undoes the averaging that DDP/DeepSpeed and ``accelerator.backward`` apply;
4. clip, step AdamW and the warmup + cosine schedule; log; maybe score held-out data, run closed-loop
   evaluation through the eval runner with an ``HFPolicy`` on the in-training model, and checkpoint.

Reference settings (``spec/training.md``): V-IRL-VL lr 5e-7 × 5 epochs (Llama-3.2-11B); TVR VA-SFT lr
1e-5 cosine, warmup 0.1, 5 epochs, bf16, ZeRO-2, frozen vision tower (Qwen3.5-9B).
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from spatialrl.errors import DataError
from spatialrl.io import atomic_write_json
from spatialrl.models.builtin import eval_settings_from_dataset
from spatialrl.train.chat_tokens import IGNORE_INDEX, encode_conversations
from spatialrl.train.common import (
    Tracker,
    count_parameters,
    epoch_order,
    find_resume_checkpoint,
    is_fsdp,
    load_checkpoint,
    load_model_and_processor,
    lr_multiplier,
    make_accelerator,
    prepare_trainable,
    save_checkpoint,
    save_hf_model,
    seed_everything,
)
from spatialrl.train.config import SFTConfig, config_to_dict
from spatialrl.train.data import SFTDataset


# ------------------------------------------------------------------------------------------ pieces
class Collator:
    """Samples → model inputs with assistant-only labels (runs in DataLoader workers)."""

    def __init__(self, processor: Any, model_type: str, max_length: int | None):
        self.processor, self.model_type, self.max_length = processor, model_type, max_length

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        return encode_conversations(self.processor, [s["messages"] for s in samples], model_type=self.model_type,
                                    max_length=self.max_length, names=[str(s["id"]) for s in samples])


def token_loss(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Σ cross-entropy, #tokens, #argmax-correct) over the batch's assistant tokens (next-token shift)."""
    labels = batch["labels"]
    inputs = {k: v for k, v in batch.items() if k != "labels"}
    logits = model(**inputs, use_cache=False).logits
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    picked = logits[:, :-1][mask].float()  # (n_tokens, vocab)
    gold = targets[mask]
    loss_sum = F.cross_entropy(picked, gold, reduction="sum")
    correct = (picked.argmax(dim=-1) == gold).sum()
    return loss_sum, mask.sum(), correct


def micro_batches(n_samples: int, seed: int, batch_size: int, world: int, rank: int, start: int, stop: int):
    """Index lists of this process's micro-batches number ``start..stop-1`` (global numbering)."""
    per_micro = batch_size * world
    per_epoch = n_samples // per_micro
    for m in range(start, stop):
        epoch, pos = divmod(m, per_epoch)
        order = epoch_order(n_samples, seed, epoch)
        chunk = order[pos * per_micro:(pos + 1) * per_micro]
        yield chunk[rank * batch_size:(rank + 1) * batch_size]


def micro_batch_source(cfg: SFTConfig, train_set: SFTDataset, processor: Any, model_type: str, collate: Collator,
                       plan: Any, device: Any):
    """Iterator of the planned micro-batches: per-sample collation in DataLoader workers, or (``data.engine:
    tensor``) index gathers on the device from the dataset compiled once (``train/tensor_data.py``)."""
    if cfg.data.engine == "tensor":
        from spatialrl.train.tensor_data import TensorBatcher, compile_dataset

        folder = compile_dataset(cfg.data.train, processor, model_type, workers=cfg.data.num_workers, progress=True)
        batcher = TensorBatcher(folder, processor.tokenizer.pad_token_id, device)
        if len(batcher) != len(train_set):
            raise DataError(f"{folder}: {len(batcher)} compiled samples, the dataset has {len(train_set)}")
        return (batcher.batch(indices) for indices in plan)
    from torch.utils.data import DataLoader

    return iter(DataLoader(train_set, batch_sampler=list(plan), collate_fn=collate, num_workers=cfg.data.num_workers))


def update_plan(cfg: SFTConfig, n_samples: int, world: int) -> tuple[int, int]:
    """(updates per epoch, total updates); the tail that does not fill a whole update is dropped."""
    per_update = cfg.per_device_batch_size * world * cfg.grad_accum
    per_epoch = n_samples // per_update
    if per_epoch == 0:
        raise DataError(f"data.train: {n_samples} samples cannot fill one update of {per_update} "
                        f"(per_device_batch_size × processes × grad_accum); lower them or add data")
    total = cfg.max_steps if cfg.max_steps > 0 else math.ceil(cfg.epochs * per_epoch)
    return per_epoch, total


@torch.no_grad()
def heldout_loss(accelerator: Any, model: Any, dataset: SFTDataset, collate: Collator, limit: int,
                 batch_size: int) -> dict[str, float]:
    """Token-mean loss and accuracy on the first ``limit`` held-out samples, split across processes."""
    model.eval()
    n = min(limit, len(dataset))
    mine = list(range(accelerator.process_index, n, accelerator.num_processes))
    totals = torch.zeros(3, device=accelerator.device, dtype=torch.float64)
    for i in range(0, len(mine), batch_size):
        encoded = collate([dataset[j] for j in mine[i:i + batch_size]])
        batch = {k: v.to(accelerator.device) for k, v in encoded.items()}
        with accelerator.autocast():
            loss_sum, count, correct = token_loss(model, batch)
        totals += torch.stack([loss_sum.double(), count.double(), correct.double()])
    totals = accelerator.reduce(totals, reduction="sum")
    model.train()
    return {"heldout/loss": (totals[0] / totals[1].clamp(min=1)).item(),
            "heldout/token_accuracy": (totals[2] / totals[1].clamp(min=1)).item(), "heldout/tokens": totals[1].item()}


def closed_loop_eval(accelerator: Any, model: Any, processor: Any, cfg: SFTConfig, step: int) -> dict[str, float]:
    """Play held-out episodes with the in-training model through the eval runner (main process only)."""
    metrics: dict[str, float] = {}
    if cfg.eval.task is None:
        return metrics
    if is_fsdp(accelerator):
        raise DataError("eval.task: closed-loop eval during FSDP training is not supported (the model is "
                        "sharded); evaluate saved checkpoints with `spatialrl eval --agent hf:.../hf`")
    if accelerator.is_main_process:
        from spatialrl.agents.base import SamplingParams
        from spatialrl.agents.hf import HFPolicy
        from spatialrl.envs.registry import get_suite
        from spatialrl.eval.runs import open_run_dir
        from spatialrl.rollout.runner import run_episodes

        suite = get_suite(cfg.eval.task)
        options = dict(suite.default_options)
        if cfg.eval.data is not None:
            options["data"] = cfg.eval.data
        if cfg.eval.split is not None:
            options["split"] = cfg.eval.split
        # The suite applies the limit per split (V-IRL, GP) or round-robin over categories (TVR): slicing
        # the joined list would evaluate only the first split of `in-dist,rule-ood,visual-ood`. (Suites
        # list `limit: None` among their defaults, so only an explicit eval.options limit wins.)
        options["limit"] = cfg.eval.episodes
        options.update(cfg.eval.options)
        episodes = suite.episodes(options)
        unwrapped = accelerator.unwrap_model(model)
        was_training = unwrapped.training
        dtype = next(unwrapped.parameters()).dtype  # keep the master weights' dtype (no in-place cast)
        policy = HFPolicy(unwrapped, processor, name=f"sft-step{step}", device=str(accelerator.device), dtype=dtype)
        sampling = SamplingParams(max_new_tokens=cfg.eval.max_new_tokens, seed=cfg.seed)
        out = Path(cfg.output_dir) / "eval" / f"step-{step:06d}"
        open_run_dir(out, {"task": cfg.eval.task, "agent": f"sft:{cfg.output_dir}@{step}", "options": options,
                           "sampling": {"max_new_tokens": cfg.eval.max_new_tokens}, "label": f"sft step {step}"},
                     overwrite=True)
        with accelerator.autocast():
            result = run_episodes(suite, options, policy, episodes, batch_size=cfg.eval.batch_size,
                                  sampling=sampling, out_dir=out, progress=False)
        summary = suite.summarize(result.episodes)
        atomic_write_json(out / "metrics.json", summary)
        unwrapped.train(was_training)
        for category, values in summary.items():
            for name, value in values.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    metrics[f"eval/{category}/{name}"] = float(value)
    accelerator.wait_for_everyone()
    return metrics


def parameter_digest(model: Any) -> str:
    """sha256 of every parameter's bytes in name order: equal digests = bit-identical replicas."""
    import hashlib

    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(p.detach().float().cpu().numpy().tobytes())
    return h.hexdigest()


def check_sync(accelerator: Any, model: Any, step: int) -> list[str]:
    """Digests of all processes' parameters; raises if the replicas have drifted apart."""
    from accelerate.utils import gather_object

    digests = gather_object([parameter_digest(accelerator.unwrap_model(model))])
    if len(set(digests)) != 1:
        raise RuntimeError(f"step {step}: process parameters differ across ranks: {digests}")
    return digests


# ------------------------------------------------------------------------------------------ train
def train(cfg: SFTConfig, stop_after: int | None = None, prebuilt: tuple[Any, Any] | None = None) -> dict[str, Any]:
    """Run SFT; returns the final summary (also written to ``OUTPUT/summary.json``).

    ``stop_after`` ends the run after that many updates *as if it were killed* (no final save) — how
    the tests check that resuming continues bit-exactly. ``prebuilt`` = ``(model, processor)`` built by
    the caller replaces ``cfg.model.path``, as in the RL trainers (the scaling benchmark's random
    11B-sized model, never written to disk).
    """
    # --- setup
    accelerator = make_accelerator(cfg.model.dtype, cfg.grad_accum, cfg.per_device_batch_size,
                                   cfg.optim.max_grad_norm)
    seed_everything(cfg.seed)
    out = Path(cfg.output_dir)
    if accelerator.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_json(out / "config.json", config_to_dict(cfg))
    world, rank = accelerator.num_processes, accelerator.process_index
    t_start = time.perf_counter()

    # --- data
    train_set = SFTDataset(cfg.data.train)
    eval_set = SFTDataset(cfg.data.eval) if cfg.data.eval else None
    per_epoch, total_updates = update_plan(cfg, len(train_set), world)

    # --- model, optimiser, schedule
    if prebuilt is not None:
        (model, processor), model_meta = prebuilt, {"source": "prebuilt"}
    else:
        model, processor, model_meta = load_model_and_processor(cfg.model, cfg.seed)
    model_type = model.config.model_type
    model = prepare_trainable(model, cfg.model)
    trainable, total_params = count_parameters(model)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=cfg.optim.lr, betas=(cfg.optim.beta1, cfg.optim.beta2),
                                  eps=cfg.optim.eps, weight_decay=cfg.optim.weight_decay)
    budget_s = cfg.time_budget_minutes * 60.0

    def set_lr(done: int, elapsed: float) -> float:
        """LR of the next update from the run's progress: updates done / total, or time spent / budget."""
        if budget_s > 0:
            progress, first = elapsed / budget_s, 0.01 * cfg.optim.warmup_ratio
        else:
            progress, first = done / total_updates, 1.0 / total_updates
        lr = cfg.optim.lr * lr_multiplier(progress, cfg.optim.schedule, cfg.optim.warmup_ratio,
                                          cfg.optim.min_lr_ratio, first)
        for group in optimizer.param_groups:
            group["lr"] = lr
        return lr

    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    collate = Collator(processor, model_type, cfg.data.max_length)

    # --- resume
    step, elapsed_before = 0, 0.0
    resume_from = find_resume_checkpoint(cfg.output_dir, cfg.checkpoint.resume)
    if resume_from is not None:
        state = load_checkpoint(accelerator, resume_from)
        for key, now in (("world_size", world), ("per_device_batch_size", cfg.per_device_batch_size),
                         ("grad_accum", cfg.grad_accum), ("train_samples", len(train_set))):
            if state.get(key) != now:
                raise DataError(f"{resume_from}: cannot resume, {key} was {state.get(key)} and is now {now} "
                                "(the data position would not match); use a new output_dir or checkpoint.resume=never")
        step, elapsed_before = int(state["step"]), float(state.get("elapsed_s", 0.0))

    tracker = Tracker(accelerator, out, cfg.logging, cfg)
    if accelerator.is_main_process:
        tracker.log(step, {"setup/train_samples": len(train_set), "setup/updates_total": total_updates,
                           "setup/updates_per_epoch": per_epoch, "setup/params_trainable": trainable,
                           "setup/params_total": total_params, "setup/processes": world,
                           "setup/resumed_from_step": step})

    t_loop = time.perf_counter()

    def train_seconds() -> float:
        """Training time so far, across resumes (what the time budget counts)."""
        return elapsed_before + time.perf_counter() - t_loop

    def synced_seconds() -> float:
        """The main process's training time, identical on every process (LR and the stop decision must
        agree across ranks, or replicas drift / one rank leaves the loop while others wait)."""
        if world == 1:
            return train_seconds()
        from accelerate.utils import broadcast

        return float(broadcast(torch.tensor([train_seconds()], device=accelerator.device, dtype=torch.float64))[0])

    def save(at: int) -> None:
        state = {"step": at, "elapsed_s": synced_seconds(), "world_size": world,
                 "per_device_batch_size": cfg.per_device_batch_size, "grad_accum": cfg.grad_accum, "train_samples": len(train_set), "updates_total": total_updates,
                 "config": config_to_dict(cfg)}
        save_checkpoint(accelerator, model, processor, out, at, state, cfg.checkpoint.keep_last)

    # --- loop: one iteration = one optimiser update of grad_accum micro-batches
    G = cfg.grad_accum
    plan = micro_batches(len(train_set), cfg.seed, cfg.per_device_batch_size, world, rank, step * G, total_updates * G)
    batches = micro_batch_source(cfg, train_set, processor, model_type, collate, plan, accelerator.device)
    window = {"loss": 0.0, "tokens": 0.0, "correct": 0.0, "updates": 0, "t0": time.perf_counter(), "samples": 0}
    last_metrics: dict[str, float] = {}
    stopped_early = False
    while step < total_updates:
        now = synced_seconds() if budget_s > 0 else 0.0
        if budget_s > 0 and now >= budget_s:
            break
        lr = set_lr(step, now)
        group = [{k: v.to(accelerator.device) for k, v in next(batches).items()} for _ in range(G)]
        local = torch.tensor(sum(int((b["labels"][:, 1:] != IGNORE_INDEX).sum()) for b in group),
                             device=accelerator.device, dtype=torch.float64)
        update_tokens = accelerator.reduce(local, reduction="sum").clamp(min=1.0)
        stats = torch.zeros(3, device=accelerator.device, dtype=torch.float64)
        for batch in group:
            with accelerator.accumulate(model):
                with accelerator.autocast():
                    loss_sum, count, correct = token_loss(model, batch)
                loss = loss_sum * (world * G) / update_tokens  # see the module docstring, point 3
                accelerator.backward(loss)
                grad_norm = None
                if accelerator.sync_gradients and cfg.optim.max_grad_norm > 0:
                    grad_norm = accelerator.clip_grad_norm_(params, cfg.optim.max_grad_norm)
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            stats += torch.stack([loss_sum.detach().double(), count.double(), correct.double()])
        step += 1
        stats = accelerator.reduce(stats, reduction="sum")
        window["loss"] += stats[0].item()
        window["tokens"] += stats[1].item()
        window["correct"] += stats[2].item()
        window["updates"] += 1
        window["samples"] += cfg.per_device_batch_size * world * G

        ending = step == total_updates or (budget_s > 0 and synced_seconds() >= budget_s)
        if step % max(1, cfg.logging.every) == 0 or ending:
            dt = time.perf_counter() - window["t0"]
            last_metrics = {
                "train/loss": window["loss"] / max(1.0, window["tokens"]),
                "train/token_accuracy": window["correct"] / max(1.0, window["tokens"]),
                "train/lr": lr,
                "train/epoch": step / per_epoch,
                "train/samples_per_s": window["samples"] / max(dt, 1e-9),
                "train/tokens_per_s": window["tokens"] / max(dt, 1e-9),
            }
            if grad_norm is not None:
                last_metrics["train/grad_norm"] = float(grad_norm)
            tracker.log(step, last_metrics)
            window = {"loss": 0.0, "tokens": 0.0, "correct": 0.0, "updates": 0, "t0": time.perf_counter(),
                      "samples": 0}
        if eval_set is not None and cfg.eval_loss_every > 0 and step % cfg.eval_loss_every == 0:
            tracker.log(step, heldout_loss(accelerator, model, eval_set, collate, cfg.data.eval_samples,
                                           cfg.per_device_batch_size))
        if cfg.eval.task is not None and cfg.eval.every > 0 and step % cfg.eval.every == 0 and not ending:
            tracker.log(step, closed_loop_eval(accelerator, model, processor, cfg, step))
        if cfg.checkpoint.every > 0 and step % cfg.checkpoint.every == 0 and not ending:
            save(step)
        if cfg.check_sync_every > 0 and step % cfg.check_sync_every == 0:
            check_sync(accelerator, model, step)
        if stop_after is not None and step >= stop_after:
            stopped_early = True
            break

    # --- end: checkpoint, final model, held-out scores
    summary: dict[str, Any] = {"step": step, "updates_planned": total_updates, "finished": not stopped_early,
                               "train": last_metrics, "seconds": time.perf_counter() - t_start}
    if not stopped_early:
        save(step)
        final_meta = {**model_meta, "parameters": total_params, "trained_by": "spatialrl train sft",
                      "updates": step, "recipe": config_to_dict(cfg), "dataset": train_set.meta,
                      "eval": eval_settings_from_dataset(train_set.meta.get("task"), train_set.meta.get("options") or {},
                                                         cfg.eval.max_new_tokens)}
        save_hf_model(accelerator, model, processor, out / "final", merge_lora=cfg.model.lora.merge_on_save,
                      dtype=cfg.model.save_dtype, meta=final_meta)
        final: dict[str, float] = {}
        if eval_set is not None:
            final.update(heldout_loss(accelerator, model, eval_set, collate, cfg.data.eval_samples,
                                      cfg.per_device_batch_size))
        final.update(closed_loop_eval(accelerator, model, processor, cfg, step))
        if final:
            tracker.log(step, final)
        summary["final"] = final
        if cfg.check_sync_every > 0:
            summary["parameter_digests"] = check_sync(accelerator, model, step)
        if accelerator.is_main_process:
            atomic_write_json(out / "summary.json", summary)
    tracker.close()
    accelerator.wait_for_everyone()
    return summary
