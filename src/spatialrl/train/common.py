"""Plumbing every trainer shares: accelerate setup, seeding, model loading, checkpoints, logging.

Checkpoints (``OUTPUT/checkpoints/step-000120/``) hold everything needed to continue bit-exactly:
model, optimizer and every process's RNG states (through ``accelerate``'s
``save_state``, which also knows how to gather/shard DeepSpeed ZeRO and FSDP states), plus
``trainer_state.json`` (update count, data position, config) and ``hf/`` (model + processor in the
Hugging Face layout, loadable by ``spatialrl eval --agent hf:...``). A checkpoint is written under a
temporary name and renamed once complete; ``trainer_state.json`` is its last file, so a folder without
it is never resumed from. (The reference SFT/RL code saved neither optimizer nor value head and could
not resume — its ``save_every`` bug lost 15-hour runs.)

Logging goes to the console, ``OUTPUT/metrics.jsonl`` (always) and TensorBoard or W&B when installed
and asked for — never required.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import torch

from spatialrl.errors import ConfigError, DataError
from spatialrl.io import JsonlAppender, atomic_write_json
from spatialrl.train.config import LoggingConfig, ModelConfig, config_to_dict

CHECKPOINT_DIR = "checkpoints"
STATE_FILE = "trainer_state.json"
_STEP_RE = re.compile(r"^step-(\d+)$")


# ------------------------------------------------------------------------------------------- data order
def epoch_order(n: int, seed: int, epoch: int) -> list[int]:
    """The sample order of one epoch: a permutation fixed by (seed, epoch), independent of RNG state,
    so a resumed run finds its place from the update count alone."""
    return np.random.default_rng([seed, epoch]).permutation(n).tolist()


# ------------------------------------------------------------------------------------------ accelerate
def make_accelerator(dtype: str, micro_batch_size: int, max_grad_norm: float, log_with: list[str] | None = None,
                     project_dir: str | Path | None = None) -> Any:
    """An ``Accelerator`` for this launch (single process, DDP, DeepSpeed or FSDP come from ``accelerate
    launch``'s config). ``dtype='auto'`` means bf16 mixed precision on GPU and float32 on CPU.
    ``gradient_accumulation_steps`` stays 1: the trainers accumulate themselves (``train/accumulation.py``)
    over a number of micro-batches that may change from one optimiser step to the next. ``log_with`` /
    ``project_dir``: accelerate's experiment trackers (``tracker_backends``; the ``Tracker`` drives them)."""
    from accelerate import Accelerator

    use_bf16 = dtype == "bfloat16" or (dtype == "auto" and torch.cuda.is_available())
    # cpu=True on machines without CUDA: a torchrun-style launch (`accelerate launch --multi_gpu
    # --num_processes 2`, or configs/accelerate/cpu_2proc.yaml) then becomes gloo DDP over CPU
    # processes instead of N independent single-process runs.
    accelerator = Accelerator(mixed_precision="bf16" if use_bf16 else "no", gradient_accumulation_steps=1,
                              cpu=not torch.cuda.is_available(), log_with=log_with or None,
                              project_dir=None if project_dir is None else str(project_dir))
    plugin = accelerator.state.deepspeed_plugin
    if plugin is not None:
        # We feed our own per-rank batches (no prepared DataLoader), so DeepSpeed cannot infer these.
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = micro_batch_size
        plugin.deepspeed_config["gradient_clipping"] = max_grad_norm if max_grad_norm > 0 else 0.0
    return accelerator


def reset_accelerate_state() -> None:
    """Forget accelerate's process-wide state, so the next ``make_accelerator`` in this process starts fresh.

    ``AcceleratorState`` and ``GradientState`` are singletons shared by every ``Accelerator`` of a
    process: a second one would keep the first one's settings (and refuse another mixed precision with
    "AcceleratorState has already been initialized") and its gradient-accumulation state. A launched run
    builds one ``Accelerator``; only a process that trains several times in a row with different
    accelerator settings (tests, benchmarks comparing dtypes) needs this, after each run. No trainer calls
    it. accelerate has no public reset (its own test suite calls the same private methods), so its private
    ``_reset_state`` is called from here alone; ``tests/train/test_accelerate_reset.py`` fails the day
    accelerate renames it or a second ``Accelerator`` starts honouring new settings on its own.
    """
    import accelerate
    from accelerate.state import AcceleratorState, GradientState

    for state in (AcceleratorState, GradientState):
        if not callable(getattr(state, "_reset_state", None)):
            raise RuntimeError(f"accelerate {accelerate.__version__}: {state.__name__}._reset_state is gone; "
                               "update spatialrl.train.common.reset_accelerate_state (docs/architecture.md, "
                               "'Library internals')")
    AcceleratorState._reset_state(reset_partial_state=True)
    GradientState._reset_state()


def is_fsdp(accelerator: Any) -> bool:
    return getattr(accelerator.state, "fsdp_plugin", None) is not None


# ------------------------------------------------------------------------------------------ model
def resolve_model_source(path: str) -> tuple[str, str]:
    """``('preset', name)``, ``('folder', path)`` for a model spec (``preset:``, ``builtin:``, a folder)."""
    if path.startswith("preset:"):
        return "preset", path.split(":", 1)[1]
    if path.startswith("builtin:"):
        from spatialrl.models.builtin import resolve_builtin

        resolved = resolve_builtin(path.split(":", 1)[1])
        return ("folder", str(resolved)) if isinstance(resolved, Path) else ("preset", resolved)
    if path.startswith("hf:"):
        path = path[3:]
    if not Path(path).is_dir():
        raise DataError(f"model.path: {path!r} is neither preset:NAME, builtin:NAME nor an existing model folder")
    return "folder", path


def build_preset(name: str, overrides: dict[str, Any], seed: int) -> tuple[Any, Any, dict[str, Any]]:
    """A fresh built-in model of preset ``name`` with some sizes changed (``model.preset_overrides``)."""
    import dataclasses

    from spatialrl.models import builtin

    if name not in builtin.PRESETS:
        raise DataError(f"model.path: unknown preset {name!r}; known: {', '.join(builtin.PRESETS)}")
    if not overrides:
        return builtin.build_model(name, seed=seed)
    fields = {f.name for f in dataclasses.fields(builtin.Preset)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise DataError(f"model.preset_overrides: unknown field(s) {unknown}; valid: {', '.join(sorted(fields))}")
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in overrides.items()}
    custom = dataclasses.replace(builtin.PRESETS[name], **values)
    model, processor, meta = builtin.build_model(f"{name}+custom", seed=seed, sizes=custom)
    meta.update(preset=name, preset_overrides=dict(overrides))
    return model, processor, meta


def load_model_and_processor(cfg: ModelConfig, seed: int) -> tuple[Any, Any, dict[str, Any]]:
    """The model to train (float32 master weights; autocast does bf16), its processor, and what it was
    built from (preset sizes, or the source folder)."""
    kind, value = resolve_model_source(cfg.path)
    if kind != "preset" and cfg.preset_overrides:
        raise DataError("model.preset_overrides only applies to model.path=preset:NAME")
    meta: dict[str, Any] = {"source": cfg.path}
    if kind == "preset":
        model, processor, built = build_preset(value, cfg.preset_overrides, seed)
        meta.update(built)
    else:
        from transformers import AutoModelForImageTextToText

        from spatialrl.models.processor import load_processor

        kwargs: dict[str, Any] = {"dtype": torch.float32, "local_files_only": True}
        if cfg.attn_implementation:
            kwargs["attn_implementation"] = cfg.attn_implementation
        model = AutoModelForImageTextToText.from_pretrained(value, **kwargs)
        processor = load_processor(value)
    if cfg.attn_implementation and kind == "preset":
        model.set_attn_implementation(cfg.attn_implementation)
    if cfg.max_pixels is not None:
        set_max_pixels(model, processor, cfg.max_pixels)
        meta["max_pixels"] = cfg.max_pixels
    return model, processor, meta


def set_max_pixels(model: Any, processor: Any, max_pixels: int) -> None:
    """``model.max_pixels``: the processor's pixel bound, saved with it (so evaluation sees what training saw)."""
    from spatialrl.models.family import model_family

    if max_pixels < 1:
        raise ConfigError(f"model.max_pixels: must be a positive pixel count, got {max_pixels}")
    family = model_family(model)
    if not family.set_pixel_bounds(processor, None, max_pixels):
        raise ConfigError(f"model.max_pixels: the {family.name} processor does not resize images itself; "
                          "set the image size in the task options instead")


def vision_parameters(model: Any) -> list[tuple[str, torch.nn.Parameter]]:
    """Parameters of the vision tower (and its projector/merger), found by module name across families."""
    from spatialrl.agents.vision_cache import VISION_MODULE_NAMES

    return [(n, p) for n, p in model.named_parameters() if any(f".{k}." in f".{n}" for k in VISION_MODULE_NAMES)]


def prepare_trainable(model: Any, cfg: ModelConfig, ratio_exact: bool = False) -> Any:
    """Apply the family's fixes (``Family.prepare_model``: Mllama's cross-attention row mask, Qwen's
    batched vision attention), freeze-vision, LoRA, gradient checkpointing and ``model.compile``; return the
    model to train. ``ratio_exact`` (PPO, GRPO): compiled blocks are compiled for dynamic shapes from the
    first call, so every sequence length runs one graph's kernels (``scoring_mode``)."""
    from spatialrl.models.family import model_family

    model_family(model).prepare_model(model)
    if cfg.freeze_vision:
        frozen = vision_parameters(model)
        if not frozen:
            raise DataError(f"model.freeze_vision: found no vision tower parameters in {type(model).__name__}")
        for _, p in frozen:
            p.requires_grad_(False)
    if cfg.gradient_checkpointing:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # the newer name (transformers >= 5.2x)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        model.config.use_cache = False
    if cfg.lora.enabled:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(r=cfg.lora.r, lora_alpha=cfg.lora.alpha, lora_dropout=cfg.lora.dropout,
                          target_modules=_language_lora_targets(model, cfg.lora.target_modules))
        model = get_peft_model(model, lora)
        if cfg.gradient_checkpointing:
            model.enable_input_require_grads()
    if cfg.compile:
        compile_blocks(model, **({"dynamic": True} if ratio_exact else {}))
    return model


def compile_blocks(model: Any, **compile_kwargs: Any) -> int:
    """Regional compilation (the PyTorch recipe; accelerate's ``is_repeated_blocks`` finds the blocks): each
    module of every ``ModuleList`` of one class is compiled in place (``Module.compile``: parameter names,
    state dicts and hooks stay as they are), so dynamo traces the block once and reuses the graph for its
    siblings, and the model's own forward — image scatter, rope indices, Python over images — stays eager.
    Within a block, inductor fuses norms, rotary embeddings, activations and residual adds into the matmuls'
    neighbours: for a small model at a large batch those elementwise passes over the activations are most of
    a step's memory traffic. Shapes vary with the longest sample of a batch, so the blocks compile for
    dynamic shapes from the second shape on (dynamo's default). Returns the number of blocks compiled.

    The RL trainers' scoring pass must run the kernels their training pass runs (``scoring_mode``).
    """
    from accelerate.utils.other import is_repeated_blocks

    compiled: list[str] = []  # block names: lists inside a compiled block are part of its graph
    for name, module in list(model.named_modules()):
        if is_repeated_blocks(module) and not any(name.startswith(c + ".") for c in compiled):
            for i, block in enumerate(module):
                block.compile(**compile_kwargs)
                compiled.append(f"{name}.{i}")
    n = len(compiled)
    if not n:
        raise DataError(f"model.compile: {type(model).__name__} has no repeated blocks to compile")
    return n


class _TrainingGraph:
    """``enable_grad`` and train mode for the scoring pass; the model's previous mode after it."""

    def __init__(self, model: Any) -> None:
        self.model, self.grad = model, torch.enable_grad()

    def __enter__(self) -> None:
        self.was_training = self.model.training
        self.grad.__enter__()
        self.model.train()

    def __exit__(self, *exc: Any) -> None:
        self.model.train(self.was_training)
        self.grad.__exit__(*exc)


def scoring_mode(model: Any) -> Any:
    """The context of an RL trainer's scoring pass (the old log-probs of the PPO/GRPO ratio).

    Eager: ``no_grad`` (the model stays in eval mode); the same kernels run with or without autograd, in
    either mode. Compiled blocks: the training pass's own graph, so that at lr 0 the ratio is exactly 1.
    Dynamo compiles one graph per grad mode (an inference graph under ``no_grad``, a joint forward/backward
    one otherwise) and per module mode (it guards on ``self.training``), and inductor fuses and rounds each
    graph its own way in bf16; on a GPU it also autotunes each graph's reduction kernels separately, by
    timing, and the winners round differently. So the scoring pass runs under ``enable_grad`` in train mode
    (dropout is 0 in the families we train; its activations are freed as soon as the log-probs are read).
    The blocks must also be compiled for dynamic shapes from the start (``prepare_trainable(ratio_exact=True)``):
    by default a graph's first shape is static and later shapes dynamic, and the two passes meet different
    first shapes (PPO shuffles), so a sample could be scored by static kernels and trained by dynamic ones.
    Measured (``ppo_precision.py``, bf16, lr 0, approx. KL per sequence): the CPU, small model: 3e-4 with
    the grad mode alone, 0 with dynamic shapes too; the 8.3B Qwen2.5-VL on an H100, scoring in eval mode:
    4.07 with inductor's ``emulate_precision_casts``, 1.65 with the grad mode and dynamic shapes (2026-12-07;
    docs/rl.md). Train mode for scoring is the fix for the last gap, not yet measured on a GPU.
    Called once per update: it walks the model's modules."""
    compiled = any(getattr(m, "_compiled_call_impl", None) is not None for m in model.modules())
    return _TrainingGraph(model) if compiled else torch.no_grad()


def _language_lora_targets(model: Any, suffixes: list[str]) -> list[str]:
    """Full names of the linear layers to adapt: matching suffixes outside the vision tower."""
    vision = {n.rsplit(".", 1)[0] for n, _ in vision_parameters(model)}
    targets = [name for name, module in model.named_modules()
               if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in suffixes
               and not any(name == v or name.startswith(v + ".") for v in vision)
               and not any(v.startswith(name) for v in vision)]
    if not targets:
        raise DataError(f"model.lora.target_modules: none of {suffixes} names a linear layer of the language model")
    return targets


def count_parameters(model: Any) -> tuple[int, int]:
    """(trainable, total) parameter counts."""
    total = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return trainable, total


# ------------------------------------------------------------------------------------------ schedules
def lr_multiplier(progress: float, schedule: str, warmup_ratio: float, min_ratio: float,
                  first: float = 0.0) -> float:
    """Multiplier of the peak LR at ``progress`` ∈ [0, 1] of the run (fraction of updates, or of the time
    budget): linear warmup over the first ``warmup_ratio``, then cosine / linear decay to ``min_ratio``
    or constant. ``first`` is the progress one update makes, so the very first update already learns."""
    import math

    progress = min(max(progress, 0.0), 1.0)
    if warmup_ratio > 0 and progress < warmup_ratio:
        return min(1.0, (progress + first) / warmup_ratio)
    if schedule == "constant":
        return 1.0
    decay_progress = (progress - warmup_ratio) / max(1e-12, 1.0 - warmup_ratio)
    decay = 0.5 * (1.0 + math.cos(math.pi * decay_progress)) if schedule == "cosine" else 1.0 - decay_progress
    return min_ratio + (1.0 - min_ratio) * decay


# ------------------------------------------------------------------------------------------ checkpoints
def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / CHECKPOINT_DIR


def list_checkpoints(output_dir: str | Path) -> list[Path]:
    """Complete checkpoints (with their state file), oldest first."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    found = []
    for d in root.iterdir():
        m = _STEP_RE.match(d.name)
        if m and (d / STATE_FILE).is_file():
            found.append((int(m.group(1)), d))
    return [d for _, d in sorted(found)]


def find_resume_checkpoint(output_dir: str | Path, resume: str) -> Path | None:
    """The checkpoint to continue from: ``auto`` = newest complete one (or None), ``never``, or a folder."""
    if resume == "never":
        return None
    if resume == "auto":
        found = list_checkpoints(output_dir)
        return found[-1] if found else None
    path = Path(resume)
    if not (path / STATE_FILE).is_file():
        raise DataError(f"checkpoint.resume: {path} is not a complete checkpoint (no {STATE_FILE})")
    return path


def _cast_keeping_ties(state: dict[str, Any], dtype: Any) -> dict[str, Any]:
    """``state`` with floating tensors cast to ``dtype``, tensors that shared memory still sharing it: a
    plain per-key cast gives tied weights (the LM head and the embeddings) two copies, which
    ``save_pretrained`` then writes twice (0.65 MB more per shipped bf16 model, 2026-12-05)."""
    cast: dict[tuple, Any] = {}
    out = {}
    for k, v in state.items():
        if not v.is_floating_point():
            out[k] = v
            continue
        key = (v.untyped_storage().data_ptr(), v.storage_offset(), tuple(v.shape), tuple(v.stride()))
        if key not in cast:
            cast[key] = v.to(dtype)
        out[k] = cast[key]
    return out


def save_hf_model(accelerator: Any, model: Any, processor: Any, out: Path, merge_lora: bool = True,
                  dtype: str = "float32", meta: dict[str, Any] | None = None, skip: tuple[str, ...] = ()) -> None:
    """Write model + processor in the Hugging Face layout: full weights (LoRA merged unless
    ``merge_lora`` is off, then the adapter alone), in ``dtype``, plus ``spatialrl_model.json`` = ``meta``.
    State-dict keys starting with a prefix in ``skip`` are left out (PPO's ``value_head.``: a submodule
    for training, shipped beside the model)."""
    unwrapped = accelerator.unwrap_model(model)
    state = accelerator.get_state_dict(model)  # gathers ZeRO-3 / FSDP shards onto the main process
    if not accelerator.is_main_process:
        return
    out.mkdir(parents=True, exist_ok=True)
    target = getattr(torch, dtype)
    if hasattr(unwrapped, "peft_config") and not merge_lora:
        unwrapped.save_pretrained(out, safe_serialization=True)
    else:
        import copy

        if hasattr(unwrapped, "peft_config"):
            clone = copy.deepcopy(unwrapped).merge_and_unload()
            state = None
        else:
            clone = unwrapped
        if skip:
            state = {k: v for k, v in (clone.state_dict() if state is None else state).items() if not k.startswith(skip)}
        if target != torch.float32:
            clone = copy.deepcopy(clone).to(target)
            state = None if state is None else _cast_keeping_ties(state, target)
        clone.save_pretrained(out, state_dict=state, safe_serialization=True)
    processor.save_pretrained(out)
    if meta is not None:
        from spatialrl.models.builtin import META_FILE

        atomic_write_json(out / META_FILE, meta)


def save_checkpoint(accelerator: Any, model: Any, processor: Any, output_dir: str | Path, step: int,
                    state: dict[str, Any], keep_last: int, skip: tuple[str, ...] = ()) -> Path:
    """Save a complete, resumable checkpoint atomically; prune all but the newest ``keep_last``."""
    root = checkpoint_root(output_dir)
    final = root / f"step-{step:06d}"
    tmp = root / f".tmp-step-{step:06d}"
    if accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    accelerator.wait_for_everyone()
    accelerator.save_state(str(tmp / "state"), safe_serialization=True)
    save_hf_model(accelerator, model, processor, tmp / "hf", skip=skip)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        atomic_write_json(tmp / STATE_FILE, state)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        for old in list_checkpoints(output_dir)[:-keep_last]:
            shutil.rmtree(old, ignore_errors=True)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Any, path: Path) -> dict[str, Any]:
    """Restore model, optimizer, scheduler and RNG states from ``path``; return its trainer state."""
    state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    accelerator.load_state(str(path / "state"))
    return state


# ------------------------------------------------------------------------------------------ logging
class Tracker:
    """Console + ``metrics.jsonl`` + optional TensorBoard/W&B; only the main process writes.

    Keys are slash-separated (``train/loss``, ``eval/overall/success_rate``), as in CleanRL and TRL.
    """

    def __init__(self, accelerator: Any, output_dir: str | Path, cfg: LoggingConfig, run_config: Any):
        self.active = accelerator.is_main_process
        self.accelerator = accelerator
        # accelerate's trackers (TensorBoard / W&B), chosen when the accelerator was made (tracker_backends)
        self.backends: list[str] = [str(getattr(t, "value", t)) for t in (accelerator.log_with or [])]
        self._jsonl: JsonlAppender | None = None
        self._t0 = time.perf_counter()
        if not self.active:
            return
        out = Path(output_dir)
        out.mkdir(parents=True, exist_ok=True)
        self._jsonl = JsonlAppender(out / "metrics.jsonl")
        if self.backends:
            # TensorBoard writes to <output_dir>/tensorboard; W&B logs to its project
            name = cfg.wandb_project if "wandb" in self.backends else "tensorboard"
            accelerator.init_trackers(name, config=_flat_config(config_to_dict(run_config)),
                                      init_kwargs={"wandb": {"dir": str(out)}})

    def log(self, step: int, metrics: dict[str, float], console: bool = True) -> None:
        """Record ``metrics`` everywhere; the console shows per-category success rates and the
        ``overall`` row of eval metrics only (the full set is in metrics.jsonl / TensorBoard)."""
        if not self.active:
            return
        record = {"step": step, "time": round(time.perf_counter() - self._t0, 3), **metrics}
        assert self._jsonl is not None
        self._jsonl.write(record)
        if self.backends:
            self.accelerator.log({k: v for k, v in metrics.items() if isinstance(v, int | float)}, step=step)
        if console:
            from rich.console import Console

            brief = {k: v for k, v in metrics.items()
                     if not k.startswith("eval/") or k.startswith("eval/overall/") or k.endswith("/success_rate")}
            shown = "  ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in brief.items())
            Console().print(f"[bold]step {step}[/bold]  {shown}")

    def phase(self, step: int, text: str) -> None:
        """A console-only progress line inside an update (an 11B update can take minutes; a run cut
        mid-update still shows how far it got). Not written to metrics.jsonl."""
        if self.active:
            from rich.console import Console

            Console().print(f"[dim]step {step} · {text} ({time.perf_counter() - self._t0:.0f} s into the run)[/dim]")

    def close(self) -> None:
        if self._jsonl is not None:
            self._jsonl.close()
        if self.backends and self.active:
            self.accelerator.end_training()


def tracker_backends(cfg: LoggingConfig) -> list[str]:
    """accelerate ``log_with`` for ``logging.report_to``: auto = TensorBoard when installed; W&B only by name."""
    import importlib.util

    if cfg.report_to == "none":
        return []
    for name, module in (("tensorboard", "tensorboard"), ("wandb", "wandb")):
        if cfg.report_to == name and importlib.util.find_spec(module) is None:
            raise DataError(f"logging.report_to={name} but {name} is not installed (pip install {name})")
    if cfg.report_to == "auto":
        return ["tensorboard"] if importlib.util.find_spec("tensorboard") is not None else []
    return [cfg.report_to]


def _flat_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"optim": {"lr": 1e-3}}`` → ``{"optim.lr": 1e-3}``, other values as text (TensorBoard's hparams
    take scalars and strings only)."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(_flat_config(value, name + "."))
        elif isinstance(value, bool | int | float | str):
            flat[name] = value
        else:
            flat[name] = json.dumps(value)
    return flat


def read_metrics(output_dir: str | Path) -> Iterator[dict[str, Any]]:
    """The records of a run's ``metrics.jsonl``."""
    from spatialrl.io import read_jsonl

    return read_jsonl(Path(output_dir) / "metrics.jsonl")
