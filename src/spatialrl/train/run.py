"""One training run's context, shared by SFT, PPO and GRPO: the accelerator, seeding, the output folder,
the model and its optimiser, the LR schedule, gradient accumulation, the tracker, checkpoint and resume,
the time budget, the bookkeeping after each update and the end of the run.

A trainer reads top to bottom with it::

    run = Run(cfg, micro_batch_size=cfg.micro_batch_size, rl=True)
    model, processor, meta = run.load_model(prebuilt)
    model, optimizer = run.prepare(prepare_trainable(model, cfg.model))
    state = run.resume({"num_envs": cfg.num_envs})          # None, or the checkpoint's trainer state
    run.start_tracker(update, {...setup metrics...})
    while update < cfg.updates and not run.out_of_time():
        lr = run.set_lr(update / period, 1 / period)
        for i, batch in enumerate(micro_batches):
            with run.micro_step(last=i == len(micro_batches) - 1), run.accelerator.autocast():
                run.accelerator.backward(loss_normalised_over_the_whole_step)
                if last: run.optimizer_step()
        update += 1
        run.log(update, metrics)
        if run.after_update(update, run.is_last(update, cfg.updates), save, stop_after):
            break
    return run.end(update, summary, save, meta)

Only public accelerate API is used: every accelerator has ``gradient_accumulation_steps=1`` and the
trainers accumulate with :func:`spatialrl.train.accumulation.micro_step` (``no_sync`` +
``sync_gradients``); seeding is ``accelerate.utils.set_seed``.

The time budget (``time_budget_minutes``) counts training time across resumes (``elapsed_s`` in every
checkpoint), as measured by the main process and broadcast, so every process leaves the loop at the same
update. A run that reaches it ends like a finished run: last checkpoint, final model, final eval.
SIGTERM during the loop (preemption, ``timeout``) pauses the run instead: a checkpoint at the end of the
current update, no final model, ``summary["paused"]``; the same command with ``checkpoint.resume=auto``
continues it, bit-exactly (``tests/train/test_sft_train.py``).
"""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from spatialrl.errors import DataError, SpatialRLError, TrainingError
from spatialrl.io import atomic_write_json
from spatialrl.train.accumulation import micro_step
from spatialrl.train.common import (
    Tracker,
    count_parameters,
    find_resume_checkpoint,
    is_fsdp,
    load_checkpoint,
    load_model_and_processor,
    lr_multiplier,
    make_accelerator,
    save_checkpoint,
    save_hf_model,
    tracker_backends,
)
from spatialrl.train.config import config_to_dict


class Run:
    """The context of one training run (see the module docstring for the order of calls)."""

    def __init__(self, cfg: Any, micro_batch_size: int, rl: bool = False):
        from accelerate.utils import set_seed

        self.cfg = cfg
        self.accelerator = make_accelerator(cfg.model.dtype, micro_batch_size, cfg.optim.max_grad_norm,
                                            log_with=tracker_backends(cfg.logging), project_dir=cfg.output_dir)
        set_seed(cfg.seed)
        # a process-wide switch (the trainers own their process); a no-op without CUDA
        torch.backends.cuda.enable_cudnn_sdp(bool(cfg.model.cudnn_attention))
        self.out = Path(cfg.output_dir)
        if self.accelerator.is_main_process:
            check_closed_loop_eval(cfg)
            self.out.mkdir(parents=True, exist_ok=True)
            atomic_write_json(self.out / "config.json", config_to_dict(cfg))
        self.rl = rl
        if rl:
            refuse_sharded_rollouts(self.accelerator)
        self.world, self.rank = self.accelerator.num_processes, self.accelerator.process_index
        self.device = self.accelerator.device
        self.t_start = time.perf_counter()
        self.model: Any = None
        self.processor: Any = None
        self.optimizer: Any = None
        self.params: list[torch.nn.Parameter] = []
        self.params_trainable = self.params_total = 0
        self.tracker: Tracker | None = None
        self.export_skip: tuple[str, ...] = ()  # state-dict prefixes left out of the HF exports (PPO's value head)
        self.stopped_early = False  # stop_after fired or SIGTERM paused the run: no final export
        self.paused = False  # SIGTERM: a checkpoint was saved at the update it arrived in
        self._sigterm = False
        self._previous_handler: Any = None
        self._elapsed_before = 0.0
        self.skipped_updates = 0  # updates skipped for a non-finite gradient norm (optimizer_step)
        # parameter name → skipped updates whose gradient was non-finite there: where the NaNs start (the
        # TVR action-only arms' skips grew from 2 to 93 in 500 updates on the H100, 2026-12-05)
        self.nonfinite_params: Counter[str] = Counter()
        self.param_names: list[str] = []
        self._skipped_in_row = 0
        self._t_loop = time.perf_counter()
        self.budget_s = float(getattr(cfg, "time_budget_minutes", 0.0)) * 60.0

    # ------------------------------------------------------------------------------------ model, optimiser
    def load_model(self, prebuilt: tuple[Any, Any] | None = None) -> tuple[Any, Any, dict[str, Any]]:
        """``(model, processor, meta)`` from ``cfg.model``, or the caller's ``prebuilt`` pair (the speed
        benchmark's random 11B-sized model, never written to disk)."""
        if prebuilt is not None:
            model, processor, meta = prebuilt[0], prebuilt[1], {"source": "prebuilt"}
        else:
            model, processor, meta = load_model_and_processor(self.cfg.model, self.cfg.seed)
        self.processor = processor
        return model, processor, meta

    def prepare(self, model: Any) -> tuple[Any, Any]:
        """AdamW over the trainable parameters of ``model`` (``make_optimizer``), both prepared by accelerate."""
        self.params_trainable, self.params_total = count_parameters(model)
        if self.rl and self.cfg.disable_dropout:  # PPO and GRPO configs
            disable_dropout(model)
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        self.param_names, self.params = [n for n, _ in named], [p for _, p in named]
        optimizer = make_optimizer(self.accelerator, self.params, self.cfg)
        self.model, self.optimizer = self.accelerator.prepare(model, optimizer)
        return self.model, self.optimizer

    def set_lr(self, progress: float, first: float) -> float:
        """Set and return the LR at ``progress`` ∈ [0, 1] of the run; ``first`` is the progress one update
        makes (``common.lr_multiplier``). A function of the progress alone: nothing to checkpoint."""
        o = self.cfg.optim
        lr = o.lr * lr_multiplier(progress, o.schedule, o.warmup_ratio, o.min_lr_ratio, first)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        return lr

    def micro_step(self, last: bool) -> Any:
        """Context of one forward/backward of an optimiser step (``accumulation.micro_step``)."""
        return micro_step(self.accelerator, self.model, last)

    def optimizer_step(self) -> float | None:
        """Clip (``optim.max_grad_norm`` > 0), step and zero the gradients; the gradient norm when known.

        An update whose gradient norm is not finite is skipped (``optim.max_nonfinite_updates`` > 0): one
        NaN step makes every weight NaN for good (a from-scratch VA-SFT run did so at update ~400 on the
        H200, 2026-12-05), while a skipped batch costs one update. ``self.skipped_updates`` counts them;
        that many in a row end the run with an error, since then the weights or the data are broken."""
        optim = self.cfg.optim
        norm = None
        per_tensor = None
        if optim.max_nonfinite_updates > 0:  # before clipping, which spreads one tensor's NaN to all of them
            named = [(n, p.grad) for n, p in zip(self.param_names, self.params, strict=True) if p.grad is not None]
            per_tensor = dict(zip([n for n, _ in named], torch._foreach_norm([g for _, g in named]), strict=True)) \
                if named else {}
        if optim.max_grad_norm > 0 or optim.max_nonfinite_updates > 0:
            # an infinite max_norm only measures (the clip factor is clamped to 1)
            norm = self.accelerator.clip_grad_norm_(
                self.params, optim.max_grad_norm if optim.max_grad_norm > 0 else float("inf"))
        norm = None if norm is None else float(norm)
        if optim.max_nonfinite_updates > 0 and norm is not None and not math.isfinite(norm):
            self._note_nonfinite(per_tensor or {})
            self.optimizer.zero_grad(set_to_none=True)
            self.skipped_updates += 1
            self._skipped_in_row += 1
            if self._skipped_in_row >= optim.max_nonfinite_updates:
                raise TrainingError(
                    f"{self._skipped_in_row} updates in a row had a non-finite gradient norm ({norm}); stopping "
                    f"(optim.max_nonfinite_updates={optim.max_nonfinite_updates}). Lower optim.lr or check the "
                    f"data; the last good checkpoint is under {self.out / 'checkpoints'}")
            return norm
        self._skipped_in_row = 0
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        return norm

    def _note_nonfinite(self, norms: dict[str, torch.Tensor]) -> None:
        """Count the parameters whose gradient norm (taken before clipping) is NaN/inf — one device sync,
        only on a skipped update — and print them on the first skip and every tenth, so a log shows where
        the NaNs come from."""
        finite = torch.stack([torch.isfinite(v) for v in norms.values()]).tolist() if norms else []
        names = [n for n, ok in zip(norms, finite, strict=True) if not ok]
        self.nonfinite_params.update(names)
        if self.skipped_updates % 10 == 0 and self.accelerator.is_main_process:
            shown = ", ".join(names[:6]) + (f" and {len(names) - 6} more" if len(names) > 6 else "")
            print(f"skipped update {self.skipped_updates + 1}: non-finite gradient in {len(names)} of "
                  f"{len(self.params)} tensors: {shown or 'none (the total norm alone overflowed)'}", flush=True)

    # ------------------------------------------------------------------------------------ resume, save
    def resume(self, checks: dict[str, Any]) -> dict[str, Any] | None:
        """Restore the newest checkpoint (``checkpoint.resume``) into the prepared model and optimiser and
        return its trainer state, or None. ``checks`` (and ``world_size``) must equal the saved values."""
        path = find_resume_checkpoint(self.cfg.output_dir, self.cfg.checkpoint.resume)
        if path is None:
            return None
        state = load_checkpoint(self.accelerator, path)
        for key, now in {"world_size": self.world, **checks}.items():
            if state.get(key) != now:
                raise DataError(f"{path}: cannot resume, {key} was {state.get(key)} and is now {now}; "
                                "use a new output_dir or checkpoint.resume=never")
        self._elapsed_before = float(state.get("elapsed_s", 0.0))
        return state

    def checkpoint(self, step: int, state: dict[str, Any]) -> Path:
        """A complete checkpoint ``OUTPUT/checkpoints/step-<step>`` with ``state`` plus world size, time
        spent and config in its trainer state (``common.save_checkpoint``); a collective call."""
        state = {**state, "world_size": self.world, "elapsed_s": self.seconds(), "config": config_to_dict(self.cfg)}
        return save_checkpoint(self.accelerator, self.model, self.processor, self.out, step, state,
                               self.cfg.checkpoint.keep_last, skip=self.export_skip)

    # ------------------------------------------------------------------------------------ time
    def seconds(self) -> float:
        """The main process's training time across resumes, the same on every process (a collective call
        when several processes run)."""
        mine = self._elapsed_before + time.perf_counter() - self._t_loop
        if self.world == 1:
            return mine
        from accelerate.utils import broadcast

        return float(broadcast(torch.tensor([mine], device=self.device, dtype=torch.float64))[0])

    def out_of_time(self) -> bool:
        """True once the time budget is spent (never without one)."""
        return self.budget_s > 0 and self.seconds() >= self.budget_s

    def is_last(self, step: int, total: int) -> bool:
        """Whether ``step`` ends the run: the planned count is reached or the time budget spent."""
        return step >= total or self.out_of_time()

    # ------------------------------------------------------------------------------------ logging
    def start_tracker(self, step: int, setup: dict[str, float]) -> Tracker:
        """Open the tracker, log ``setup/*`` (with the parameter counts and process count) at ``step`` and
        start the training clock."""
        self.tracker = Tracker(self.accelerator, self.out, self.cfg.logging, self.cfg)
        self.tracker.log(step, {"setup/params_trainable": self.params_trainable, "setup/params_total": self.params_total,
                                "setup/processes": self.world, **setup})
        self._t_loop = time.perf_counter()
        self._catch_sigterm()
        return self.tracker

    # ------------------------------------------------------------------------------------ preemption
    def _catch_sigterm(self) -> None:
        """From the first update on, SIGTERM (Slurm preemption, ``timeout``, ``kill``) ends the run at the
        end of the current update with a checkpoint, so ``checkpoint.resume=auto`` continues it; before
        that (model load, data compile) there is nothing worth saving and SIGTERM stops the process as usual."""
        import signal
        import threading

        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread

        def handler(signum: int, frame: Any) -> None:
            self._sigterm = True

        self._previous_handler = signal.signal(signal.SIGTERM, handler)

    def _release_sigterm(self) -> None:
        import signal

        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None

    def sigterm_received(self) -> bool:
        """Whether any process got SIGTERM (agreed by all processes, so all stop at the same update)."""
        if self.world == 1:
            return self._sigterm
        flag = torch.tensor([1.0 if self._sigterm else 0.0], device=self.device)
        return bool(self.accelerator.reduce(flag, reduction="sum").item() > 0)

    def log(self, step: int, metrics: dict[str, float]) -> None:
        assert self.tracker is not None
        self.tracker.log(step, metrics)

    def phase(self, step: int, text: str) -> None:
        assert self.tracker is not None
        self.tracker.phase(step, text)

    # ------------------------------------------------------------------------------------ update, end
    def after_update(self, step: int, ending: bool, save: Callable[[int], None], stop_after: int | None) -> bool:
        """The bookkeeping after update ``step`` is counted and logged; True means leave the loop.

        In this order: closed-loop eval every ``eval.every`` updates, then a checkpoint every
        ``checkpoint.every`` (neither when ``ending``: ``end`` saves and evaluates that one); ``stop_after``
        stops as if the process were killed, without saving (how the tests check exact resume).
        """
        cfg = self.cfg
        if cfg.eval.task is not None and cfg.eval.every > 0 and step % cfg.eval.every == 0 and not ending:
            self.log(step, self.evaluate(step))
        if cfg.checkpoint.every > 0 and step % cfg.checkpoint.every == 0 and not ending:
            save(step)
        if stop_after is not None and step >= stop_after:
            self.stopped_early = True
            return True
        if not ending and self.sigterm_received():
            if not (cfg.checkpoint.every > 0 and step % cfg.checkpoint.every == 0):
                save(step)
            self.stopped_early = self.paused = True
            if self.accelerator.is_main_process:
                print(f"SIGTERM: paused after update {step}, checkpoint saved in {self.out / 'checkpoints'}; "
                      f"run the same command again (checkpoint.resume=auto) to continue", flush=True)
            return True
        return ending

    def evaluate(self, step: int) -> dict[str, float]:
        return closed_loop_eval(self.accelerator, self.model, self.processor, self.cfg, step)

    def end(self, step: int, summary: dict[str, Any], save: Callable[[int], None], meta: dict[str, Any],
            export_extra: Callable[[Path], None] | None = None,
            final_extra: Callable[[], dict[str, float]] | None = None,
            finish: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
        """The run's summary (``seconds``: the time until the loop ended, final save not counted).

        Unless ``stop_after`` ended the run: a last checkpoint, the model exported to ``OUTPUT/final``
        (``meta`` plus update count and recipe beside it), ``export_extra(OUTPUT/final)`` on the main
        process (PPO: the value head), ``final_extra()`` metrics (SFT: held-out loss) and the final
        closed-loop eval logged as ``final``, ``finish(summary)`` (SFT: replica digests), and
        ``OUTPUT/summary.json``.
        """
        summary = {**summary, "seconds": time.perf_counter() - self.t_start}
        if self.nonfinite_params:  # where skipped updates had NaN/inf gradients (this process's count)
            summary["nonfinite_grad_params"] = dict(self.nonfinite_params.most_common(20))
        assert self.tracker is not None
        if not self.stopped_early:
            save(step)
            save_hf_model(self.accelerator, self.model, self.processor, self.out / "final",
                          merge_lora=self.cfg.model.lora.merge_on_save, dtype=self.cfg.model.save_dtype,
                          meta={**meta, "updates": step, "recipe": config_to_dict(self.cfg)}, skip=self.export_skip)
            if export_extra is not None and self.accelerator.is_main_process:
                export_extra(self.out / "final")
            final = dict(final_extra()) if final_extra is not None else {}
            final.update(self.evaluate(step))
            if final:
                self.log(step, final)
            summary["final"] = final
            if finish is not None:
                finish(summary)
            if self.accelerator.is_main_process:
                atomic_write_json(self.out / "summary.json", summary)
        summary["paused"] = self.paused
        self._release_sigterm()
        self.tracker.close()
        self.accelerator.wait_for_everyone()
        return summary


# ------------------------------------------------------------------------------------------ helpers
def disable_dropout(model: torch.nn.Module) -> int:
    """Every ``nn.Dropout`` of ``model`` to p = 0 (peft's ``lora_dropout`` entries are ``nn.Dropout`` too) and
    every attention module's ``attention_dropout`` rate (transformers' attention applies it functionally in
    train mode), so train mode computes what eval mode does; returns how many were > 0."""
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout) and module.p > 0:
            module.p = 0.0
            changed += 1
        rate = getattr(module, "attention_dropout", None)
        if isinstance(rate, float) and rate > 0:
            module.attention_dropout = 0.0
            changed += 1
    return changed


def make_optimizer(accelerator: Any, params: list[torch.nn.Parameter], cfg: Any) -> torch.optim.Optimizer:
    """AdamW over ``params`` from ``cfg.optim``; in CPU memory when ``cfg.optimizer_offload`` (RL configs)."""
    from accelerate.utils import DistributedType

    o = cfg.optim
    kwargs = dict(lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, weight_decay=o.weight_decay)
    if not getattr(cfg, "optimizer_offload", False):
        return torch.optim.AdamW(params, **kwargs)
    if accelerator.distributed_type == DistributedType.DEEPSPEED:
        raise DataError("optimizer_offload: not with DeepSpeed, which offloads itself "
                        "(use configs/accelerate/zero2_offload_*.yaml and optimizer_offload=false)")
    from spatialrl.train.offload import CPUOffloadAdamW

    return CPUOffloadAdamW(params, master_weights=cfg.offload_master_weights, **kwargs)


def refuse_sharded_rollouts(accelerator: Any) -> None:
    """Stop before training when FSDP shards the policy over several processes.

    Rollouts and scoring run a different number of forward passes on each process (episodes end at
    different turns, answers stop at different lengths, sequence counts differ), and every FSDP forward
    all-gathers the parameters, so the processes would wait on each other forever. DDP and DeepSpeed
    ZeRO-2 keep whole weights on every process (their forwards need no collective); FSDP on one process
    is fine.
    """
    if accelerator.num_processes > 1 and is_fsdp(accelerator):
        raise DataError("accelerate config: FSDP over several processes is not supported by the RL trainers "
                        "(per-process rollouts run unequal numbers of forwards and FSDP's all-gathers would "
                        "deadlock); use configs/accelerate/ddp_*gpu.yaml or zero2_*gpu.yaml")


def eval_options(cfg: Any) -> dict[str, Any]:
    """The task options of the in-training closed-loop eval (``cfg.eval``)."""
    from spatialrl.envs.registry import get_suite

    options = dict(get_suite(cfg.eval.task).default_options)
    if cfg.eval.data is not None:
        options["data"] = cfg.eval.data
    if cfg.eval.split is not None:
        options["split"] = cfg.eval.split
    # The suite applies the limit per split (V-IRL, GP) or round-robin over categories (TVR): slicing
    # the joined list would evaluate only the first split of `in-dist,rule-ood,visual-ood`. (Suites
    # list `limit: None` among their defaults, so only an explicit eval.options limit wins.)
    options["limit"] = cfg.eval.episodes
    options.update(cfg.eval.options)
    return options


def check_closed_loop_eval(cfg: Any) -> None:
    """List the eval's episodes before any training, so a missing or bad ``eval.data`` fails at once with
    the suite's error, not after the run's whole budget (the final eval is the first to need them)."""
    if cfg.eval.task is None:
        return
    from spatialrl.envs.registry import get_suite

    try:
        get_suite(cfg.eval.task).episodes(eval_options(cfg))
    except SpatialRLError as e:
        raise DataError(f"eval (the in-training evaluation: eval.task={cfg.eval.task}, eval.data, eval.split, "
                        f"eval.options): {e} (or --eval.task=null: no evaluation)") from None


def closed_loop_eval(accelerator: Any, model: Any, processor: Any, cfg: Any, step: int) -> dict[str, float]:
    """Play held-out episodes (``cfg.eval``) with the in-training model through the eval runner (main
    process only); ``eval/<category>/<metric>``, the run folder kept under ``OUTPUT/eval/step-N/``."""
    metrics: dict[str, float] = {}
    if cfg.eval.task is None:
        return metrics
    if is_fsdp(accelerator):
        raise DataError("eval.task: closed-loop eval during FSDP training is not supported (the model is "
                        "sharded); evaluate saved checkpoints with `spatialrl eval --agent hf:.../hf`")
    if accelerator.is_main_process:
        from spatialrl.agents.base import SamplingParams
        from spatialrl.agents.hf import HFPolicy
        from spatialrl.eval.evaluate import evaluate

        options = eval_options(cfg)
        unwrapped = accelerator.unwrap_model(model)
        was_training = unwrapped.training
        dtype = next(unwrapped.parameters()).dtype  # keep the master weights' dtype (no in-place cast)
        policy = HFPolicy(unwrapped, processor, name=f"sft-step{step}", device=str(accelerator.device), dtype=dtype)
        sampling = SamplingParams(max_new_tokens=cfg.eval.max_new_tokens, seed=cfg.seed)
        out = Path(cfg.output_dir) / "eval" / f"step-{step:06d}"
        with accelerator.autocast():  # the eval command's own function: run folder, runner, metrics.json
            _, summary = evaluate(cfg.eval.task, f"sft:{cfg.output_dir}@{step}", options, out, policy=policy,
                                  batch_size=cfg.eval.batch_size, sampling=sampling, label=f"sft step {step}",
                                  overwrite=True, progress=False)
        unwrapped.train(was_training)
        for category, values in summary.items():
            for name, value in values.items():
                if isinstance(value, int | float) and not isinstance(value, bool):
                    metrics[f"eval/{category}/{name}"] = float(value)
    accelerator.wait_for_everyone()
    return metrics
