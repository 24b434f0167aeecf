"""Typed training configs: dataclasses + a YAML recipe + dotted command-line overrides.

A recipe is a YAML file whose nested mappings mirror the dataclass fields; ``--set a.b=value`` (or the
shorthand ``--a.b=value``) on the command line overrides single fields, in the one override syntax of
every command (``spatialrl/overrides.py``: values are read as YAML, so ``--optim.lr=1e-5`` is a float
and ``--model.lora.enabled=true`` a bool). Everything is validated against the field types
before training starts: an unknown key, a wrong type or a value outside a ``Literal`` is an error that
names the file (or flag) and the key, and suggests the closest valid key. Each field's help text is
written once, in ``field(metadata={"help": ...})`` (TRL style), and ``spatialrl train sft --help-config``
prints them.

Renamed keys: a config class lists ``RENAMED_KEYS = {old: new}`` (a ``ClassVar``); the loader accepts the
old spelling in recipes and overrides for one release, with a ``FutureWarning`` that names the file (or
flag) and the new key. Giving both spellings is an error.

Shared blocks (model, optimiser, checkpointing, logging, closed-loop eval) live here so the RL
trainers reuse them; each trainer defines its own top-level dataclass (``SFTConfig`` below).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from spatialrl.errors import ConfigError
from spatialrl.io import read_yaml
from spatialrl.overrides import SET, parse_assignment, parse_value


def _help(text: str) -> dict[str, str]:
    return {"help": text}


# ----------------------------------------------------------------------------------------------- blocks
@dataclass
class LoraConfig:
    enabled: bool = field(default=False, metadata=_help("Train LoRA adapters (peft) instead of all weights."))
    r: int = field(default=16, metadata=_help("LoRA rank."))
    alpha: int = field(default=32, metadata=_help("LoRA alpha (scale = alpha / r)."))
    dropout: float = field(default=0.05, metadata=_help("Dropout on the LoRA branch."))
    target_modules: list[str] = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        metadata=_help("Module name suffixes that get adapters (language model linear layers by default)."),
    )
    merge_on_save: bool = field(
        default=True, metadata=_help("Also write a merged full model in the final folder (loadable without peft).")
    )


@dataclass
class ModelConfig:
    path: str = field(
        default="preset:tiny",
        metadata=_help("What to start from: 'preset:NAME' (fresh built-in model, e.g. preset:small), "
                       "'builtin:NAME' (shipped weights) or a Hugging Face model folder."),
    )
    preset_overrides: dict[str, Any] = field(
        default_factory=dict,
        metadata=_help("Change sizes of a preset:NAME model, e.g. {hidden_size: 384, num_layers: 5} "
                       "(fields of spatialrl.models.builtin.Preset)."),
    )
    save_dtype: Literal["float32", "bfloat16"] = field(
        default="float32", metadata=_help("dtype of the final model's weights (bfloat16 halves the shipped size).")
    )
    dtype: Literal["auto", "float32", "bfloat16"] = field(
        default="auto", metadata=_help("Training precision: auto = bf16 mixed precision on GPU, float32 on CPU.")
    )
    freeze_vision: bool = field(
        default=False, metadata=_help("Freeze the vision tower (TVRBench froze it for SFT and RL).")
    )
    gradient_checkpointing: bool = field(default=False, metadata=_help("Trade compute for activation memory."))
    attn_implementation: str | None = field(
        default=None, metadata=_help("e.g. sdpa, eager, flash_attention_2; None = transformers' default.")
    )
    cudnn_attention: bool = field(default=False, metadata=_help(
        "Let PyTorch pick its cuDNN attention kernel for scaled_dot_product_attention on CUDA. Off by "
        "default: its bf16 backward returns NaN gradients at some batch shapes while the loss stays finite "
        "(docs/training.md, 'NaN gradients'); flash / memory-efficient attention take over at the same speed."))
    compile: bool = field(default=False, metadata=_help(
        "Regional torch.compile: every repeated block (the decoder layers, the vision blocks) compiled in place, "
        "one compile shared by the blocks of a kind, the rest eager (models whose top-level forward has "
        "data-dependent Python, as VLMs do, compile badly whole). Fuses the elementwise work around each "
        "matmul; benchmarks/sft_speed.py --compile measures it (docs/training.md)."))
    max_pixels: int | None = field(default=None, metadata=_help(
        "Set the image processor's pixel bound (Qwen families: its longest_edge, in pixels of area; images "
        "above it are resized down) before training, and ship it with the model. None keeps the model's. The "
        "built-in small preset's is 224*224 = 50176 (64 tokens), so a 448-px V-IRL grid reaches it at 224 "
        "unless this is 200704 (448*448, 256 tokens)."))
    lora: LoraConfig = field(default_factory=LoraConfig)


@dataclass
class OptimConfig:
    lr: float = field(default=1e-5, metadata=_help("Peak learning rate (TVRBench VA-SFT: 1e-5)."))
    weight_decay: float = field(default=0.0, metadata=_help("AdamW weight decay."))
    beta1: float = field(default=0.9, metadata=_help("AdamW beta1."))
    beta2: float = field(default=0.999, metadata=_help("AdamW beta2."))
    eps: float = field(default=1e-8, metadata=_help("AdamW epsilon."))
    schedule: Literal["cosine", "linear", "constant"] = field(
        default="cosine", metadata=_help("LR after warmup: cosine (TVRBench) / linear decay / constant.")
    )
    warmup_ratio: float = field(default=0.1, metadata=_help("Fraction of total updates spent warming up (TVRBench: 0.1)."))
    min_lr_ratio: float = field(default=0.0, metadata=_help("Floor of the decay as a fraction of lr."))
    max_grad_norm: float = field(default=1.0, metadata=_help("Global gradient clipping; <= 0 disables it."))
    max_nonfinite_updates: int = field(default=20, metadata=_help(
        "Updates whose gradient norm is NaN/inf are skipped (weights and optimiser state untouched); this "
        "many in a row stop the run with an error (0 = never skip: step whatever the gradients are)."))

    def __post_init__(self) -> None:
        _at_least(self, lr=0.0, weight_decay=0.0, min_lr_ratio=0.0, max_nonfinite_updates=0)
        _above(self, eps=0.0)
        for name in ("beta1", "beta2"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ConfigError(f"{name}: must be in [0, 1), got {getattr(self, name)}")


@dataclass
class CheckpointConfig:
    every: int = field(default=0, metadata=_help("Save a checkpoint every N optimiser updates (0 = only at the end)."))
    keep_last: int = field(default=2, metadata=_help("Checkpoints kept on disk (older ones are deleted)."))
    resume: str = field(
        default="auto",
        metadata=_help("auto = continue from the newest checkpoint in output_dir if any; never; or a checkpoint folder."),
    )

    def __post_init__(self) -> None:
        _at_least(self, every=0)


@dataclass
class LoggingConfig:
    every: int = field(default=10, metadata=_help("Log train metrics every N optimiser updates."))
    report_to: Literal["auto", "none", "tensorboard", "wandb"] = field(
        default="auto", metadata=_help("auto = TensorBoard when installed; W&B only when asked for by name.")
    )
    wandb_project: str = field(default="spatialrl", metadata=_help("W&B project (report_to=wandb)."))

    def __post_init__(self) -> None:
        _at_least(self, every=1)


@dataclass
class ClosedLoopEvalConfig:
    every: int = field(default=0, metadata=_help("Run closed-loop eval every N updates (0 = only at the end if task set)."))
    task: str | None = field(default=None, metadata=_help("Task suite to evaluate on (tvr, virl, gp); None = no eval."))
    data: str | None = field(default=None, metadata=_help("Task data (TVR bench folder, V-IRL dataset folder)."))
    split: str | None = field(default=None, metadata=_help("Held-out split (task-specific)."))
    options: dict[str, Any] = field(default_factory=dict, metadata=_help("Extra task options, as `spatialrl eval --set`."))
    episodes: int = field(default=16, metadata=_help("Episodes per evaluation: the first N of each split (TVR: spread over categories)."))
    batch_size: int = field(default=16, metadata=_help("Episodes stepped together per generate call."))
    max_new_tokens: int = field(default=64, metadata=_help("Generation budget per turn."))

    def __post_init__(self) -> None:
        _at_least(self, every=0, episodes=1, batch_size=1, max_new_tokens=1)
        if self.task is not None:
            check_task_name(self.task)


# ------------------------------------------------------------------------------------------------- SFT
@dataclass
class SFTDataConfig:
    train: str = field(default="", metadata=_help("Dataset folder written by `spatialrl data sft` (required)."))
    eval: str | None = field(default=None, metadata=_help("Held-out dataset folder: loss/token accuracy on it."))
    max_length: int = field(default=8192, metadata=_help("Longest tokenised sample allowed; longer is an error."))
    eval_samples: int = field(default=256, metadata=_help("Held-out samples scored per evaluation (first N)."))
    num_workers: int = field(default=0, metadata=_help("DataLoader worker processes (image decoding + processor)."))
    engine: Literal["collator", "tensor"] = field(
        default="collator",
        metadata=_help("collator = per-sample processor calls in DataLoader workers (any family); tensor = the "
                       "dataset compiled once to arrays and batched on the device (Qwen-VL families; "
                       "train/tensor_data.py), the GPU-speed path."))
    images_on_device: bool = field(
        default=True,
        metadata=_help("tensor engine: keep the dataset's frames on the GPU (fastest), or false: memory-mapped on "
                       "the host and copied per batch (for frames larger than the GPU's share, e.g. several runs "
                       "on one GPU)."))


@dataclass
class SFTConfig:
    output_dir: str = field(default="runs/sft", metadata=_help("Checkpoints, logs, final model."))
    seed: int = field(default=0, metadata=_help("Seeds model init, data order and dropout."))
    epochs: float = field(default=5.0, metadata=_help("Passes over the data (both papers: 5)."))
    max_steps: int = field(default=0, metadata=_help("Stop after N optimiser updates (0 = from epochs)."))
    per_device_batch_size: int = field(default=4, metadata=_help("Samples per forward pass per process."))
    grad_accum: int = field(default=1, metadata=_help("Forward passes accumulated per optimiser update."))
    model: ModelConfig = field(default_factory=ModelConfig)
    data: SFTDataConfig = field(default_factory=SFTDataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    eval: ClosedLoopEvalConfig = field(default_factory=ClosedLoopEvalConfig)
    eval_loss_every: int = field(default=0, metadata=_help("Score data.eval every N updates (0 = only at the end)."))
    check_sync_every: int = field(
        default=0, metadata=_help("Every N updates (and at the end) compare a digest of each process's parameters "
                                  "and fail on a mismatch (multi-process debugging; 0 = off; not for FSDP).")
    )
    time_budget_minutes: float = field(
        default=0.0,
        metadata=_help("Train for this long instead of a fixed number of updates (epochs/max_steps still cap it): "
                       "the LR schedule runs over wall-clock time and ends at the budget. For time-boxed GPU jobs; "
                       "not bit-reproducible (0 = off)."),
    )

    def __post_init__(self) -> None:
        if not self.data.train:
            raise ConfigError("data.train: required (a folder written by `spatialrl data sft`)")
        for name in ("per_device_batch_size", "grad_accum"):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name}: must be >= 1, got {getattr(self, name)}")
        _at_least(self, epochs=0.0, max_steps=0, time_budget_minutes=0.0, eval_loss_every=0, check_sync_every=0)
        if self.epochs <= 0 and self.max_steps <= 0:
            raise ConfigError("set epochs > 0 or max_steps > 0 (both are 0: nothing to train)")
        if not 0.0 <= self.optim.warmup_ratio < 1.0:
            raise ConfigError(f"optim.warmup_ratio: must be in [0, 1), got {self.optim.warmup_ratio}")
        if self.checkpoint.keep_last < 1:
            raise ConfigError(f"checkpoint.keep_last: must be >= 1, got {self.checkpoint.keep_last}")


# ------------------------------------------------------------------------------------------ checks
def _at_least(cfg: Any, **minimum: float) -> None:
    """``key: must be >= LOW`` for each field below its minimum (NaN/inf never get here: see _coerce)."""
    for name, low in minimum.items():
        value = getattr(cfg, name)
        if isinstance(value, int | float) and not (value >= low):
            raise ConfigError(f"{name}: must be {'an integer' if isinstance(low, int) else 'a number'} >= {low}, "
                              f"got {value}")


def _above(cfg: Any, **minimum: float) -> None:
    for name, low in minimum.items():
        value = getattr(cfg, name)
        if not value > low:
            raise ConfigError(f"{name}: must be > {low}, got {value}")


def check_task_name(name: str, key: str = "task") -> None:
    """``key`` names one of the task suites (tvr, virl, gp, or one registered at run time)."""
    from spatialrl.envs import registry

    known = sorted(set(registry.task_names()) | set(registry._SUITES))
    if name not in known:
        raise ConfigError(f"{key}: unknown task {name!r}; expected one of {', '.join(known)}")


# ------------------------------------------------------------------------------------------ machinery
def parse_overrides(args: list[str]) -> dict[str, Any]:
    """``["--optim.lr=1e-5", "--model.lora.enabled", "true", "--set", "seed=3"]`` →
    ``{"optim.lr": 1e-5, "model.lora.enabled": True, "seed": 3}``.

    ``--set KEY=VALUE`` is the syntax of every command (``spatialrl/overrides.py``: values are YAML,
    ``null`` for None, errors ``<flag><key>: <problem>``); ``--KEY=VALUE`` and ``--KEY VALUE`` are the
    trainers' shorthand for it, read by the same functions.
    """
    out: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--set" or arg.startswith("--set="):
            if arg == "--set":
                if i + 1 >= len(args):
                    raise ConfigError("--set: missing KEY=VALUE")
                text, i = args[i + 1], i + 2
            else:
                text, i = arg[len("--set="):], i + 1
            key, value = parse_assignment(text, SET)
        elif not arg.startswith("--") or len(arg) < 3 or arg[2] == "=":
            raise ConfigError(f"override {arg!r}: expected --set KEY=VALUE or --KEY=VALUE (e.g. --optim.lr=1e-5)")
        elif "=" in arg:
            key, raw = arg[2:].split("=", 1)
            value, i = parse_value(raw, key, "--"), i + 1
        else:
            if i + 1 >= len(args) or args[i + 1].startswith("--"):
                raise ConfigError(f"{arg}: missing value (use {arg}=VALUE)")
            key = arg[2:]
            value, i = parse_value(args[i + 1], key, "--"), i + 2
        out[key] = value
    return out


def _dataclass_fields(cls: type) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls)}


def _resolved_hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """Check ``value`` against the annotation ``tp`` (ints are accepted for floats); return it converted."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)

    def fail(expected: str) -> ConfigError:
        return ConfigError(f"{source}{key}: expected {expected}, got {value!r}")

    if tp is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(value, arg, key, source)
            except ConfigError as e:
                errors.append(str(e))
        raise ConfigError(errors[0]) if len(errors) == 1 else fail(str(tp).replace("typing.", ""))
    if origin is Literal:
        if value not in args:
            raise fail("one of " + ", ".join(map(repr, args)))
        return value
    if origin is list:
        if not isinstance(value, list):
            raise fail("a list")
        return [_coerce(v, args[0], f"{key}[{i}]", source) for i, v in enumerate(value)] if args else value
    if origin is dict:
        if not isinstance(value, dict):
            raise fail("a mapping")
        return dict(value)
    if dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise fail(f"a mapping of {tp.__name__} fields")
        return _build(tp, value, source, key)
    if tp is bool:
        if not isinstance(value, bool):
            raise fail("true/false")
        return value
    if tp is float:
        if isinstance(value, str):  # YAML 1.1 reads `1e-5` (no dot) as a string
            try:
                number = float(value)
            except ValueError:
                raise fail("a number") from None
            if not math.isfinite(number):
                raise fail("a finite number (not NaN or infinity)")
            return number
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise fail("a number")
        if not math.isfinite(value):
            raise fail("a finite number (not NaN or infinity)")
        return float(value)
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise fail("an integer")
        return value
    if tp is str:
        if isinstance(value, bool) or value is None or isinstance(value, list | dict):
            raise fail("a string")
        return str(value)  # YAML reads `path: 123` as an int; a string field takes it as text
    raise ConfigError(f"{source}{key}: unsupported field type {tp}")


def _build(cls: type, data: dict[str, Any], source: str, keypath: str = "") -> Any:
    """Instantiate dataclass ``cls`` from ``data``; ``source`` prefixes errors (``"file.yaml: "``)."""
    fields = _dataclass_fields(cls)
    hints = _resolved_hints(cls)
    prefix = f"{keypath}." if keypath else ""
    kwargs = {}
    for key, value in data.items():
        if key not in fields:
            close = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" (did you mean {prefix}{close[0]}?)" if close else ""
            raise ConfigError(
                f"{source}{prefix}{key}: unknown key{hint}; valid keys here: {', '.join(sorted(fields))}"
            )
        kwargs[key] = _coerce(value, hints[key], f"{prefix}{key}", source)
    try:
        return cls(**kwargs)
    except ConfigError as e:
        if str(e).startswith(source):
            raise
        raise ConfigError(f"{source}{prefix}{e}") from None


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    parts = dotted.split(".")
    node = tree
    for p in parts[:-1]:
        child = node.get(p)
        if child is None:
            child = node[p] = {}
        if not isinstance(child, dict):
            raise ConfigError(f"--{dotted}: {p!r} is a value, not a group")
        node = child
    node[parts[-1]] = value


def load_config(cls: type, path: str | Path | None, overrides: list[str] | dict[str, Any] | None = None) -> Any:
    """Build ``cls`` from a YAML recipe plus overrides (flag list or ``{"a.b": value}``), validated."""

    tree: dict[str, Any] = {}
    source = "config: "
    if path is not None:
        path = Path(path)
        loaded = read_yaml(path, "config file not found", ConfigError)
        if loaded is not None and not isinstance(loaded, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of config keys")
        tree = loaded or {}
        source = f"{path}: "
    _rename_keys(cls, tree, source)
    if isinstance(overrides, list):
        overrides = parse_overrides(overrides)
    for dotted, value in (overrides or {}).items():
        dotted = _renamed_path(cls, dotted)
        _check_key_path(cls, dotted)
        _set_dotted(tree, dotted, value)
    return _build(cls, tree, source)


def _deprecated(where: str, old: str, new: str) -> None:
    warnings.warn(f"{where}{old}: renamed to {new}; the old key is accepted until the next release, "
                  f"then it is an error", FutureWarning, stacklevel=4)


def _rename_keys(cls: type, tree: dict[str, Any], source: str, prefix: str = "") -> None:
    """Rewrite old key spellings in a recipe tree to the current ones (``RENAMED_KEYS``), warning once each."""
    if not (isinstance(cls, type) and dataclasses.is_dataclass(cls)):
        return
    for old, new in getattr(cls, "RENAMED_KEYS", {}).items():
        if old in tree:
            if new in tree:
                raise ConfigError(f"{source}{prefix}{old}: renamed to {prefix}{new}, which is also given; keep only {new}")
            _deprecated(source, prefix + old, prefix + new)
            tree[new] = tree.pop(old)
    hints = _resolved_hints(cls)
    for key, value in tree.items():
        if isinstance(value, dict) and key in hints:
            _rename_keys(hints[key], value, source, f"{prefix}{key}.")


def _renamed_path(cls: type, dotted: str) -> str:
    """An override's dotted key with old spellings replaced (``--ppo_epochs`` → ``--epochs``), with a warning."""
    node: Any = cls
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
            break
        new = getattr(node, "RENAMED_KEYS", {}).get(part)
        if new is not None:
            _deprecated("--", ".".join(parts[:i] + [part]), ".".join(parts[:i] + [new]))
            parts[i] = part = new
        node = _resolved_hints(node).get(part)
    return ".".join(parts)


def _check_key_path(cls: type, dotted: str) -> None:
    """Reject an override naming a key that does not exist, before it is merged into the tree."""
    node: Any = cls
    for i, part in enumerate(dotted.split(".")):
        if not (isinstance(node, type) and dataclasses.is_dataclass(node)):
            raise ConfigError(f"--{dotted}: {'.'.join(dotted.split('.')[:i])} has no sub-keys")
        fields = _dataclass_fields(node)
        if part not in fields:
            close = difflib.get_close_matches(part, list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ConfigError(f"--{dotted}: unknown key {part!r}{hint}; valid: {', '.join(sorted(fields))}")
        node = _resolved_hints(node)[part]
        if typing.get_origin(node) in (typing.Union, types.UnionType):
            inner = [a for a in typing.get_args(node) if a is not type(None)]
            node = inner[0] if len(inner) == 1 else node


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """Plain nested dict of a config (saved beside every checkpoint and run)."""
    return dataclasses.asdict(cfg)


def config_help(cls: type, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """``(dotted key, type, default, help)`` for every leaf field, in declaration order."""
    rows = []
    hints = _resolved_hints(cls)
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        key = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            rows.extend(config_help(tp, key + "."))
            continue
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        else:
            default = "(required)"
        type_name = getattr(tp, "__name__", None) or str(tp).replace("typing.", "")
        rows.append((key, type_name, repr(default), f.metadata.get("help", "")))
    return rows
