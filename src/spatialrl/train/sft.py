"""Supervised fine-tuning on expert conversations, readable top to bottom (CleanRL style).

    spatialrl train sft configs/sft/tiny_cpu.yaml                       # one process
    accelerate launch --config_file configs/accelerate/zero2.yaml \\
        -m spatialrl.cli train sft configs/sft/tvr_va_small.yaml         # DeepSpeed ZeRO-2, N GPUs

What one optimiser update does:

1. take ``grad_accum`` micro-batches of ``per_device_batch_size`` samples on every process (a fixed
   permutation per epoch, so the data position follows from the update count alone);
2. tokenise them with :func:`spatialrl.models.encode.encode_conversations` — labels are the
   assistant tokens only (content + end-of-turn), everything else is -100;
3. loss = Σ token cross-entropy / (assistant tokens in the *whole* update, all processes): every
   supervised token weighs the same whether it sits in a short V-IRL answer or a 30-turn TVR chat
   (a per-micro-batch mean would over-weight short samples). The ``× processes × grad_accum`` factor
   undoes the averaging that DDP/DeepSpeed and ``accelerator.backward`` apply. In a weighted dataset
   (rows with ``weight``, e.g. ``--labels all_optimal``: 1/k on each of a state's k samples) sample i's
   cross-entropy sum *and* its token count are scaled by w_i, so a state counts once and its loss is
   the cross-entropy against the uniform distribution over its k answers; an unweighted dataset takes
   the unweighted path unchanged (bit-identical). Logged ``train/loss``, ``train/token_accuracy`` and
   ``heldout/*`` are then weighted means (``heldout/tokens`` a weighted count); ``train/tokens_per_s``
   counts real tokens;
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
from spatialrl.models.builtin import eval_settings_from_dataset
from spatialrl.models.encode import IGNORE_INDEX, encode_conversations
from spatialrl.train.common import epoch_order, prepare_trainable
from spatialrl.train.config import SFTConfig
from spatialrl.train.data import SFTDataset
from spatialrl.train.run import Run


# ------------------------------------------------------------------------------------------ pieces
class Collator:
    """Samples → model inputs with assistant-only labels (runs in DataLoader workers).

    When a sample carries ``weight`` (a weighted dataset, see :mod:`spatialrl.train.data`) the batch also
    has ``sample_weight``, float32 of shape [batch] (1.0 for a sample without one); else no such key.
    """

    def __init__(self, processor: Any, model_type: str, max_length: int | None):
        self.processor, self.model_type, self.max_length = processor, model_type, max_length

    def __call__(self, samples: list[dict[str, Any]]) -> dict[str, torch.Tensor]:
        batch = encode_conversations(self.processor, [s["messages"] for s in samples], model_type=self.model_type,
                                     max_length=self.max_length, names=[str(s["id"]) for s in samples])
        if any("weight" in s for s in samples):
            batch["sample_weight"] = torch.tensor([float(s.get("weight", 1.0)) for s in samples], dtype=torch.float32)
        return batch


def supervised_tokens(batch: dict[str, torch.Tensor]) -> tuple[float, int]:
    """(weighted, real) number of assistant tokens the loss sees in ``batch`` (next-token shift): the
    weighted count is Σ_i w_i·tokens_i with ``sample_weight``, else the real count."""
    per_sample = (batch["labels"][:, 1:] != IGNORE_INDEX).sum(dim=1)
    real = int(per_sample.sum())
    weight = batch.get("sample_weight")
    if weight is None:
        return float(real), real
    return float((per_sample.double() * weight.double()).sum()), real


def token_loss(model: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(Σ cross-entropy, #tokens, #argmax-correct) over the batch's assistant tokens (next-token shift).

    With ``sample_weight`` (w_i, never passed to the model) all three are weighted: Σ_i w_i Σ_tokens CE,
    Σ_i w_i·tokens_i (float64, as :func:`supervised_tokens`) and Σ_i w_i·correct_i.
    """
    labels = batch["labels"]
    weight = batch.get("sample_weight")
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "sample_weight")}
    logits = model(**inputs, use_cache=False).logits
    targets = labels[:, 1:]
    mask = targets != IGNORE_INDEX
    picked = logits[:, :-1][mask].float()  # (n_tokens, vocab)
    gold = targets[mask]
    if weight is None:
        loss_sum = F.cross_entropy(picked, gold, reduction="sum")
        correct = (picked.argmax(dim=-1) == gold).sum()
        return loss_sum, mask.sum(), correct
    per_token = weight.float()[:, None].expand_as(mask)[mask]  # w_i of each supervised token
    # cross_entropy is log_softmax then nll_loss; summing w·log p(gold) through nll_loss's own reduction
    # keeps all-ones weights bit-identical to the unweighted sum (``(ce * w).sum()`` adds in another order)
    gold_logp = F.log_softmax(picked, dim=-1).gather(1, gold[:, None])  # (n_tokens, 1)
    loss_sum = F.nll_loss(gold_logp * per_token[:, None], torch.zeros_like(gold), reduction="sum")
    correct = ((picked.argmax(dim=-1) == gold).float() * per_token).sum()
    count = (mask.sum(dim=1).double() * weight.double()).sum()
    return loss_sum, count, correct


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
        batcher = TensorBatcher(folder, processor.tokenizer.pad_token_id, device, cfg.data.images_on_device)
        if len(batcher) != len(train_set):
            raise DataError(f"{folder}: {len(batcher)} compiled samples, the dataset has {len(train_set)}")
        return (batcher.batch(indices) for indices in plan)
    from torch.utils.data import DataLoader

    return iter(DataLoader(train_set, batch_sampler=list(plan), collate_fn=collate, num_workers=cfg.data.num_workers,
                           worker_init_fn=ignore_sigterm))


def ignore_sigterm(worker_id: int) -> None:
    """DataLoader workers leave SIGTERM to the trainer. ``timeout`` and Slurm signal the whole process group;
    a worker that died of it made the next batch raise ("DataLoader worker ... killed by signal: Terminated")
    before the trainer could pause with its checkpoint (``train/run.py``). The workers still end with the
    loader (its shutdown event) or with the trainer (their parent watchdog)."""
    import signal

    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def update_plan(cfg: SFTConfig, n_samples: int, world: int) -> tuple[int, int]:
    """(updates per epoch, total updates); the tail that does not fill a whole update is dropped."""
    per_update = cfg.per_device_batch_size * world * cfg.grad_accum
    per_epoch = n_samples // per_update
    if per_epoch == 0:
        raise DataError(f"data.train: {n_samples} samples cannot fill one update of {per_update} "
                        f"(per_device_batch_size × processes × grad_accum); lower them or add data")
    total = cfg.max_steps if cfg.max_steps > 0 else math.ceil(cfg.epochs * per_epoch)
    return per_epoch, total


def swap_images(samples: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(originals, swapped)``: each sample with images, and a copy whose k-th image is the k-th of the
    next sample with images (cyclically; a donor with fewer images is cycled through). The text stays, so
    a model that uses its images scores the copies worse (``heldout/image_swap_gap``), a blind one the
    same. A TVR action-only sample gets another state's current and target frames, a visual-action
    trajectory another trajectory's frames. Fewer than two samples with images: nothing to swap."""
    def images(sample: dict[str, Any]) -> list[Any]:
        return [p["image"] for m in sample["messages"] for p in m["content"] if p["type"] == "image"]

    with_images = [s for s in samples if images(s)]
    if len(with_images) < 2:
        return [], []
    swapped = []
    for a, b in zip(with_images, with_images[1:] + with_images[:1]):
        donor, k = images(b), iter(range(1 << 30))
        swapped.append({**a, "messages": [{**m, "content": [{**p, "image": donor[next(k) % len(donor)]}
                                                            if p["type"] == "image" else p for p in m["content"]]}
                                          for m in a["messages"]]})
    return with_images, swapped


def heldout_batches(accelerator: Any, dataset: SFTDataset, collate: Collator, limit: int,
                    batch_size: int) -> dict[str, list[dict[str, torch.Tensor]]]:
    """This process's share of the first ``limit`` held-out samples, collated once: ``true`` (every
    sample), ``originals`` (those with images, when some have none) and ``swapped`` (:func:`swap_images`),
    as lists of batches on the host. Collating is PNG decoding and the processor on the CPU: on the GPU
    (2026-12-05, 256 samples beside three other arms) it took 45–100 s per evaluation, a third of the
    training time at every 500 updates, against ~1 s for the forward passes — so it is done once."""
    n = min(limit, len(dataset))
    mine = [dataset[j] for j in range(accelerator.process_index, n, accelerator.num_processes)]

    def encode(samples: list[dict[str, Any]]) -> list[dict[str, torch.Tensor]]:
        return [dict(collate(samples[i:i + batch_size])) for i in range(0, len(samples), batch_size)]

    originals, swapped = swap_images(mine)
    out = {"true": encode(mine), "swapped": encode(swapped)}
    # (every process runs the same passes, the reduce being collective; when every sample of every
    # process has images, the originals are the true pass)
    differ = torch.tensor(float(len(originals) != len(mine)), device=accelerator.device)
    if accelerator.reduce(differ, reduction="sum").item() > 0:
        out["originals"] = encode(originals)
    return out


def stored_heldout_batches(accelerator: Any, dataset: SFTDataset, collate: Collator, limit: int, batch_size: int,
                           folder: Path) -> dict[str, list[dict[str, torch.Tensor]]]:
    """:func:`heldout_batches`, kept in the run folder (``heldout-batches-rank<r>.pt``) so a resumed run
    (the next command of a job cut into commands) loads them instead of collating again; they are rebuilt
    when the held-out data, its share or the processor differ from the stored ones."""
    import io

    from spatialrl.io import atomic_write_bytes

    key = {"eval": str(Path(dataset.root).resolve()), "rows": len(dataset), "limit": limit, "batch_size": batch_size,
           "world": accelerator.num_processes, "processor": type(collate.processor).__name__}
    path = Path(folder) / f"heldout-batches-rank{accelerator.process_index}.pt"
    if path.is_file():
        try:
            stored = torch.load(path, weights_only=True)
            if stored.get("key") == key:
                return stored["batches"]
        except Exception as e:  # unreadable (cut write, other torch): collate again
            print(f"{path}: not reused ({type(e).__name__}: {e})", flush=True)
    batches = heldout_batches(accelerator, dataset, collate, limit, batch_size)
    buffer = io.BytesIO()
    torch.save({"key": key, "batches": batches}, buffer)
    atomic_write_bytes(path, buffer.getvalue())
    return batches


@torch.no_grad()
def heldout_loss(accelerator: Any, model: Any, dataset: SFTDataset, collate: Collator, limit: int,
                 batch_size: int, cache: dict[str, Any] | None = None) -> dict[str, float]:
    """Token-mean loss and accuracy on the first ``limit`` held-out samples, split across processes; and
    the image-use check: the loss again with every sample's images swapped for another sample's
    (:func:`swap_images`), reported as ``heldout/image_swap_gap`` = swapped − true on those samples.
    ``cache`` (a dict the caller keeps): the collated batches are kept there and reused by later calls."""
    if cache is None:
        cache = {}
    if "batches" not in cache:
        cache["batches"] = heldout_batches(accelerator, dataset, collate, limit, batch_size)
    batches = cache["batches"]
    model.eval()

    def totals(encoded: list[dict[str, torch.Tensor]]) -> torch.Tensor:
        out = torch.zeros(3, device=accelerator.device, dtype=torch.float64)
        for host in encoded:
            batch = {k: v.to(accelerator.device) for k, v in host.items()}
            with accelerator.autocast():
                loss_sum, count, correct = token_loss(model, batch)
            out += torch.stack([loss_sum.double(), count.double(), correct.double()])
        return accelerator.reduce(out, reduction="sum")

    true = totals(batches["true"])
    paired = torch.stack([totals(batches["originals"]) if "originals" in batches else true,
                          totals(batches["swapped"])])
    model.train()
    out = {"heldout/loss": (true[0] / true[1].clamp(min=1)).item(),
           "heldout/token_accuracy": (true[2] / true[1].clamp(min=1)).item(), "heldout/tokens": true[1].item()}
    if paired[0, 1] > 0:
        losses = paired[:, 0] / paired[:, 1]
        out["heldout/image_swap_gap"] = (losses[1] - losses[0]).item()
    return out


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
    run = Run(cfg, cfg.per_device_batch_size)
    acc, world, G = run.accelerator, run.world, cfg.grad_accum

    # --- data
    train_set = SFTDataset(cfg.data.train)
    eval_set = SFTDataset(cfg.data.eval) if cfg.data.eval else None
    per_epoch, total_updates = update_plan(cfg, len(train_set), world)

    # --- model, optimiser
    model, processor, model_meta = run.load_model(prebuilt)
    model_type = model.config.model_type
    model, optimizer = run.prepare(prepare_trainable(model, cfg.model))
    model.train()
    collate = Collator(processor, model_type, cfg.data.max_length)

    def set_lr(done: int, elapsed: float) -> float:
        """LR of the next update from the run's progress: updates done / total, or time spent / budget."""
        if run.budget_s > 0:
            return run.set_lr(elapsed / run.budget_s, 0.01 * cfg.optim.warmup_ratio)
        return run.set_lr(done / total_updates, 1.0 / total_updates)

    # --- resume (the data position follows from the update count)
    state = run.resume({"per_device_batch_size": cfg.per_device_batch_size, "grad_accum": G,
                        "train_samples": len(train_set)})
    step = int(state["step"]) if state is not None else 0
    # The batch source first: data.engine=tensor compiles the dataset here, before the training clock
    # (and the wall-clock LR schedule) starts.
    plan = micro_batches(len(train_set), cfg.seed, cfg.per_device_batch_size, world, run.rank, step * G, total_updates * G)
    batches = micro_batch_source(cfg, train_set, processor, model_type, collate, plan, acc.device)
    # The held-out samples are collated here too, once per run and kept in the run folder (a resumed run
    # loads them): collated at each evaluation they cost 45-100 s on a loaded host (H100, 2026-12-05), and a
    # SIGTERM that lands in such an evaluation is only handled after it.
    heldout_cache: dict[str, Any] = {}
    if eval_set is not None and cfg.eval_loss_every > 0:
        heldout_cache["batches"] = stored_heldout_batches(acc, eval_set, collate, cfg.data.eval_samples,
                                                          cfg.per_device_batch_size, run.out)
    run.start_tracker(step, {"setup/train_samples": len(train_set), "setup/updates_total": total_updates,
                             "setup/updates_per_epoch": per_epoch, "setup/resumed_from_step": step})

    def save(at: int) -> None:
        run.checkpoint(at, {"step": at, "per_device_batch_size": cfg.per_device_batch_size, "grad_accum": G,
                            "train_samples": len(train_set), "updates_total": total_updates})

    def heldout() -> dict[str, float]:
        if eval_set is None:
            return {}
        return heldout_loss(acc, model, eval_set, collate, cfg.data.eval_samples, cfg.per_device_batch_size,
                            cache=heldout_cache)

    # --- loop: one iteration = one optimiser update of grad_accum micro-batches
    window = new_window()
    last_metrics: dict[str, float] = {}
    grad_norm = None
    while step < total_updates:
        now = run.seconds() if run.budget_s > 0 else 0.0
        if run.budget_s > 0 and now >= run.budget_s:
            break
        lr = set_lr(step, now)
        fetch_t0 = time.perf_counter()
        group = [{k: v.to(acc.device) for k, v in next(batches).items()} for _ in range(G)]
        window["data_wait"] += time.perf_counter() - fetch_t0
        counts = [supervised_tokens(b) for b in group]  # (weighted, real): equal without sample weights
        local = torch.tensor([sum(c[0] for c in counts), sum(c[1] for c in counts)], device=acc.device,
                             dtype=torch.float64)
        update_tokens, real_tokens = acc.reduce(local, reduction="sum").unbind()
        update_tokens = update_tokens.clamp(min=1.0)
        stats = torch.zeros(3, device=acc.device, dtype=torch.float64)
        for i, batch in enumerate(group):
            with run.micro_step(last=i == G - 1):
                with acc.autocast():
                    loss_sum, count, correct = token_loss(model, batch)
                acc.backward(loss_sum * world / update_tokens)  # see the module docstring, point 3
                if i == G - 1:
                    grad_norm = run.optimizer_step()
            stats += torch.stack([loss_sum.detach().double(), count.double(), correct.double()])
        step += 1
        stats = acc.reduce(stats, reduction="sum").tolist()
        for key, value in zip(("loss", "tokens", "correct"), stats, strict=True):
            window[key] += value
        window["real_tokens"] += real_tokens.item()
        window["samples"] += cfg.per_device_batch_size * world * G

        ending = run.is_last(step, total_updates)
        if step % max(1, cfg.logging.every) == 0 or ending:
            last_metrics = window_metrics(window, lr, step / per_epoch, grad_norm)
            if run.skipped_updates:  # non-finite gradients (Run.optimizer_step): cumulative count
                last_metrics["train/skipped_updates"] = run.skipped_updates
            run.log(step, last_metrics)
            window = new_window()
        if eval_set is not None and cfg.eval_loss_every > 0 and step % cfg.eval_loss_every == 0 \
                and not run.sigterm_received():  # paused now: the checkpoint first, the curve point can wait
            run.log(step, heldout())
        if cfg.check_sync_every > 0 and step % cfg.check_sync_every == 0:
            check_sync(acc, model, step)
        if run.after_update(step, ending, save, stop_after):
            break

    # --- end: checkpoint, final model, held-out scores
    summary = {"step": step, "updates_planned": total_updates, "finished": not run.stopped_early, "train": last_metrics}
    meta = {**model_meta, "parameters": run.params_total, "trained_by": "spatialrl train sft", "dataset": train_set.meta,
            "eval": eval_settings_from_dataset(train_set.meta.get("task"), train_set.meta.get("options") or {},
                                               cfg.eval.max_new_tokens)}

    def digests(summary: dict[str, Any]) -> None:
        if cfg.check_sync_every > 0:
            summary["parameter_digests"] = check_sync(acc, model, step)

    return run.end(step, summary, save, meta, final_extra=heldout, finish=digests)


def new_window() -> dict[str, float]:
    """Sums over the updates since the last log line (``tokens`` weighted as the loss, ``real_tokens`` not)."""
    return {"loss": 0.0, "tokens": 0.0, "correct": 0.0, "real_tokens": 0.0, "samples": 0, "data_wait": 0.0,
            "t0": time.perf_counter()}


def window_metrics(window: dict[str, float], lr: float, epoch: float, grad_norm: float | None) -> dict[str, float]:
    dt = time.perf_counter() - window["t0"]
    out = {"train/loss": window["loss"] / max(1.0, window["tokens"]),
           "train/token_accuracy": window["correct"] / max(1.0, window["tokens"]),
           "train/lr": lr, "train/epoch": epoch,
           "train/samples_per_s": window["samples"] / max(dt, 1e-9),
           "train/tokens_per_s": window.get("real_tokens", window["tokens"]) / max(dt, 1e-9),
           # the share of the time spent waiting for the next batches (the batch source and the copy to the
           # device): near 1 the input pipeline bounds the run, near 0 the model does (the loop syncs with
           # the device once per update, so the model's time is not hidden in it)
           "train/data_wait_share": window.get("data_wait", 0.0) / max(dt, 1e-9)}
    if grad_norm is not None:
        out["train/grad_norm"] = grad_norm
    return out
